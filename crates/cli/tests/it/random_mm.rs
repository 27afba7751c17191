//! Images in chat (`--dataset-name random-mm`, datasets with image files) end to end against
//! the simulator: the prompt tokens of every request include its image tokens, counted alike
//! by the client (from the model's vision config) and by the simulator (from the image header);
//! a text-only model is refused before the run, and a server that refuses images leaves
//! recorded errors.
//!
//! Expected counts, for Qwen2.5-VL (patch 14, merge 2, images resized to multiples of 28):
//! 256×256 → 252×252 → 18·18/4 = 81 tokens; 28×28 is scaled up to the 56×56 minimum area →
//! 4 tokens; 300×200 → 308×196 → 22·14/4 = 77 tokens. The simulator's chat template adds 8
//! tokens to a one-message conversation; virtual time takes the dataset's lengths as they are.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use servebench_metrics::RequestRecord;

use crate::common::{self, bin, text};

const QWEN_VL: &str = "Qwen/Qwen2.5-VL-7B-Instruct --gpu h100";

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("random-mm", name)
}

/// `servebench run` in `dir`, with the chat backend unless `args` name one.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = bin();
    cmd.current_dir(dir).args(["run", "--disable-tqdm"]);
    if !args.contains(&"--backend") {
        cmd.args(["--backend", "openai-chat"]);
    }
    cmd.args(args).output().expect("spawn servebench")
}

/// The per-request records of the one run in `dir`, by id.
fn records(dir: &Path) -> Vec<RequestRecord> {
    let path = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("a records file");
    let mut r: Vec<RequestRecord> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    r.sort_by_key(|r| r.id);
    r
}

const RANDOM_MM: [&str; 12] = [
    "--dataset-name",
    "random-mm",
    "--num-prompts",
    "6",
    "--random-input-len",
    "32",
    "--random-output-len",
    "4",
    "--random-mm-base-items-per-request",
    "2",
    "--random-mm-bucket-config",
    "{(256, 256, 1): 1.0}",
];

