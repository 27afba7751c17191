//! ShareGPT and custom JSONL datasets: vLLM's selection rules and clear errors.
#![allow(clippy::unwrap_used)]

mod common;

use servebench_tokenizer::Tokenizer;
use servebench_workload::{
    sample_custom, sample_dataset, sample_sharegpt, CustomConfig, DatasetConfig, ShareGptConfig,
    WorkloadError,
};

fn conv(prompt: &str, answer: &str) -> serde_json::Value {
    serde_json::json!({"id": "x", "conversations": [
        {"from": "human", "value": prompt},
        {"from": "gpt", "value": answer},
    ]})
}

fn sharegpt_file(dir: &common::TempDir) -> std::path::PathBuf {
    let long_prompt = "word ".repeat(1100);
    let entries = serde_json::json!([
        conv("What is the capital of France, and why?", "The capital of France is Paris, for centuries."),
        conv("Explain prefix caching in two sentences.", "It reuses the KV cache of shared prompt prefixes. That saves prefill work."),
        conv("Hi", "Hello there, how can I help you today?"),
        conv("Tell me a story about a robot.", "No."),
        conv(&long_prompt, "That is a long prompt indeed, friend."),
        {"conversations": [{"from": "human", "value": "only one turn here, nothing else"}]},
        {"other": "no conversations at all"},
        conv("List three prime numbers please.", "Two, three and five are prime numbers."),
    ]);
    dir.write("sharegpt.json", &entries.to_string())
}

#[test]
fn sharegpt_applies_vllm_filters() {
    let dir = common::TempDir::new("sharegpt");
    let tok = Tokenizer::builtin();
    let mut cfg = ShareGptConfig::new(sharegpt_file(&dir));
    cfg.num_prompts = 3;
    cfg.no_oversample = true;
    let reqs = sample_sharegpt(&cfg, &tok).unwrap();
    // Kept: France, prefix caching, primes. Dropped: "Hi" (prompt < 4 tokens), "No."
    // (output < 4), the 1100-word prompt (> 1024), and the entries without two turns.
    let mut prompts: Vec<&str> = reqs.iter().map(|r| r.prompt.as_str()).collect();
    prompts.sort();
    assert_eq!(
        prompts,
        [
            "Explain prefix caching in two sentences.",
            "List three prime numbers please.",
            "What is the capital of France, and why?"
        ]
    );
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.id, i as u64);
        assert_eq!(r.prompt_tokens, tok.count(&r.prompt) as u64);
        assert!(r.max_tokens.unwrap() >= 4);
    }
    let primes = reqs.iter().find(|r| r.prompt.starts_with("List")).unwrap();
    assert_eq!(
        primes.max_tokens,
        Some(tok.count("Two, three and five are prime numbers.") as u64)
    );
}

