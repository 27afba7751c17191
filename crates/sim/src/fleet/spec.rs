//! From fleet flags to a validated [`ResolvedFleet`]: pools with their engine configurations,
//! replica counts, router, rate limit and prefill/decode split, and the routing rules.

use crate::args::{split_shell_words, SimArgs};
use crate::engine::EngineConfig;
use crate::SimError;

use super::args::{FleetArgs, RouterPolicy};
use super::rules::{self, RouteRule};

/// The KV hand-off of a prefill/decode pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PdSpec {
    pub prefill_replicas: u32,
    pub decode_replicas: u32,
    /// Per-GPU link bandwidth, bytes per second.
    pub link_bytes_per_s: f64,
    /// Fixed latency of one hand-off, ns.
    pub link_latency_ns: u64,
    /// Per-GPU KV bytes of one token (each GPU of a tensor-parallel group sends its shard).
    pub kv_bytes_per_token: f64,
}

impl PdSpec {
    /// Time to move the KV cache of `tokens` prompt tokens: bytes / bandwidth + latency.
    pub fn transfer_ns(&self, tokens: u32) -> u64 {
        let secs = f64::from(tokens) * self.kv_bytes_per_token / self.link_bytes_per_s;
        (secs * 1e9).round() as u64 + self.link_latency_ns
    }
}

/// One pool of identical engines.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub name: String,
    pub engine: EngineConfig,
    /// Engines serving requests whole (a prefill/decode pool has `pd` instead, and 0 here).
    pub replicas: u32,
    pub router: RouterPolicy,
    /// `(requests per second, burst)`.
    pub rate_limit: Option<(f64, f64)>,
    pub pd: Option<PdSpec>,
    /// GPUs of one engine (its tensor-parallel size).
    pub gpus_per_replica: u32,
}

impl PoolSpec {
    /// Engines in the pool, prefill and decode ones included.
    pub fn num_engines(&self) -> u32 {
        match &self.pd {
            Some(pd) => pd.prefill_replicas + pd.decode_replicas,
            None => self.replicas,
        }
    }

    /// GPUs the pool occupies.
    pub fn gpus(&self) -> u32 {
        self.num_engines() * self.gpus_per_replica
    }

    /// The label of engine `i` of this pool: `3`, or `p0`/`d1` in a prefill/decode pool.
    pub fn replica_label(&self, i: u32) -> String {
        match &self.pd {
            Some(pd) if i < pd.prefill_replicas => format!("p{i}"),
            Some(pd) => format!("d{}", i - pd.prefill_replicas),
            None => i.to_string(),
        }
    }
}

/// The header `--router session` keys on unless `--session-header` names another.
pub const DEFAULT_SESSION_HEADER: &str = "x-session-id";

/// A validated fleet.
#[derive(Debug, Clone)]
pub struct ResolvedFleet {
    pub pools: Vec<PoolSpec>,
    pub rules: Vec<RouteRule>,
    pub default_pool: usize,
    /// The header `--router session` keys on (lower case).
    pub session_header: String,
}

impl ResolvedFleet {
    /// The pool a request of this shape goes to.
    pub fn route(&self, prompt_tokens: u64, max_tokens: u64) -> usize {
        rules::route(&self.rules, self.default_pool, prompt_tokens, max_tokens)
    }

    /// GPUs of the whole fleet.
    pub fn gpus(&self) -> u32 {
        self.pools.iter().map(PoolSpec::gpus).sum()
    }

