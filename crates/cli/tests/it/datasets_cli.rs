//! vLLM's offline datasets end to end (`sonnet`, `prefix_repetition`, `hf` from a local
//! copy), each run in virtual time against the simulator: prompt lengths as requested, prefix
//! sharing where the simulator reports cached tokens, and refusals that say what to do.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use servebench_tokenizer::Tokenizer;

use crate::common::{self, bin, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("datasets", name)
}

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../workload/tests/fixtures")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// `servebench run --virtual-time` in `dir` with the vLLM result saved as `v.json`.
fn run_virtual(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(["run", "--virtual-time", "--disable-tqdm", "--save-result"])
        .args(["--save-detailed", "--result-filename", "v.json"])
        .args(args)
        .output()
        .expect("spawn servebench")
}

/// The vLLM result and the servebench result of a finished run in `dir`.
fn results(dir: &Path, out: &Output) -> (Value, Value) {
    assert!(out.status.success(), "{}", text(out));
    let vllm = read_json(&dir.join("v.json"));
    let native = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a servebench result");
    (vllm, read_json(&native))
}

fn u64s(v: &Value, key: &str) -> Vec<u64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing"))
        .iter()
        .map(|x| x.as_u64().expect("a count"))
        .collect()
}

fn cached_tokens(native: &Value) -> u64 {
    native["summary"]["total_cached_tokens"]
        .as_u64()
        .expect("the simulator reports cached tokens")
}