#[test]
fn sharegpt_output_override_skips_the_output_check_and_oversamples() {
    let dir = common::TempDir::new("sharegpt-override");
    let tok = Tokenizer::builtin();
    let mut cfg = ShareGptConfig::new(sharegpt_file(&dir));
    cfg.num_prompts = 10;
    cfg.output_len = Some(50);
    let reqs = sample_sharegpt(&cfg, &tok).unwrap();
    assert_eq!(reqs.len(), 10);
    assert!(reqs.iter().all(|r| r.max_tokens == Some(50)));
    let distinct: std::collections::BTreeSet<&str> =
        reqs.iter().map(|r| r.prompt.as_str()).collect();
    // With the override, "Tell me a story" (answer "No.") is usable too: 4 distinct.
    assert_eq!(distinct.len(), 4);
    assert!(distinct.contains("Tell me a story about a robot."));
    assert_eq!(
        reqs.iter().map(|r| r.id).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
}

#[test]
fn sharegpt_shuffle_follows_the_seed() {
    let dir = common::TempDir::new("sharegpt-seed");
    let tok = Tokenizer::builtin();
    let path = sharegpt_file(&dir);
    let order = |seed: u64, disable_shuffle: bool| -> Vec<String> {
        let mut cfg = ShareGptConfig::new(&path);
        cfg.num_prompts = 4;
        cfg.seed = seed;
        cfg.disable_shuffle = disable_shuffle;
        cfg.no_oversample = true;
        cfg.output_len = Some(10);
        sample_sharegpt(&cfg, &tok)
            .unwrap()
            .into_iter()
            .map(|r| r.prompt)
            .collect()
    };
    assert_eq!(order(5, false), order(5, false));
    let seeds_differ = (0..8).any(|s| order(s, false) != order(5, false));
    assert!(seeds_differ);
    assert_eq!(order(0, true)[0], "What is the capital of France, and why?");
    assert_eq!(order(0, true), order(9, true));
}

#[test]
fn sharegpt_errors_name_the_file() {
    let dir = common::TempDir::new("sharegpt-bad");
    let tok = Tokenizer::builtin();
    let bad = dir.write("bad.json", "[{\"conversations\": [}");
    let err = sample_sharegpt(&ShareGptConfig::new(&bad), &tok).unwrap_err();
    assert!(matches!(err, WorkloadError::Malformed { .. }));
    assert!(err.to_string().contains("bad.json:1:"), "{err}");

    let err =
        sample_sharegpt(&ShareGptConfig::new(dir.path().join("absent.json")), &tok).unwrap_err();
    assert!(matches!(err, WorkloadError::Io { .. }));
    assert!(err.to_string().contains("absent.json"), "{err}");

    let empty = dir.write("empty.json", "[]");
    let err = sample_sharegpt(&ShareGptConfig::new(&empty), &tok).unwrap_err();
    assert!(matches!(err, WorkloadError::Empty { .. }), "{err}");
}

#[test]
fn custom_dataset_output_lengths() {
    let dir = common::TempDir::new("custom");
    let tok = Tokenizer::builtin();
    let path = dir.write(
        "prompts.jsonl",
        "{\"prompt\": \"What is the capital of India?\", \"output_tokens\": 12}\n\
         \n\
         {\"prompt\": \"What is the capital of Iran?\", \"output_tokens\": 30}\n\
         {\"prompt\": \"What is the capital of China?\", \"output_tokens\": 7}\n",
    );
    let mut cfg = CustomConfig::new(&path);
    cfg.num_prompts = 0;
    let reqs = sample_custom(&cfg, &tok).unwrap();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.max_tokens == Some(256)));
    assert!(reqs
        .iter()
        .all(|r| r.prompt_tokens == tok.count(&r.prompt) as u64));

    cfg.output_len = -1;
    cfg.disable_shuffle = true;
    let reqs = sample_custom(&cfg, &tok).unwrap();
    let outs: Vec<u64> = reqs.iter().map(|r| r.max_tokens.unwrap()).collect();
    assert_eq!(outs, [12, 30, 7]);

    cfg.num_prompts = 7;
    let reqs = sample_dataset(&DatasetConfig::Custom(cfg.clone()), &tok).unwrap();
    assert_eq!(reqs.len(), 7);
    assert_eq!(
        reqs[..3]
            .iter()
            .map(|r| r.max_tokens.unwrap())
            .collect::<Vec<_>>(),
        [12, 30, 7]
    );

    cfg.output_len = -2;
    assert!(matches!(
        sample_custom(&cfg, &tok),
        Err(WorkloadError::InvalidConfig(_))
    ));
}

#[test]
fn custom_dataset_errors_name_file_and_line() {
    let dir = common::TempDir::new("custom-bad");
    let tok = Tokenizer::builtin();
    let path = dir.write(
        "bad.jsonl",
        "{\"prompt\": \"fine\"}\n{\"prompt\": \"also fine\"}\n{\"prompt\": 42}\n",
    );
    let err = sample_custom(&CustomConfig::new(&path), &tok).unwrap_err();
    assert!(
        matches!(err, WorkloadError::Malformed { line: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("bad.jsonl:3:"), "{err}");

    let path = dir.write(
        "noout.jsonl",
        "{\"prompt\": \"a\", \"output_tokens\": 3}\n{\"prompt\": \"b\"}\n",
    );
    let mut cfg = CustomConfig::new(&path);
    cfg.output_len = -1;
    let err = sample_custom(&cfg, &tok).unwrap_err().to_string();
    assert!(
        err.contains("noout.jsonl:2:") && err.contains("output_tokens"),
        "{err}"
    );

    let path = dir.write("notjson.jsonl", "this is not json\n");
    let err = sample_custom(&CustomConfig::new(&path), &tok)
        .unwrap_err()
        .to_string();
    assert!(err.contains("notjson.jsonl:1:"), "{err}");
}
