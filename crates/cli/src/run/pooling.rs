//! Embeddings and rerank runs (`--backend openai-embeddings`, `--backend vllm-rerank`): which
//! flags they take, and how the dataset's prompts become batched pooling requests, as
//! `vllm bench serve` forms them (vllm/benchmarks/serve.py, datasets.py).
//!
//! - Embeddings: `--num-prompts` inputs go out in requests of `--random-batch-size`.
//! - Rerank (`--dataset-name random-rerank`): one random query of about half the input length
//!   and `--num-prompts` random documents that fill the rest, `--random-batch-size` documents
//!   per request; a request's prompt length counts the query (and its separator) once per
//!   document, as the server scores each pair.
//!
//! A pooling request is a prefill and nothing else. In virtual time a batch is charged as one
//! prefill of all its inputs (the engine core takes one request per arrival); the simulator's
//! server charges each input as its own request.

use anyhow::{bail, Result};
use servebench_loadgen::pooling::join_inputs;
use servebench_loadgen::ApiKind;
use servebench_metrics::RequestRecord;
use servebench_tokenizer::Tokenizer;
use servebench_workload::random::{sample_random, sample_random_lengths_with};
use servebench_workload::{PrefixMode, RandomConfig, RequestSpec};

use super::args::{Backend, DatasetName, RunArgs};
use super::plan::{ApiFlavor, DatasetChoice, Endpoint, RunPlan};

/// Separator tokens a reranker puts between query and document (vLLM's `n_sep_tokens`).
const SEP_TOKENS: u64 = 1;

/// How a pooling run batches its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolingPlan {
    /// `--random-batch-size`: inputs (rerank: documents) per request.
    pub batch_size: u64,
    pub rerank: bool,
    /// `--dataset-name random-rerank`.
    pub random_rerank: bool,
}

/// vLLM's default `--percentile-metrics` of a pooling run: only E2EL means anything.
pub fn default_percentile_metrics(backend: Backend) -> Option<&'static str> {
    matches!(backend, Backend::OpenaiEmbeddings | Backend::VllmRerank).then_some("e2el")
}

/// The pooling part of a plan, or `None` for a generation run; refuses pooling flags out of
/// place.
pub fn plan(
    a: &RunArgs,
    endpoint: &Endpoint,
    dataset: &DatasetChoice,
) -> Result<Option<PoolingPlan>> {
    let rerank = endpoint.flavor == ApiFlavor::VllmRerank;
    let pooling = rerank || endpoint.flavor == ApiFlavor::OpenaiEmbeddings;
    let random_rerank = a.dataset_name == DatasetName::RandomRerank;
    if !pooling {
        if a.random_batch_size > 1 {
            bail!("--random-batch-size batches the inputs of embeddings and rerank requests: use it with --backend openai-embeddings or vllm-rerank");
        }
        if random_rerank {
            bail!("--dataset-name random-rerank makes queries and documents for --backend vllm-rerank");
        }
        return Ok(None);
    }
    if rerank && !random_rerank {
        bail!(
            "--backend vllm-rerank takes its query and documents from --dataset-name random-rerank (as vLLM does), not {}",
            a.dataset_name.as_str()
        );
    }
    if !rerank && random_rerank {
        bail!("--dataset-name random-rerank is for --backend vllm-rerank; embeddings take --dataset-name random or a file dataset");
    }
    if matches!(dataset, DatasetChoice::TimedTrace { .. }) {
        bail!("--dataset-name timed_trace replays generation requests; use random, sharegpt, custom, sonnet or hf prompts for embeddings");
    }
    Ok(Some(PoolingPlan {
        batch_size: a.random_batch_size,
        rerank,
        random_rerank,
    }))
}

/// `Some(message)` when `--backend` and `--endpoint` disagree about pooling (the endpoint is
/// unused in virtual time).
pub fn check_endpoint(
    flavor: ApiFlavor,
    api: ApiKind,
    path: &str,
    virtual_time: bool,
) -> Option<String> {
    if virtual_time {
        return None;
    }
    match flavor {
        ApiFlavor::OpenaiEmbeddings if api != ApiKind::Embeddings => Some(format!(
            "--backend openai-embeddings needs an embeddings endpoint (/v1/embeddings), not --endpoint {path}"
        )),
        ApiFlavor::VllmRerank if api != ApiKind::Rerank => Some(format!(
            "--backend vllm-rerank needs a rerank endpoint (/v1/rerank, or /rerank as vLLM and TEI serve it), not --endpoint {path}"
        )),
        ApiFlavor::Openai | ApiFlavor::Vllm | ApiFlavor::OpenaiChat if api.is_pooling() => {
            Some(format!(
                "--backend {} does not match --endpoint {path}: use openai-embeddings with /v1/embeddings and vllm-rerank with /v1/rerank or /rerank",
                flavor.as_str()
            ))
        }
        _ => None,
    }
}