    /// For `/sim/config` and result metadata.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "gpus": self.gpus(),
            "default_pool": self.pools.get(self.default_pool).map(|p| p.name.clone()),
            "routes": self.rules.iter().map(|r| r.text.clone()).collect::<Vec<_>>(),
            "session_header": self
                .pools
                .iter()
                .any(|p| p.router == RouterPolicy::Session)
                .then(|| self.session_header.clone()),
            "pools": self.pools.iter().map(|p| serde_json::json!({
                "name": p.name,
                "model": p.engine.deployment.model().id,
                "gpu": p.engine.deployment.gpu().id,
                "tensor_parallel_size": p.gpus_per_replica,
                "replicas": p.replicas,
                "router": p.router.as_str(),
                "rate_limit_rps": p.rate_limit.map(|r| r.0),
                "prefill_replicas": p.pd.as_ref().map(|d| d.prefill_replicas),
                "decode_replicas": p.pd.as_ref().map(|d| d.decode_replicas),
                "kv_link_gbps": p.pd.as_ref().map(|d| d.link_bytes_per_s / 1e9),
                "max_model_len": p.engine.max_model_len,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A pool spec may spell the model `--model NAME` (as `vllm serve --model`); the sim parser
/// takes it positionally.
fn model_flag_to_positional(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        if w == "--model" {
            if let Some(v) = it.next() {
                out.push(v);
            }
        } else if let Some(v) = w.strip_prefix("--model=") {
            out.push(v.to_owned());
        } else {
            out.push(w);
        }
    }
    out
}

fn quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', "'\\''"))
}

fn pool_of(
    name: String,
    args: &SimArgs,
    engine: EngineConfig,
    fallback_router: RouterPolicy,
) -> Result<PoolSpec, SimError> {
    let f = &args.fleet;
    let named = |msg: String| SimError::Config(format!("pool '{name}': {msg}"));
    if f.replicas == 0 {
        return Err(named("--replicas must be at least 1".into()));
    }
    if !(f.rate_limit.is_finite() && f.rate_limit >= 0.0) {
        return Err(named(format!(
            "--rate-limit must be a non-negative number, got {}",
            f.rate_limit
        )));
    }
    if !(f.rate_limit_burst.is_finite() && f.rate_limit_burst >= 1.0) {
        return Err(named(format!(
            "--rate-limit-burst must be at least 1, got {}",
            f.rate_limit_burst
        )));
    }
    let gpus_per_replica = engine.deployment.tp();
    let pd = match (f.prefill_replicas, f.decode_replicas) {
        (Some(p), Some(d)) => {
            if p == 0 || d == 0 {
                return Err(named(
                    "--prefill-replicas and --decode-replicas must be at least 1".into(),
                ));
            }
            if !engine.enable_prefix_caching {
                return Err(named(
                    "prefill/decode disaggregation hands the KV cache over as cached blocks: drop --no-enable-prefix-caching".into(),
                ));
            }
            let gbps = f.kv_link_gbps.unwrap_or(engine.deployment.gpu().link_gbps);
            if !(gbps.is_finite() && gbps > 0.0) {
                return Err(named(format!(
                    "--kv-link-gbps must be positive, got {gbps}"
                )));
            }
            if !(f.kv_link_latency_us.is_finite() && f.kv_link_latency_us >= 0.0) {
                return Err(named(format!(
                    "--kv-link-latency-us must be a non-negative number, got {}",
                    f.kv_link_latency_us
                )));
            }
            Some(PdSpec {
                prefill_replicas: p,
                decode_replicas: d,
                link_bytes_per_s: gbps * 1e9,
                link_latency_ns: (f.kv_link_latency_us * 1e3).round() as u64,
                kv_bytes_per_token: engine.deployment.kv_bytes_per_token(),
            })
        }
        _ => None,
    };
    let router = if f.router == RouterPolicy::default() {
        fallback_router
    } else {
        f.router
    };
    Ok(PoolSpec {
        name,
        replicas: if pd.is_some() { 0 } else { f.replicas },
        router,
        rate_limit: (f.rate_limit > 0.0).then_some((f.rate_limit, f.rate_limit_burst)),
        pd,
        gpus_per_replica,
        engine,
    })
}

/// The fleet the flags describe, `None` for the plain single engine. `top` is the engine the
/// top-level flags resolved to; `max_model_len` bounds what the endpoint accepts.
pub fn resolve(args: &SimArgs, top: &EngineConfig) -> Result<Option<ResolvedFleet>, SimError> {
    let f: &FleetArgs = &args.fleet;
    if !f.is_fleet() {
        return Ok(None);
    }
    let mut pools = Vec::new();
    if f.pools.is_empty() {
        pools.push(pool_of("default".into(), args, top.clone(), f.router)?);
    } else {
        if f.replicas != 1 || f.prefill_replicas.is_some() || f.rate_limit != 0.0 {
            return Err(SimError::Config(
                "with --pool, give --replicas, --prefill-replicas and --rate-limit inside each pool's spec".into(),
            ));
        }
        for p in &f.pools {
            let (name, spec) = p
                .split_once('=')
                .ok_or_else(|| SimError::Config(format!("--pool '{p}': expected NAME=SPEC")))?;
            let name = name.trim().to_owned();
            let named = |msg: String| SimError::Config(format!("pool '{name}': {msg}"));
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(SimError::Config(format!(
                    "--pool '{p}': a pool name is letters, digits, '-' and '_'"
                )));
            }
            if pools.iter().any(|q: &PoolSpec| q.name == name) {
                return Err(named("the name is used twice".into()));
            }
            let words = model_flag_to_positional(
                split_shell_words(spec).map_err(|e| named(e.to_string()))?,
            );
            let line = words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
            let pool_args = SimArgs::parse_spec(&line).map_err(|e| named(e.to_string()))?;
            if !pool_args.fleet.pools.is_empty() || !pool_args.fleet.routes.is_empty() {
                return Err(named("a pool cannot hold pools or routes".into()));
            }
            let engine = pool_args
                .resolve()
                .map_err(|e| named(e.to_string()))?
                .engine;
            pools.push(pool_of(name, &pool_args, engine, f.router)?);
        }
    }
    let names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
    let find = |n: &str, what: &str| {
        names.iter().position(|x| x == n).ok_or_else(|| {
            SimError::Config(format!(
                "{what} names pool '{n}', but the pools are: {}",
                names.join(", ")
            ))
        })
    };
    let default_pool = match &f.default_pool {
        Some(n) => find(n, "--default-pool")?,
        None => 0,
    };
    let mut rules = Vec::new();
    for text in &f.routes {
        let mut r = RouteRule::parse(text)?;
        r.pool = find(&r.pool_name, &format!("--route '{text}'"))?;
        rules.push(r);
    }
    let limits: Vec<u32> = pools.iter().map(|p| p.engine.max_model_len).collect();
    rules::check(&rules, default_pool, &names, top.max_model_len, &limits)?;
    let session_header = f
        .session_header
        .clone()
        .unwrap_or_else(|| DEFAULT_SESSION_HEADER.to_owned())
        .to_ascii_lowercase();
    if http::HeaderName::try_from(session_header.as_str()).is_err() {
        return Err(SimError::Config(format!(
            "--session-header {session_header:?} is not an HTTP header name"
        )));
    }
    Ok(Some(ResolvedFleet {
        pools,
        rules,
        default_pool,
        session_header,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fleet(spec: &str) -> Result<Option<ResolvedFleet>, SimError> {
        let args = SimArgs::parse_spec(spec)?;
        let top = args.resolve()?;
        resolve(&args, &top.engine)
    }

    #[test]
    fn no_fleet_flag_means_one_engine() {
        assert!(fleet("llama-3.1-8b").unwrap().is_none());
    }

    #[test]
    fn replicas_make_one_default_pool() {
        let f = fleet("--replicas 4 --router least-outstanding")
            .unwrap()
            .unwrap();
        assert_eq!(f.pools.len(), 1);
        assert_eq!(f.pools[0].replicas, 4);
        assert_eq!(f.pools[0].router, RouterPolicy::LeastOutstanding);
        assert_eq!(f.gpus(), 4);
    }

    #[test]
    fn named_pools_parse_with_their_own_flags() {
        let f = fleet(
            "--pool 'chat=--model llama-3.1-8b --gpu h100 --replicas 3' --pool 'long=--replicas 1 --max-num-batched-tokens 8192' --route 'prompt_tokens>=4096 -> long'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(f.pools[0].replicas, 3);
        assert_eq!(f.pools[1].engine.max_num_batched_tokens, 8192);
        assert_eq!(f.gpus(), 4);
        assert_eq!(f.route(5000, 10), 1);
        assert_eq!(f.route(50, 10), 0);
    }

    #[test]
    fn a_pool_that_does_not_parse_names_the_pool() {
        let e = fleet("--pool 'chat=--gpu nosuchgpu'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool 'chat'"), "{e}");
        let e = fleet("--pool 'long=--no-such-flag 3'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool 'long'"), "{e}");
        let e = fleet("--pool chat").unwrap_err().to_string();
        assert!(e.contains("NAME=SPEC"), "{e}");
        let e = fleet("--pool 'a=' --route 'prompt_tokens>1 -> b'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool 'b'"), "{e}");
    }

    #[test]
    fn a_pd_pool_sizes_its_link() {
        let f = fleet(
            "--prefill-replicas 1 --decode-replicas 2 --kv-link-gbps 10 --kv-link-latency-us 100",
        )
        .unwrap()
        .unwrap();
        let pd = f.pools[0].pd.as_ref().unwrap();
        assert_eq!(f.gpus(), 3);
        // llama-3.1-8b, bf16 KV: 128 KiB per token.
        assert_eq!(pd.kv_bytes_per_token, 131_072.0);
        assert_eq!(pd.transfer_ns(1000), 13_107_200 + 100_000);
        assert_eq!(f.pools[0].replica_label(2), "d1");
    }
}
