//! Times the random dataset: `cargo run --release -p servebench-workload --example
//! random_speed -- [num_prompts] [input_len] [prefix_len]` (defaults 10000 1024 0).
//! Every prompt is re-encoded afterwards to confirm its exact length.

use std::time::Instant;

use servebench_tokenizer::Tokenizer;
use servebench_workload::{sample_random, RandomConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let num_prompts = args.next().transpose()?.unwrap_or(10_000) as usize;
    let input_len = args.next().transpose()?.unwrap_or(1024);
    let prefix_len = args.next().transpose()?.unwrap_or(0);

    let t0 = Instant::now();
    let tok = Tokenizer::builtin();
    let _ = tok.sampling_ids();
    let load = t0.elapsed();

    let cfg = RandomConfig {
        num_prompts,
        input_len,
        prefix_len,
        ..RandomConfig::default()
    };
    let t1 = Instant::now();
    let requests = sample_random(&cfg, &tok)?;
    let build = t1.elapsed();

    let t2 = Instant::now();
    let exact = requests
        .iter()
        .filter(|r| tok.count(&r.prompt) as u64 == prefix_len + input_len)
        .count();
    let verify = t2.elapsed();

    println!(
        "tokenizer load {:.2?}; {num_prompts} prompts of {prefix_len}+{input_len} tokens built in \
         {build:.2?} ({:.0} prompts/s); re-encode check {verify:.2?}: {exact}/{num_prompts} exact",
        load,
        num_prompts as f64 / build.as_secs_f64()
    );
    if exact != num_prompts {
        return Err("some prompts missed their length".into());
    }
    Ok(())
}