/// The run's requests: the dataset's prompts in batches (embeddings), or the random-rerank
/// query and documents. `lengths_only`: no prompt text (virtual time).
pub fn batch(
    plan: &RunPlan,
    pooling: &PoolingPlan,
    inputs: Vec<RequestSpec>,
    tokenizer: &Tokenizer,
    lengths_only: bool,
) -> Result<Vec<RequestSpec>> {
    if pooling.random_rerank {
        return rerank_batches(plan, pooling, tokenizer, lengths_only);
    }
    let size = pooling.batch_size.max(1) as usize;
    Ok(inputs
        .chunks(size)
        .enumerate()
        .map(|(i, chunk)| {
            let texts: Vec<&str> = chunk.iter().map(|r| r.prompt.as_str()).collect();
            pooled(i, &texts, chunk.iter().map(|r| r.prompt_tokens).sum())
        })
        .collect())
}

/// One pooling request. `max_tokens` 1: the engine core's single step that ends a prefill
/// (the HTTP body of a pooling request has no such field).
fn pooled(i: usize, texts: &[&str], prompt_tokens: u64) -> RequestSpec {
    RequestSpec {
        id: i as u64,
        prompt: join_inputs(texts),
        prompt_tokens,
        max_tokens: Some(1),
        prefix_tokens: 0,
        images: Vec::new(),
    }
}

fn random(
    plan: &RunPlan,
    n: usize,
    len: u64,
    seed: u64,
    tok: &Tokenizer,
    lengths_only: bool,
) -> Result<Vec<RequestSpec>> {
    let cfg = RandomConfig {
        num_prompts: n,
        input_len: len.max(1),
        output_len: 1,
        range_ratio: plan.random.range_ratio,
        prefix_len: 0,
        prefix_mode: PrefixMode::Shared,
        seed,
        prefix_hit: None,
    };
    Ok(if lengths_only {
        sample_random_lengths_with(&cfg, tok)?
    } else {
        sample_random(&cfg, tok)?
    })
}

/// vLLM's random-rerank dataset: the query takes half the input length less the separator,
/// each document the rest.
fn rerank_batches(
    plan: &RunPlan,
    pooling: &PoolingPlan,
    tok: &Tokenizer,
    lengths_only: bool,
) -> Result<Vec<RequestSpec>> {
    let input_len = plan.random.input_len;
    let query_len = (input_len / 2).saturating_sub(SEP_TOKENS);
    let query = random(plan, 1, query_len, plan.seed, tok, lengths_only)?;
    let Some(query) = query.into_iter().next() else {
        bail!("the random-rerank dataset produced no query");
    };
    let doc_len = input_len.saturating_sub(query.prompt_tokens + SEP_TOKENS);
    // A seed of its own, so the documents are not the query's text again.
    let docs = random(
        plan,
        plan.num_prompts,
        doc_len,
        plan.seed.wrapping_add(1),
        tok,
        lengths_only,
    )?;
    let size = pooling.batch_size.max(1) as usize;
    Ok(docs
        .chunks(size)
        .enumerate()
        .map(|(i, chunk)| {
            let mut texts = vec![query.prompt.as_str()];
            texts.extend(chunk.iter().map(|d| d.prompt.as_str()));
            let tokens = (query.prompt_tokens + SEP_TOKENS) * chunk.len() as u64
                + chunk.iter().map(|d| d.prompt_tokens).sum::<u64>();
            pooled(i, &texts, tokens)
        })
        .collect())
}

/// A virtual-time record of a pooling request, as the HTTP client would have written it:
/// the answer arrives when the prefill ends; nothing is generated.
pub fn virtual_record(rec: &mut RequestRecord) {
    let done = rec.first_token.or(rec.end);
    rec.first_token = done;
    rec.end = done;
    rec.events.clear();
    rec.bare_events.clear();
    rec.output_tokens = 0;
    rec.max_tokens = None;
    rec.finish_reason = None;
    rec.cached_tokens = None;
}