fn failed(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn prefix_repetition_prompts_have_exact_lengths_and_each_group_is_cached() {
    let dir = tempdir("prefix-repetition");
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "prefix_repetition",
            "--prefix-repetition-prefix-len",
            "128",
            "--prefix-repetition-suffix-len",
            "32",
            "--prefix-repetition-num-prefixes",
            "3",
            "--prefix-repetition-output-len",
            "8",
            "--num-prompts",
            "13",
            "--request-rate",
            "2",
        ],
    );
    let (vllm, native) = results(&dir, &out);
    // 13 prompts over 3 prefixes: 4 each, the remainder dropped as vLLM does.
    assert_eq!(vllm["completed"], 12, "{vllm}");
    assert_eq!(u64s(&vllm, "input_lens"), vec![160; 12]);
    assert_eq!(u64s(&vllm, "output_lens"), vec![8; 12]);
    // Requests arrive one by one, so every prompt after its group's first finds the whole
    // 128-token prefix (8 blocks of 16) cached: 3 groups × 3 later prompts.
    assert_eq!(cached_tokens(&native), 3 * 3 * 128);
    assert_eq!(native["plan"]["dataset_name"], "prefix_repetition");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn sonnet_prompts_stay_within_the_input_len_and_share_their_opening() {
    let dir = tempdir("sonnet");
    let path = fixture("sonnet.txt");
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "sonnet",
            "--dataset-path",
            &path,
            "--sonnet-input-len",
            "200",
            "--sonnet-prefix-len",
            "100",
            "--sonnet-output-len",
            "6",
            "--num-prompts",
            "10",
            "--request-rate",
            "2",
        ],
    );
    let (vllm, native) = results(&dir, &out);
    assert_eq!(vllm["completed"], 10, "{vllm}");
    let input = u64s(&vllm, "input_lens");
    assert!(input.iter().all(|&n| n > 100 && n <= 200), "{input:?}");
    assert_eq!(u64s(&vllm, "output_lens"), vec![6; 10]);
    // The instruction and the first poem lines (about 100 tokens) open every prompt: each
    // prompt after the first finds at least 4 full blocks of 16 cached.
    let cached = cached_tokens(&native);
    assert!(cached >= 9 * 64, "cached {cached}");
    assert_eq!(native["plan"]["dataset_name"], "sonnet");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn sonnet_needs_its_file() {
    let dir = tempdir("sonnet-no-file");
    let err = failed(&run_virtual(&dir, &["--dataset-name", "sonnet"]));
    assert!(
        err.contains("--dataset-name sonnet needs --dataset-path"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Token counts of `prompts` under the built-in tokenizer, sorted.
fn counts(prompts: &[String]) -> Vec<u64> {
    let tok = Tokenizer::builtin();
    let mut v: Vec<u64> = prompts.iter().map(|p| tok.count(p) as u64).collect();
    v.sort_unstable();
    v
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[test]
fn hf_mt_bench_from_jsonl_sends_each_first_turn() {
    let dir = tempdir("hf-mt-bench");
    let path = fixture("hf/mt-bench");
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &path,
            "--hf-name",
            "philschmid/mt-bench",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "5",
            "--request-rate",
            "4",
        ],
    );
    let (vllm, _) = results(&dir, &out);
    let file = std::fs::read_to_string(Path::new(&path).join("data/train.jsonl")).expect("fixture");
    let firsts: Vec<String> = file
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("fixture line");
            v["turns"][0].as_str().expect("a turn").to_owned()
        })
        .collect();
    assert_eq!(sorted(u64s(&vllm, "input_lens")), counts(&firsts));
    assert_eq!(u64s(&vllm, "output_lens"), vec![5; 4]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hf_parquet_copies_run_and_a_known_id_in_the_path_names_the_dataset() {
    let dir = tempdir("hf-parquet");
    // AIMO: no --hf-name, the path ends with the dataset id; output lengths are the
    // solutions' token counts, so every request asks for its own.
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &fixture("hf/AI-MO/aimo-validation-aime"),
            "--num-prompts",
            "3",
            "--no-oversample",
            "--request-rate",
            "4",
        ],
    );
    let (vllm, _) = results(&dir, &out);
    assert_eq!(vllm["completed"], 3, "{vllm}");
    let input = u64s(&vllm, "input_lens");
    assert!(input.iter().all(|&n| (10..40).contains(&n)), "{input:?}");
    std::fs::remove_dir_all(&dir).ok();

    let dir = tempdir("hf-instructcoder");
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &fixture("hf/instructcoder"),
            "--hf-name",
            "likaixin/InstructCoder",
            "--num-prompts",
            "8",
            "--request-rate",
            "8",
        ],
    );
    let (vllm, native) = results(&dir, &out);
    // Four rows, oversampled to eight as vLLM does.
    assert_eq!(vllm["completed"], 8, "{vllm}");
    assert_eq!(native["plan"]["dataset_name"], "hf");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hf_sharegpt_style_chats_from_a_json_list() {
    let dir = tempdir("hf-sharegpt");
    let out = run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &fixture("hf/sharegpt"),
            "--hf-name",
            "Aeala/ShareGPT_Vicuna_unfiltered",
            "--num-prompts",
            "5",
            "--no-oversample",
            "--disable-shuffle",
            "--request-rate",
            "4",
        ],
    );
    let (vllm, _) = results(&dir, &out);
    // The one-turn chat is skipped; the three others, in file order.
    assert_eq!(vllm["completed"], 3, "{vllm}");
    let file = std::fs::read_to_string(fixture("hf/sharegpt/conversations.json")).expect("fixture");
    let rows: Vec<Value> = serde_json::from_str(&file).expect("fixture");
    let firsts: Vec<String> = rows
        .iter()
        .filter(|r| r["conversations"].as_array().is_some_and(|c| c.len() >= 2))
        .map(|r| {
            r["conversations"][0]["value"]
                .as_str()
                .expect("text")
                .to_owned()
        })
        .collect();
    let tok = Tokenizer::builtin();
    let expected: Vec<u64> = firsts.iter().map(|p| tok.count(p) as u64).collect();
    assert_eq!(u64s(&vllm, "input_lens"), expected);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hf_refusals_say_what_to_do() {
    let dir = tempdir("hf-refusals");
    // A dataset id with no local copy: the command that fetches it.
    let err = failed(&run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "likaixin/InstructCoder",
        ],
    ));
    assert!(
        err.contains("huggingface-cli download likaixin/InstructCoder --repo-type dataset"),
        "{err}"
    );
    // A local copy of unknown content.
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).expect("dir");
    let bad = copy.join("train.jsonl");
    std::fs::write(
        &bad,
        "{\"turns\": [\"fine\"]}\n{\"prompt\": \"no turns here\"}\n",
    )
    .expect("write");
    let copy_s = copy.to_string_lossy().into_owned();
    let err = failed(&run_virtual(
        &dir,
        &["--dataset-name", "hf", "--dataset-path", &copy_s],
    ));
    assert!(err.contains("--hf-name ID"), "{err}");
    // A row without the column the dataset reads: file, line, column and dataset.
    let err = failed(&run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &copy_s,
            "--hf-name",
            "philschmid/mt-bench",
            "--disable-shuffle",
        ],
    ));
    assert!(
        err.contains(&format!("{}:2: no column `turns`", bad.display()))
            && err.contains("philschmid/mt-bench (MT-Bench)"),
        "{err}"
    );
    // A line that is not JSON: file and line.
    std::fs::write(&bad, "{\"turns\": [\"fine\"]}\n\n{\"turns\": [\n").expect("write");
    let err = failed(&run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &copy_s,
            "--hf-name",
            "philschmid/mt-bench",
        ],
    ));
    assert!(
        err.contains(&format!("{}:3: not a JSON object", bad.display())),
        "{err}"
    );
    // Multimodal datasets are named as such.
    let err = failed(&run_virtual(
        &dir,
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            &copy_s,
            "--hf-name",
            "yale-nlp/MMVU",
        ],
    ));
    assert!(err.contains("multimodal (video)"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn readme_dataset_examples_run_as_written() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let lines = common::documented_lines();
    let commands: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("servebench run --virtual-time --dataset-name "))
        .collect();
    assert_eq!(
        commands.len(),
        3,
        "sonnet, prefix_repetition and hf examples"
    );
    let dir = tempdir("readme");
    for line in commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let out = bin()
            .current_dir(root)
            .args(&words[1..])
            .args(["--disable-tqdm", "--output-dir"])
            .arg(&dir)
            .output()
            .expect("spawn servebench");
        assert!(out.status.success(), "{line}\n{}", text(&out));
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn prefix_repetition_over_http_is_cached_by_the_simulator_as_in_virtual_time() {
    let _one_at_a_time = common::exclusive();
    let dir = tempdir("prefix-repetition-http");
    // One request at a time: each prompt after its group's first finds the 64-token prefix
    // (4 blocks of 16) cached by the simulator, which tokenizes the text it receives.
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--disable-tqdm",
            "--save-result",
            "--result-filename",
            "v.json",
        ])
        .args(["--dataset-name", "prefix_repetition", "--num-prompts", "8"])
        .args(["--prefix-repetition-prefix-len", "64"])
        .args(["--prefix-repetition-suffix-len", "16"])
        .args(["--prefix-repetition-num-prefixes", "2"])
        .args(["--prefix-repetition-output-len", "4"])
        .args(["--max-concurrency", "1"])
        .output()
        .expect("spawn servebench");
    let (vllm, native) = results(&dir, &out);
    assert_eq!(vllm["completed"], 8, "{vllm}");
    assert_eq!(vllm["total_input_tokens"], 8 * 80, "{vllm}");
    assert_eq!(cached_tokens(&native), 2 * 3 * 64);
    std::fs::remove_dir_all(dir).ok();
}
