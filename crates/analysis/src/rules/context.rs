//! What the rules read: the groups' figures, their records and the deployment the predictions
//! are for, with the predictions several rules share.

use servebench_metrics::RequestRecord;
use servebench_roofline::{kv_capacity, scheduler_defaults, Deployment, KvSizing};

use crate::figures::RowFigures;
use crate::thresholds::DEFAULT_BATCHED_TOKENS;

/// What the rules read.
pub(crate) struct Ctx<'a> {
    pub rows: &'a [RowFigures],
    /// Each group's runs' records, parallel to `rows`.
    pub records: &'a [Vec<&'a [RequestRecord]>],
    pub deployment: Option<&'a Deployment>,
}

impl Ctx<'_> {
    /// The step token budget (prefill chunk) of the target.
    fn budget(&self, row: &RowFigures) -> u32 {
        if let Some(b) = row.target.max_num_batched_tokens {
            return u32::try_from(b).unwrap_or(u32::MAX);
        }
        match self.deployment {
            Some(d) => scheduler_defaults(d.gpu(), true, d.model().max_position_embeddings).0,
            None => DEFAULT_BATCHED_TOKENS,
        }
    }

    /// Idle-engine prefill of `tokens`, ms.
    pub fn idle_prefill_ms(&self, row: &RowFigures, tokens: f64) -> Option<f64> {
        let d = self.deployment?;
        let tokens = tokens.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        Some(d.prefill_time(tokens, self.budget(row)).total_s * 1e3)
    }

    /// KV-cache tokens and where the figure comes from.
    pub fn kv_capacity(&self, row: &RowFigures) -> Option<(u64, &'static str)> {
        if let Some(t) = row.target.kv_cache_tokens {
            return Some((t, "the server's configuration"));
        }
        let d = self.deployment?;
        let kv = kv_capacity(d, &KvSizing::server_defaults(d)).ok()?;
        Some((
            kv.tokens,
            "predicted at vLLM's defaults (gpu_memory_utilization 0.9)",
        ))
    }
}
