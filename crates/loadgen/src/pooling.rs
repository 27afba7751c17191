//! Pooling requests (`/v1/embeddings`, `/v1/rerank`): a batch of inputs in one POST, one JSON
//! answer back, no tokens generated.
//!
//! A pooling request's prompt is its inputs joined by [`INPUT_SEPARATOR`] (the workload's
//! requests carry one text each); for rerank the first input is the query and the rest are
//! the documents, as vLLM's `vllm-rerank` client sends them.
//!
//! The record keeps two clock points: `first_token` is when the response head arrived (the
//! point vLLM's client takes as a pooling request's latency, and so its vLLM-format E2EL),
//! and `end` when the whole answer arrived (servebench's own E2EL: the vectors are the
//! answer). Prompt tokens come from the answer's `usage`, else the dataset; there are no
//! output tokens.

use bytes::Bytes;
use http::{header, HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use servebench_metrics::{CountSource, Failure, FailureKind, RequestRecord};
use servebench_wire::pooling::{read_reply, EmbeddingInput, EmbeddingRequest, RerankRequest};

use crate::client::{
    closed_before_response, error_chain, http_failure, read_excerpt, reused_and_unanswered,
    BackendClient, Prepared,
};
use crate::clock::RunClock;
use crate::stamped::WriteStamp;
use crate::stop::StopSignal;
use crate::target::{ApiKind, Target};

/// Joins the inputs of one pooling request into one prompt string. An ASCII record
/// separator: it never occurs in dataset text, so the split gives the inputs back exactly.
pub const INPUT_SEPARATOR: char = '\u{1e}';

/// One prompt holding `inputs` (see [`split_inputs`]).
pub fn join_inputs<S: AsRef<str>>(inputs: &[S]) -> String {
    let mut out = String::new();
    for (i, s) in inputs.iter().enumerate() {
        if i > 0 {
            out.push(INPUT_SEPARATOR);
        }
        out.push_str(s.as_ref());
    }
    out
}

/// The inputs of a prompt built by [`join_inputs`].
pub fn split_inputs(prompt: &str) -> Vec<&str> {
    prompt.split(INPUT_SEPARATOR).collect()
}

/// The most a pooling answer may carry: 256 MiB, ten times a batch of a thousand
/// 4096-dimension embeddings written as JSON.
pub const MAX_POOLING_BODY: usize = 256 * 1024 * 1024;

/// The JSON body of one pooling request, as vLLM's client builds it: the inputs (or the query
/// and documents), `truncate_prompt_tokens: -1` so a long input is truncated rather than
/// refused; `--extra-body` is merged into embeddings requests (vLLM does not merge it into
/// rerank requests).
pub(crate) fn body(target: &Target, prompt: &str) -> Vec<u8> {
    let inputs = split_inputs(prompt);
    match target.api {
        ApiKind::Rerank => {
            let (query, documents) = match inputs.split_first() {
                Some((q, docs)) => (*q, docs),
                None => ("", &[][..]),
            };
            let r = RerankRequest {
                model: target.model.clone(),
                query: query.to_owned(),
                documents: documents.iter().map(|d| (*d).to_owned()).collect(),
                top_n: None,
                truncate_prompt_tokens: Some(-1),
                extra: serde_json::Map::new(),
            };
            serde_json::to_vec(&r).unwrap_or_default()
        }
        _ => {
            let r = EmbeddingRequest {
                model: target.model.clone(),
                input: EmbeddingInput::Texts(inputs.iter().map(|s| (*s).to_owned()).collect()),
                encoding_format: None,
                truncate_prompt_tokens: Some(-1),
                extra: serde_json::Map::new(),
            };
            target.with_extra_body(&r)
        }
    }
}

/// What one exchange saw, in ns on the run clock.
#[derive(Debug, Default)]
struct Exchange {
    written: Option<u64>,
    head: Option<u64>,
    done: Option<u64>,
    prompt_tokens: Option<u64>,
    stale_connection: bool,
    /// The pool and replica a simulated fleet names in its headers.
    served_by: Option<servebench_metrics::ServedBy>,
}

/// Send one pooling request and measure it. Never fails: every problem is a failed record.
pub(crate) async fn execute(
    client: &BackendClient,
    clock: &RunClock,
    p: &Prepared,
    intended: u64,
    released: u64,
    waited_for_slot: bool,
    stop: &StopSignal,
) -> RequestRecord {
    let mut attempt = 0;
    let (mut sent, started, ex, result) = loop {
        attempt += 1;
        let mut ex = Exchange::default();
        let started = clock.now_ns();
        let req = match client.build_request(p.id, p.body.clone()) {
            Ok(mut req) => {
                req.headers_mut()
                    .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
                req
            }
            Err(e) => {
                let f = Failure {
                    kind: FailureKind::Transport,
                    status: None,
                    message: format!("could not build the request: {e}"),
                };
                break (started, started, ex, Err(f));
            }
        };
        let r = bounded(client, stop, exchange(client, clock, req, &mut ex)).await;
        // As for streamed requests: a reused connection the server had closed before reading
        // the request gets one more send, counted in `resent`.
        if r.is_err() && ex.stale_connection && attempt < 2 {
            continue;
        }
        break (started, started, ex, r);
    };
    if let Some(w) = ex.written.filter(|&w| w >= sent) {
        sent = w;
    }
    let done = ex.done.unwrap_or_else(|| clock.now_ns());
    let ok = result.is_ok();
    let (input_tokens, input_source) = match ex.prompt_tokens {
        Some(n) => (n, CountSource::Usage),
        None => (p.input_tokens, CountSource::Dataset),
    };
    RequestRecord {
        phases: None,
        id: p.id,
        intended,
        released,
        sent,
        started: Some(started),
        first_token: if ok { ex.head.or(Some(done)) } else { None },
        end: ok.then_some(done),
        done: Some(done),
        waited_for_slot,
        events: Vec::new(),
        bare_events: Vec::new(),
        input_tokens,
        input_source,
        output_tokens: 0,
        output_source: input_source,
        intended_input_tokens: p.input_tokens,
        max_tokens: None,
        cached_tokens: None,
        finish_reason: None,
        text: None,
        failure: result.err(),
        resent: attempt - 1,
        answer_checked: false,
        output_split: None,
        session_id: None,
        turn: None,
        stamp_clock: None,
        lora: p.lora.clone(),
        images: None,
        served_by: ex.served_by,
    }
}

/// `fut` under the request timeout and the run's cancellation.
async fn bounded(
    client: &BackendClient,
    stop: &StopSignal,
    fut: impl std::future::Future<Output = Result<(), Failure>>,
) -> Result<(), Failure> {
    let timed = async {
        match client.options().request_timeout {
            Some(d) => match tokio::time::timeout(d, fut).await {
                Ok(r) => r,
                Err(_) => Err(Failure {
                    kind: FailureKind::Timeout,
                    status: None,
                    message: format!("no complete response within {:.1} s", d.as_secs_f64()),
                }),
            },
            None => fut.await,
        }
    };
    tokio::select! {
        biased;
        r = timed => r,
        _ = stop.cancelled() => Err(Failure {
            kind: FailureKind::Cancelled,
            status: None,
            message: "interrupted: still in flight when the grace period ended".into(),
        }),
    }
}

async fn exchange(
    client: &BackendClient,
    clock: &RunClock,
    req: Request<Full<Bytes>>,
    ex: &mut Exchange,
) -> Result<(), Failure> {
    let resp = client.http().await.request(req).await.map_err(|e| {
        ex.stale_connection =
            !e.is_connect() && closed_before_response(&e) && reused_and_unanswered(&e);
        Failure {
            kind: if e.is_connect() {
                FailureKind::Connect
            } else {
                FailureKind::Transport
            },
            status: None,
            message: error_chain(&e),
        }
    })?;
    let head = clock.now_ns();
    ex.head = Some(head);
    ex.served_by = crate::served_by::from_headers(resp.headers());
    if let Some(t) = resp
        .extensions()
        .get::<WriteStamp>()
        .and_then(WriteStamp::first_write)
    {
        ex.written = Some(clock.ns_at(t));
    }
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        let excerpt = read_excerpt(&mut body).await;
        ex.done = Some(clock.now_ns());
        return Err(http_failure(status, &excerpt));
    }
    // Embeddings of a large batch run to megabytes; past the limit an answer is a server that
    // does not stop, recorded as one, and the client's memory stays bounded.
    let bytes = http_body_util::Limited::new(body, MAX_POOLING_BODY)
        .collect()
        .await
        .map_err(|e| {
            ex.done = Some(clock.now_ns());
            if e.is::<http_body_util::LengthLimitError>() {
                Failure {
                    kind: FailureKind::Overlong,
                    status: None,
                    message: format!(
                        "the answer ran past {MAX_POOLING_BODY} bytes: reading stopped"
                    ),
                }
            } else {
                Failure {
                    kind: FailureKind::Truncated,
                    status: None,
                    message: format!("the answer broke off: {e}"),
                }
            }
        })?;
    ex.done = Some(clock.now_ns());
    let reply = read_reply(&bytes.to_bytes()).map_err(|m| Failure {
        kind: FailureKind::Malformed,
        status: None,
        message: format!("not a pooling answer: {m}"),
    })?;
    ex.prompt_tokens = reply.prompt_tokens;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn target(api: ApiKind) -> Target {
        Target {
            base_url: "http://127.0.0.1:1".into(),
            endpoint: "/v1/embeddings".into(),
            api,
            model: "m".into(),
            headers: vec![],
            api_key: None,
            extra_body: serde_json::Map::new(),
            ignore_eos: true,
            transport: Default::default(),
        }
    }

    #[test]
    fn inputs_round_trip_through_one_prompt() {
        let p = join_inputs(&["a b", "c", ""]);
        assert_eq!(split_inputs(&p), vec!["a b", "c", ""]);
        assert_eq!(split_inputs("one"), vec!["one"]);
    }

    #[test]
    fn embeddings_body_is_vllms() {
        let mut t = target(ApiKind::Embeddings);
        t.extra_body.insert("dimensions".into(), Value::from(8));
        let v: Value = serde_json::from_slice(&body(&t, &join_inputs(&["x", "y"]))).unwrap();
        assert_eq!(v["model"], "m");
        assert_eq!(v["input"], serde_json::json!(["x", "y"]));
        assert_eq!(v["truncate_prompt_tokens"], -1);
        assert_eq!(v["dimensions"], 8);
        assert!(v.get("stream").is_none() && v.get("max_tokens").is_none());
    }

    #[test]
    fn rerank_body_takes_the_first_input_as_query() {
        let t = target(ApiKind::Rerank);
        let v: Value = serde_json::from_slice(&body(&t, &join_inputs(&["q", "d1", "d2"]))).unwrap();
        assert_eq!(v["query"], "q");
        assert_eq!(v["documents"], serde_json::json!(["d1", "d2"]));
        assert_eq!(v["truncate_prompt_tokens"], -1);
    }
}