/// Clear the generation metrics of a pooling run's summary: there is no first token, no
/// token gap and no output; the time to the answer is E2EL (and its queue-inclusive form).
pub fn clear_generation_metrics(s: &mut servebench_metrics::RunSummary) {
    s.ttft = Default::default();
    s.tpot = Default::default();
    s.itl = Default::default();
    s.user_ttft = Default::default();
    s.output_sources.clear();
    s.warnings = s
        .warnings
        .iter()
        .filter(|w| !w.starts_with("output token counts"))
        .filter_map(|w| only_e2el_percentiles(w))
        .collect();
}

/// A warning about unstable percentiles keeps only its E2EL entries (the others were
/// cleared); other warnings pass unchanged.
fn only_e2el_percentiles(w: &str) -> Option<String> {
    const HEAD: &str = "percentiles backed by too few samples to be stable: ";
    let Some(list) = w.strip_prefix(HEAD) else {
        return Some(w.to_owned());
    };
    let kept: Vec<&str> = list
        .split(", ")
        .filter(|e| e.starts_with("e2el "))
        .collect();
    (!kept.is_empty()).then(|| format!("{HEAD}{}", kept.join(", ")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_loadgen::pooling::split_inputs;

    fn plan_of(flags: &[&str]) -> Result<RunPlan> {
        let mut all = vec!["--virtual-time"];
        all.extend_from_slice(flags);
        RunPlan::from_args(&RunArgs::from_flags(&all).map_err(anyhow::Error::msg)?)
    }

    #[test]
    fn embeddings_batch_the_inputs() {
        let p = plan_of(&[
            "--backend",
            "openai-embeddings",
            "--num-prompts",
            "10",
            "--random-batch-size",
            "4",
            "--random-input-len",
            "32",
        ])
        .unwrap();
        let pool = p.pooling.unwrap();
        assert_eq!(p.report.percentile_metrics, vec!["e2el"]);
        let tok = Tokenizer::builtin();
        let inputs = super::super::dataset::build(&p, &tok, false).unwrap();
        let total: u64 = inputs.iter().map(|r| r.prompt_tokens).sum();
        let b = batch(&p, &pool, inputs, &tok, false).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(split_inputs(&b[0].prompt).len(), 4);
        assert_eq!(split_inputs(&b[2].prompt).len(), 2);
        assert_eq!(b.iter().map(|r| r.prompt_tokens).sum::<u64>(), total);
    }

    #[test]
    fn rerank_forms_query_and_documents_as_vllm() {
        let p = plan_of(&[
            "--backend",
            "vllm-rerank",
            "--dataset-name",
            "random-rerank",
            "--num-prompts",
            "6",
            "--random-batch-size",
            "3",
            "--random-input-len",
            "64",
        ])
        .unwrap();
        let pool = p.pooling.unwrap();
        let tok = Tokenizer::builtin();
        let b = batch(&p, &pool, Vec::new(), &tok, false).unwrap();
        assert_eq!(b.len(), 2);
        let parts = split_inputs(&b[0].prompt);
        assert_eq!(parts.len(), 4);
        let q = tok.count(parts[0]) as u64;
        assert_eq!(q, 31);
        let docs: u64 = parts[1..].iter().map(|d| tok.count(d) as u64).sum();
        assert_eq!(b[0].prompt_tokens, (q + 1) * 3 + docs);
        assert_eq!(docs, 3 * 32);
    }

    #[test]
    fn pooling_flags_out_of_place_are_refused() {
        let e = plan_of(&["--random-batch-size", "4"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--random-batch-size"), "{e}");
        let e = plan_of(&["--backend", "vllm-rerank"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("random-rerank"), "{e}");
        let e = plan_of(&["--dataset-name", "random-rerank"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("vllm-rerank"), "{e}");
        let e = RunPlan::from_args(
            &RunArgs::from_flags(&[
                "--base-url",
                "http://127.0.0.1:1",
                "--backend",
                "openai-embeddings",
                "--endpoint",
                "/v1/completions",
            ])
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("embeddings endpoint"), "{e}");
        let e = RunPlan::from_args(
            &RunArgs::from_flags(&[
                "--base-url",
                "http://127.0.0.1:1",
                "--endpoint",
                "/v1/embeddings",
            ])
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not match"), "{e}");
    }

    #[test]
    fn plan_round_trips_through_flags() {
        let p = plan_of(&[
            "--backend",
            "vllm-rerank",
            "--dataset-name",
            "random-rerank",
            "--random-batch-size",
            "5",
        ])
        .unwrap();
        let back = RunPlan::from_args(&p.to_args()).unwrap();
        assert_eq!(back.pooling, p.pooling);
        assert_eq!(back.endpoint, p.endpoint);
    }
}
