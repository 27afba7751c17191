//! The random dataset: exact prompt lengths, prefix sharing, vLLM's length ranges,
//! reproducibility, and a Hugging Face tokenizer.
#![allow(clippy::unwrap_used)]

mod common;

use proptest::prelude::*;
use servebench_tokenizer::Tokenizer;
use servebench_workload::random::PrefixHit;
use servebench_workload::{sample_random, PrefixMode, RandomConfig, RequestSpec};

/// Checks every invariant a random workload promises under `tok`.
fn check(cfg: &RandomConfig, reqs: &[RequestSpec], tok: &Tokenizer) {
    assert_eq!(reqs.len(), cfg.num_prompts);
    let input = cfg.input_range();
    let output = cfg.output_range();
    let prefix = cfg.prefix_len as usize;
    let mut first_prefix: Option<Vec<u32>> = None;
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.id, i as u64);
        let ids = tok.encode(&r.prompt);
        assert_eq!(
            ids.len() as u64,
            r.prompt_tokens,
            "request {i}: stated count is wrong"
        );
        let unique = r.prompt_tokens - cfg.prefix_len;
        assert!(
            (input.low..=input.high).contains(&unique),
            "request {i}: {unique} unique tokens outside {input:?}"
        );
        let out = r.max_tokens.unwrap();
        assert!((output.low..=output.high).contains(&out));
        assert!(ids.iter().all(|id| !tok.is_special(*id)));
        match cfg.prefix_mode {
            PrefixMode::Shared => {
                assert_eq!(r.prefix_tokens, cfg.prefix_len);
                let p = ids[..prefix].to_vec();
                match &first_prefix {
                    Some(f) => assert_eq!(&p, f, "request {i}: prefix tokens differ"),
                    None => first_prefix = Some(p),
                }
            }
            PrefixMode::PerRequest => assert_eq!(r.prefix_tokens, 0),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every prompt encodes to exactly prefix + sampled length, over many seeds,
    /// lengths, ratios and both prefix modes.
    #[test]
    fn prompts_have_exact_lengths(
        seed in any::<u64>(),
        input_len in 1u64..300,
        prefix_len in 0u64..80,
        ratio in 0.0f64..0.9,
        num_prompts in 1usize..6,
        per_request in any::<bool>(),
    ) {
        let cfg = RandomConfig {
            num_prompts,
            input_len,
            output_len: 64,
            range_ratio: ratio,
            prefix_len,
            prefix_mode: if per_request { PrefixMode::PerRequest } else { PrefixMode::Shared },
            seed,
            prefix_hit: None,
        };
        prop_assume!(cfg.validate().is_ok());
        let tok = Tokenizer::builtin();
        let reqs = sample_random(&cfg, &tok).unwrap();
        check(&cfg, &reqs, &tok);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// With --prefix-hit-rate every prompt still encodes to exactly its sampled length, and
    /// its stated shared tokens open every prompt of its pool member alike.
    #[test]
    fn prefix_hit_prompts_have_exact_lengths(
        seed in any::<u64>(),
        input_len in 1u64..200,
        ratio in 0.0f64..0.9,
        rate in 0.0f64..0.999,
        num_prompts in 1usize..7,
        pool in 1usize..4,
    ) {
        let cfg = RandomConfig {
            num_prompts,
            input_len,
            output_len: 8,
            range_ratio: ratio,
            seed,
            prefix_hit: Some(PrefixHit { rate, pool }),
            ..RandomConfig::default()
        };
        prop_assume!(cfg.validate().is_ok());
        let tok = Tokenizer::builtin();
        let reqs = sample_random(&cfg, &tok).unwrap();
        let input = cfg.input_range();
        let ids: Vec<Vec<u32>> = reqs.iter().map(|r| tok.encode(&r.prompt)).collect();
        for (i, r) in reqs.iter().enumerate() {
            prop_assert_eq!(ids[i].len() as u64, r.prompt_tokens);
            prop_assert!((input.low..=input.high).contains(&r.prompt_tokens));
            prop_assert!(r.prefix_tokens <= r.prompt_tokens);
            for j in (i % pool..i).step_by(pool) {
                let k = r.prefix_tokens.min(reqs[j].prefix_tokens) as usize;
                prop_assert_eq!(&ids[i][..k], &ids[j][..k]);
            }
        }
    }
}

#[test]
fn defaults_match_vllm() {
    let cfg = RandomConfig::default();
    assert_eq!(
        (
            cfg.num_prompts,
            cfg.input_len,
            cfg.output_len,
            cfg.prefix_len,
            cfg.seed
        ),
        (1000, 1024, 128, 0, 0)
    );
    assert_eq!(cfg.range_ratio, 0.0);
    assert_eq!(cfg.prefix_mode, PrefixMode::Shared);
}

#[test]
fn fixed_lengths_without_range() {
    let tok = Tokenizer::builtin();
    let cfg = RandomConfig {
        num_prompts: 20,
        input_len: 128,
        output_len: 16,
        ..RandomConfig::default()
    };
    let reqs = sample_random(&cfg, &tok).unwrap();
    check(&cfg, &reqs, &tok);
    assert!(reqs
        .iter()
        .all(|r| r.prompt_tokens == 128 && r.max_tokens == Some(16)));
    // Prompts are distinct.
    let distinct: std::collections::HashSet<&str> =
        reqs.iter().map(|r| r.prompt.as_str()).collect();
    assert_eq!(distinct.len(), 20);
}

#[test]
fn range_ratio_spreads_lengths_around_the_mean() {
    let tok = Tokenizer::builtin();
    let cfg = RandomConfig {
        num_prompts: 300,
        input_len: 40,
        output_len: 100,
        range_ratio: 0.5,
        ..RandomConfig::default()
    };
    let reqs = sample_random(&cfg, &tok).unwrap();
    check(&cfg, &reqs, &tok);
    let mean_in = reqs.iter().map(|r| r.prompt_tokens as f64).sum::<f64>() / 300.0;
    let mean_out = reqs
        .iter()
        .map(|r| r.max_tokens.unwrap() as f64)
        .sum::<f64>()
        / 300.0;
    // Uniform on [20, 60] and [50, 150]: standard errors ~0.7 and ~1.7.
    assert!((mean_in - 40.0).abs() < 3.0, "{mean_in}");
    assert!((mean_out - 100.0).abs() < 7.0, "{mean_out}");
    let min = reqs.iter().map(|r| r.prompt_tokens).min().unwrap();
    let max = reqs.iter().map(|r| r.prompt_tokens).max().unwrap();
    assert!(min <= 23 && max >= 57, "{min}..{max}");
}

#[test]
fn same_seed_same_workload() {
    let tok = Tokenizer::builtin();
    let cfg = RandomConfig {
        num_prompts: 40,
        input_len: 30,
        range_ratio: 0.3,
        prefix_len: 10,
        seed: 1234,
        ..RandomConfig::default()
    };
    let a = sample_random(&cfg, &tok).unwrap();
    let b = sample_random(&cfg, &tok).unwrap();
    assert_eq!(a, b);
    let c = sample_random(
        &RandomConfig {
            seed: 1235,
            ..cfg.clone()
        },
        &tok,
    )
    .unwrap();
    assert_ne!(a, c);
}

#[test]
fn shared_and_per_request_prefixes() {
    let tok = Tokenizer::builtin();
    let shared = RandomConfig {
        num_prompts: 8,
        input_len: 20,
        prefix_len: 50,
        ..RandomConfig::default()
    };
    let reqs = sample_random(&shared, &tok).unwrap();
    check(&shared, &reqs, &tok);
    let prefix_text = tok.decode(&tok.encode(&reqs[0].prompt)[..50]);
    assert!(reqs.iter().all(|r| r.prompt.starts_with(&prefix_text)));

    let cold = RandomConfig {
        prefix_mode: PrefixMode::PerRequest,
        ..shared
    };
    let reqs = sample_random(&cold, &tok).unwrap();
    check(&cold, &reqs, &tok);
    assert!(reqs.iter().all(|r| r.prompt_tokens == 70));
    let firsts: std::collections::HashSet<Vec<u32>> = reqs
        .iter()
        .map(|r| tok.encode(&r.prompt)[..8].to_vec())
        .collect();
    assert_eq!(firsts.len(), 8, "cold prefixes must differ");
}

#[test]
fn exact_lengths_with_a_byte_level_bpe_tokenizer() {
    let dir = common::TempDir::new("bpe");
    let tok = Tokenizer::from_file(common::train_byte_level_bpe(dir.path())).unwrap();
    assert_eq!(tok.special_token_ids().len(), 1);
    for (seed, mode) in [
        (0, PrefixMode::Shared),
        (1, PrefixMode::PerRequest),
        (2, PrefixMode::Shared),
    ] {
        let cfg = RandomConfig {
            num_prompts: 10,
            input_len: 60,
            range_ratio: 0.5,
            prefix_len: 25,
            prefix_mode: mode,
            seed,
            ..RandomConfig::default()
        };
        let reqs = sample_random(&cfg, &tok).unwrap();
        check(&cfg, &reqs, &tok);
    }
}

#[test]
fn invalid_configs_are_errors() {
    let tok = Tokenizer::builtin();
    let cfg = RandomConfig {
        range_ratio: 1.5,
        ..RandomConfig::default()
    };
    let err = sample_random(&cfg, &tok).unwrap_err().to_string();
    assert!(err.contains("--random-range-ratio"), "{err}");
}