#[test]
fn virtual_time_prompts_hold_text_and_image_tokens() {
    let dir = tempdir("virtual");
    let mut args = vec!["--virtual-time", "--sim", QWEN_VL];
    args.extend(RANDOM_MM);
    let out = run_in(&dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(&dir);
    assert_eq!(recs.len(), 6);
    for r in &recs {
        let images = r.images.expect("images recorded");
        assert_eq!((images.count, images.tokens), (2, 162), "{r:?}");
        assert_eq!(r.intended_input_tokens, 32 + 162);
        assert_eq!(r.input_tokens, 32 + 162);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_simulator_counts_image_parts_in_usage() {
    let dir = tempdir("http");
    let mut args = vec!["--sim", QWEN_VL];
    args.extend(RANDOM_MM);
    let out = run_in(&dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(&dir);
    assert_eq!(recs.len(), 6);
    for r in &recs {
        assert!(r.failure.is_none(), "{r:?}");
        assert_eq!(r.input_source, servebench_metrics::CountSource::Usage);
        // The server's usage: its chat template (8), the text (32) and two images (2 × 81).
        assert_eq!(r.input_tokens, 8 + 32 + 162, "{r:?}");
        assert_eq!(r.intended_input_tokens, 32 + 162);
        assert_eq!(r.images.unwrap().tokens, 162);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_text_only_model_is_refused_before_the_run() {
    let dir = tempdir("text-only");
    // The default simulated model (Llama 3.1 8B) has no vision encoder.
    let mut args = vec!["--virtual-time"];
    args.extend(RANDOM_MM);
    let out = run_in(&dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'llama-3.1-8b'") && err.contains("vision"),
        "{err}"
    );

    // An external server counts its own image tokens (its usage reports them), as vLLM's
    // client leaves them uncounted: a model the catalog does not know is said so, and the run
    // goes on (here to a port where nothing listens).
    let mut args = vec![
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
    ];
    args.extend(RANDOM_MM);
    let out = run_in(&dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("image tokens are not counted")
            && err.contains("'meta-llama/Llama-3.1-8B-Instruct' has no known vision config"),
        "{err}"
    );
    assert!(err.contains("every request failed (6 connect)"), "{err}");
    let ran = std::fs::read_dir(dir.join("results/runs"))
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    assert!(ran, "the run went on and wrote its result");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn misused_flags_are_refused() {
    let dir = tempdir("flags");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--backend", "openai", "--dataset-name", "random-mm"],
            "use --backend openai-chat",
        ),
        (
            &[
                "--dataset-name",
                "random-mm",
                "--random-mm-bucket-config",
                "{(720, 1280, 16): 1}",
            ],
            "video bucket",
        ),
        (
            &[
                "--dataset-name",
                "random-mm",
                "--random-mm-limit-mm-per-prompt",
                "{\"image\": x}",
            ],
            "--random-mm-limit-mm-per-prompt",
        ),
        (
            &["--random-mm-base-items-per-request", "3"],
            "apply to --dataset-name random-mm only",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["--virtual-time", "--sim", QWEN_VL];
        all.extend(args);
        let out = run_in(&dir, &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// A valid RGB PNG of `w × h` grey pixels: signature, IHDR, one stored (uncompressed) zlib
/// IDAT, IEND.
fn png(w: u32, h: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = 0xFFFF_FFFFu32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend(data);
        out.extend(&body);
        out.extend(crc32(&body).to_be_bytes());
    }
    let mut raw = Vec::new();
    for _ in 0..h {
        raw.push(0); // filter: none
        raw.extend(std::iter::repeat_n(128u8, w as usize * 3));
    }
    // zlib: header, stored blocks of at most 65535 bytes, Adler-32.
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, b) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        let len = b.len() as u16;
        z.extend(len.to_le_bytes());
        z.extend((!len).to_le_bytes());
        z.extend(*b);
    }
    let (mut a, mut s) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65_521;
        s = (s + a) % 65_521;
    }
    z.extend(((s << 16) | a).to_be_bytes());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

#[test]
fn a_custom_dataset_sends_its_image_files() {
    let dir = tempdir("custom");
    std::fs::create_dir_all(dir.join("img")).unwrap();
    std::fs::write(dir.join("img/small.png"), png(28, 28)).unwrap();
    std::fs::write(dir.join("img/wide.png"), png(300, 200)).unwrap();
    let data = dir.join("data.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"What colour is this square?\", \"image\": \"img/small.png\"}\n\
         {\"prompt\": \"Compare the two pictures.\", \"image\": [\"img/small.png\", \"img/wide.png\"]}\n",
    )
    .unwrap();
    let args = [
        "--sim",
        QWEN_VL,
        "--dataset-name",
        "custom",
        "--dataset-path",
        data.to_str().unwrap(),
        "--num-prompts",
        "0",
        "--disable-shuffle",
        "--custom-output-len",
        "3",
    ];
    let out = run_in(&dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(&dir);
    let images: Vec<(u32, u64)> = recs
        .iter()
        .map(|r| {
            let i = r.images.unwrap();
            (i.count, i.tokens)
        })
        .collect();
    assert_eq!(images, [(1, 4), (2, 4 + 77)]);
    for r in &recs {
        assert!(r.failure.is_none(), "{r:?}");
        // The server counted the same image tokens as the client (and its template's 8).
        assert_eq!(r.input_tokens, r.intended_input_tokens + 8, "{r:?}");
    }

    // A missing image names the dataset line and the path.
    std::fs::write(
        &data,
        "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"image\": \"img/missing.png\"}\n",
    )
    .unwrap();
    let out = run_in(&dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("data.jsonl:2") && err.contains("img/missing.png"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

struct Sim {
    child: Child,
    url: String,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `servebench sim` serving a text-only model on a free port.
fn start_text_sim() -> Sim {
    let mut child = bin()
        .args(["sim", "llama-3.1-8b", "--gpu", "h100", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sim");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("sim printed its address")
            .expect("utf-8");
        if let Some(rest) = line.split("Serving on ").nth(1) {
            break rest.split_whitespace().next().expect("url").to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Sim { child, url }
}

#[test]
fn a_server_that_refuses_images_leaves_recorded_errors() {
    let dir = tempdir("refused");
    let sim = start_text_sim();
    // The client benchmarks a vision model by name (`--model`, whose vision config the catalog
    // has) under the name the server serves (`--served-model-name`, as with vLLM); the server,
    // a text model, answers 400 to every request.
    let mut args = vec![
        "--base-url",
        &sim.url,
        "--model",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "--served-model-name",
        "llama-3.1-8b",
    ];
    args.extend(RANDOM_MM);
    let out = run_in(&dir, &args);
    let recs = records(&dir);
    assert_eq!(recs.len(), 6, "{}", text(&out));
    for r in &recs {
        let f = r.failure.as_ref().expect("a failed request");
        assert_eq!(f.status, Some(400), "{f:?}");
        assert!(f.message.contains("not a multimodal model"), "{f:?}");
    }
    drop(sim);
    std::fs::remove_dir_all(dir).ok();
}

/// The guide's virtual-time example runs as written (fewer prompts) and each record holds its
/// two images' 162 tokens.
#[test]
fn readme_example_runs_as_written() {
    let commands = crate::readme_examples::readme_commands(
        "servebench run --virtual-time --sim \"Qwen/Qwen2.5-VL-7B-Instruct",
    );
    assert_eq!(commands.len(), 1, "the guide's random-mm example");
    let dir = tempdir("readme");
    let mut args = commands[0][1..].to_vec();
    let i = args.iter().position(|w| w == "--num-prompts").unwrap();
    args[i + 1] = "3".into();
    let out = bin()
        .current_dir(&dir)
        .args(&args)
        .arg("--disable-tqdm")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}\n{}", text(&out));
    for r in records(&dir) {
        assert_eq!(r.images.map(|i| i.tokens), Some(162), "{r:?}");
        assert_eq!(r.input_tokens, 128 + 162);
    }
    std::fs::remove_dir_all(dir).ok();
}
