//! The pooling endpoints: `/v1/embeddings`, and `/v1/rerank` and `/rerank` (the paths vLLM
//! serves; TEI serves `/rerank`).
//!
//! A pooling request costs what vLLM's engine spends on it: a prefill of its inputs, no
//! decode. Each input (each query–document pair of a rerank) goes to the engine core as its
//! own request, scheduled in the same batches as generation requests; it leaves with the
//! step that finishes its prefill (the engine core's one output step, whose token is not
//! returned). The answer carries `usage`, vectors of the model's hidden size and scores: cheap
//! deterministic values, not meaning.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use servebench_wire::pooling::{
    EmbeddingData, EmbeddingRequest, EmbeddingResponse, PoolingUsage, RerankDocument,
    RerankRequest, RerankResponse, RerankResult,
};
use tokio::time::Instant;

use super::error::ApiError;
use super::response::AbortOnDrop;
use super::{body, request, unix_now, AppState};
use crate::engine::{FinishReason, NewRequest};
use crate::fleet::realtime_fleet::ServedLabels;

/// A cross-encoder joins query and document with one separator token.
const PAIR_SEPARATOR_TOKENS: usize = 1;

/// The pooling routes, merged into the simulator's router.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/rerank", post(rerank))
        .route("/rerank", post(rerank))
}

async fn embeddings(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let received = Instant::now();
    embed(app, &headers, body, received)
        .await
        .map_or_else(IntoResponse::into_response, |(r, served)| answer(r, served))
}

async fn rerank(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let received = Instant::now();
    score(app, &headers, body, received)
        .await
        .map_or_else(IntoResponse::into_response, |(r, served)| answer(r, served))
}

/// The JSON answer, naming the pool and replica that served it in front of a fleet.
fn answer(body: impl serde::Serialize, served: Option<ServedLabels>) -> Response {
    let mut resp = axum::Json(body).into_response();
    crate::fleet::server_hooks::mark_served(&mut resp, served.as_ref());
    resp
}

async fn read(app: &AppState, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let b = body::read_limited(
        headers,
        body,
        app.inner.max_body_bytes,
        app.inner.body_timeouts,
    )
    .await?;
    Ok(b.to_vec())
}

async fn embed(
    app: AppState,
    headers: &HeaderMap,
    body: Body,
    received: Instant,
) -> Result<(EmbeddingResponse, Option<ServedLabels>), ApiError> {
    let bytes = read(&app, headers, body).await?;
    let req: EmbeddingRequest = request::parse_json(&bytes)?;
    app.check_model(Some(&req.model))?;
    let prompts: Vec<Vec<u32>> = match req.input.texts() {
        Some(texts) => texts
            .iter()
            .map(|t| app.inner.tokenizer.encode(t))
            .collect(),
        None => match &req.input {
            servebench_wire::pooling::EmbeddingInput::Tokens(t) => vec![t.clone()],
            servebench_wire::pooling::EmbeddingInput::TokenBatches(b) => b.clone(),
            _ => Vec::new(),
        },
    };
    let lora = app.lora_of(Some(&req.model));
    let (lens, served) =
        prefill_all(&app, prompts, req.truncate_prompt_tokens, received, lora).await?;
    let hidden = app.inner.hidden_size;
    let data = lens
        .iter()
        .enumerate()
        .map(|(index, &len)| EmbeddingData {
            index,
            object: "embedding".into(),
            embedding: vector(hidden, index as u64, len),
        })
        .collect();
    let prompt_tokens: u64 = lens.iter().map(|&n| u64::from(n)).sum();
    Ok((
        EmbeddingResponse {
            id: format!("embd-{}", unix_now()),
            object: "list".into(),
            created: unix_now(),
            model: app.inner.served_name.clone(),
            data,
            usage: PoolingUsage {
                prompt_tokens,
                total_tokens: prompt_tokens,
            },
        },
        served,
    ))
}

