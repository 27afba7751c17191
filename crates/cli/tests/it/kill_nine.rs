//! Crash safety of the records file: `servebench run` killed with SIGKILL at random moments
//! mid-run leaves a `*.requests.jsonl` whose every line is a whole, valid record, but for the
//! record being written at the kill, which can only be cut short at the very end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use servebench_metrics::{read_jsonl_counted, RequestRecord};

const KILLS: usize = 20;
/// Runs go on side by side so 20 process start-ups fit in the time budget.
const LANES: usize = 2;
const SEED: u64 = 0x6b69_6c6c_2d39;

/// A word-level tokenizer: loads in milliseconds, so a run starts measuring in about a second
/// (the built-in tokenizer takes seconds to load in a debug build).
const TOKENIZER_JSON: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null,
  "decoder": null,
  "model": {
    "type": "WordLevel",
    "vocab": {"[UNK]": 0, "the": 1, "time": 2, "of": 3, "river": 4, "stone": 5, "light": 6, "north": 7, "quiet": 8},
    "unk_token": "[UNK]"
  }
}"#;

/// What one killed run left behind.
struct Outcome {
    records: usize,
    kill_after_ms: u64,
}

fn records_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
}

fn spawn_run(dir: &Path, tokenizer: &Path, seed: u64) -> Child {
    let tok = tokenizer.to_string_lossy();
    Command::new(env!("CARGO_BIN_EXE_servebench"))
        .current_dir(dir)
        .args([
            "run",
            "--sim",
            &format!("llama-3.1-8b --gpu h100 --max-num-seqs 256 --tokenizer {tok}"),
            "--tokenizer",
            &tok,
            // Far more than a run can finish before it is killed: it is always mid-run.
            "--num-prompts",
            "600",
            "--request-rate",
            "100",
            "--random-input-len",
            "32",
            "--random-output-len",
            "48",
            "--seed",
            &seed.to_string(),
            "--disable-tqdm",
            "--output-dir",
            "out",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn servebench run")
}

fn kill_nine(child: &mut Child) {
    // `Child::kill` sends SIGKILL on Unix.
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
}

/// Every line but the last must be a whole record ending in a newline: a line written in
/// pieces, or a record lost from the middle, is exactly what this guards against. The last line
/// may be cut: each record goes to the OS in one `write`, but Linux copies a write into the page
/// cache page by page and a SIGKILL arriving between two pages ends the call short, so the record
/// being written at the kill can be left partial (only ever the last one). The reader the reports
/// use must then drop exactly that line and say so.
fn check_every_line(path: &Path, context: &str) -> usize {
    let bytes = std::fs::read(path).expect("read records");
    let whole_end = match bytes.last() {
        None | Some(b'\n') => bytes.len(),
        Some(_) => bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1),
    };
    let (whole, tail) = bytes.split_at(whole_end);
    let mut n = 0;
    for (i, line) in whole.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<RequestRecord>(line) {
            panic!(
                "{context}: {}:{} is not a valid record ({e}): {:?}",
                path.display(),
                i + 1,
                String::from_utf8_lossy(&line[..line.len().min(200)])
            );
        }
        n += 1;
    }
    if !tail.is_empty() {
        // A cut record is a prefix of one, never a whole record without its newline.
        assert!(
            serde_json::from_slice::<RequestRecord>(tail).is_err(),
            "{context}: the last line is a whole record without its newline"
        );
    }
    // The reader the reports use agrees: every whole record, and the cut one dropped and noted.
    let read = read_jsonl_counted(path).expect("read_jsonl");
    assert_eq!(read.records.len(), n, "{context}");
    assert_eq!(read.had_partial_tail(), !tail.is_empty(), "{context}");
    n
}

fn lane(root: &Path, tokenizer: &Path, lane: usize, kills: usize) -> Vec<Outcome> {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED + lane as u64);
    let mut outcomes = Vec::new();
    for k in 0..kills {
        let dir = root.join(format!("lane{lane}-kill{k}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let kill_after = Duration::from_millis(rng.random_range(50..=1500));
        let mut child = spawn_run(&dir, tokenizer, rng.random());
        let started = Instant::now();
        // Wait for the first record on disk, then let the run go on for the drawn time.
        let path = loop {
            if let Some(p) = records_file(&dir.join("out")) {
                if std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false) {
                    break p;
                }
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("run exited before its first record: {status:?}");
            }
            if started.elapsed() > Duration::from_secs(60) {
                kill_nine(&mut child);
                panic!("no record within 60 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        std::thread::sleep(kill_after);
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the run finished before it was killed: make it longer"
        );
        kill_nine(&mut child);
        let context = format!(
            "lane {lane} kill {k} ({} ms after the first record)",
            kill_after.as_millis()
        );
        let records = check_every_line(&path, &context);
        assert!(records > 0, "{context}");
        outcomes.push(Outcome {
            records,
            kill_after_ms: kill_after.as_millis() as u64,
        });
    }
    outcomes
}

#[test]
fn sigkill_at_random_moments_never_leaves_an_invalid_line() {
    let _exclusive = crate::common::exclusive();
    let root = std::env::temp_dir().join(format!("servebench-kill-nine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("dir");
    let tokenizer = root.join("tokenizer.json");
    std::fs::write(&tokenizer, TOKENIZER_JSON).expect("tokenizer");

    let started = Instant::now();
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..LANES)
            .map(|l| {
                let (root, tokenizer) = (&root, &tokenizer);
                s.spawn(move || lane(root, tokenizer, l, KILLS / LANES))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("lane"))
            .collect()
    });
    assert_eq!(outcomes.len(), KILLS);
    let total: usize = outcomes.iter().map(|o| o.records).sum();
    let longest = outcomes.iter().map(|o| o.kill_after_ms).max().unwrap_or(0);
    eprintln!(
        "{KILLS} kills in {:.1} s: {total} records, all valid (longest run {longest} ms after its first record)",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&root);
}