async fn score(
    app: AppState,
    headers: &HeaderMap,
    body: Body,
    received: Instant,
) -> Result<(RerankResponse, Option<ServedLabels>), ApiError> {
    let bytes = read(&app, headers, body).await?;
    let req: RerankRequest = request::parse_json(&bytes)?;
    app.check_model(Some(&req.model))?;
    let tok = &app.inner.tokenizer;
    let query = tok.encode(&req.query);
    let prompts: Vec<Vec<u32>> = req
        .documents
        .iter()
        .map(|d| {
            let mut ids = query.clone();
            ids.extend(std::iter::repeat_n(0, PAIR_SEPARATOR_TOKENS));
            ids.extend(tok.encode(d));
            ids
        })
        .collect();
    let lora = app.lora_of(Some(&req.model));
    let (lens, served) =
        prefill_all(&app, prompts, req.truncate_prompt_tokens, received, lora).await?;
    let mut results: Vec<RerankResult> = req
        .documents
        .iter()
        .zip(&lens)
        .enumerate()
        .map(|(index, (doc, &len))| RerankResult {
            index,
            document: RerankDocument { text: doc.clone() },
            relevance_score: relevance(&req.query, doc, len),
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    if let Some(n) = req.top_n.filter(|&n| n > 0) {
        results.truncate(n);
    }
    let total_tokens: u64 = lens.iter().map(|&n| u64::from(n)).sum();
    Ok((
        RerankResponse {
            id: format!("rerank-{}", unix_now()),
            model: app.inner.served_name.clone(),
            usage: PoolingUsage {
                prompt_tokens: total_tokens,
                total_tokens,
            },
            results,
        },
        served,
    ))
}

/// Prefill every prompt as its own engine request, all submitted at once; the prompt
/// lengths the engine charged, and where a fleet served them. `truncate` as vLLM's `truncate_prompt_tokens`: −1 cuts each
/// input to the context, `k > 0` to its last `k` tokens, none refuses one that does not fit.
async fn prefill_all(
    app: &AppState,
    prompts: Vec<Vec<u32>>,
    truncate: Option<i64>,
    received: Instant,
    lora: Option<u32>,
) -> Result<(Vec<u32>, Option<ServedLabels>), ApiError> {
    if prompts.is_empty() {
        return Err(ApiError::bad_request("The input is empty.", Some("input")));
    }
    // The engine core's one output step needs a slot of context.
    let room = (app.inner.limits.max_model_len as usize)
        .saturating_sub(1)
        .max(1);
    let mut route = None;
    let mut pending = Vec::with_capacity(prompts.len());
    for mut prompt in prompts {
        let keep = match truncate {
            Some(-1) => room,
            Some(k) if k > 0 => (k as usize).min(room),
            _ => prompt.len(),
        };
        if prompt.len() > keep {
            prompt.drain(..prompt.len() - keep);
        }
        if prompt.len() > room {
            return Err(ApiError::bad_request(
                format!(
                    "This model's maximum context length is {} tokens. However, you requested {} tokens in the input for embedding generation. Please reduce the length of the input.",
                    app.inner.limits.max_model_len,
                    prompt.len()
                ),
                Some("input"),
            ));
        }
        if prompt.is_empty() {
            prompt.push(0);
        }
        let new = NewRequest {
            lora,
            id: 0,
            prompt,
            max_tokens: 1,
            min_tokens: 0,
            ignore_eos: true,
            seed: None,
            cache_salt: None,
            arrival_ns: 0,
        };
        let (engine, submitted) = crate::fleet::server_hooks::submit_pooling_input(
            app.inner.fleet.as_ref(),
            &app.inner.engine,
            &mut route,
            new,
            received,
        )
        .await?;
        let guard = AbortOnDrop::new(engine, submitted.id);
        pending.push((submitted.events, guard));
    }
    let mut lens = Vec::with_capacity(pending.len());
    for (mut events, mut guard) in pending {
        let finished = loop {
            match events.recv().await {
                Some(ev) => {
                    if let Some(f) = ev.finished {
                        break f;
                    }
                }
                None => return Err(ApiError::engine_stopped()),
            }
        };
        guard.disarm();
        if finished.reason == FinishReason::Abort {
            return Err(ApiError::engine_stopped());
        }
        lens.push(finished.prompt_tokens);
    }
    Ok((lens, route.and_then(|(_, served)| served)))
}

/// SplitMix64: a cheap, well-spread hash for deterministic values.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A unit-length vector of `dim` values in (−1, 1), the same for the same input position and
/// length.
fn vector(dim: usize, index: u64, len: u32) -> Vec<f32> {
    let seed = mix(index ^ (u64::from(len) << 32));
    let mut v: Vec<f32> = (0..dim as u64)
        .map(|i| (mix(seed ^ i) >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// A score in [0, 1) from the pair's text: the same pair always scores the same.
fn relevance(query: &str, doc: &str, len: u32) -> f64 {
    let h = query
        .bytes()
        .chain(doc.bytes())
        .fold(u64::from(len), |h, b| mix(h ^ u64::from(b)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        let a = vector(64, 3, 10);
        assert_eq!(a.len(), 64);
        assert_eq!(a, vector(64, 3, 10));
        assert_ne!(a, vector(64, 4, 10));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }

    #[test]
    fn relevance_is_deterministic_and_in_range() {
        let s = relevance("q", "d", 5);
        assert_eq!(s, relevance("q", "d", 5));
        assert!((0.0..1.0).contains(&s));
        assert_ne!(s, relevance("q", "e", 5));
    }
}
