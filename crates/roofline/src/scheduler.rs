//! vLLM V1's scheduler defaults (docs/simulator.md §2.5).

use crate::{BatchClass, GpuSpec, RooflineError};

/// `(max_num_batched_tokens, max_num_seqs)` defaults of a batch class with chunked prefill.
pub fn class_defaults(class: BatchClass) -> (u32, u32) {
    match class {
        BatchClass::Large => (8192, 1024),
        BatchClass::Small => (2048, 256),
    }
}

/// The smallest default budget when chunked prefill is off.
pub const UNCHUNKED_MIN_BUDGET: u32 = 2048;

/// vLLM's defaults for `(max_num_batched_tokens, max_num_seqs)` on this GPU: 8192/1024 on
/// the large class, 2048/256 otherwise; with chunked prefill off the budget is
/// `max(max_model_len, 2048)`; `max_num_seqs` never exceeds the budget.
pub fn scheduler_defaults(gpu: &GpuSpec, chunked_prefill: bool, max_model_len: u32) -> (u32, u32) {
    let (budget, seqs) = class_defaults(gpu.batch_class);
    let budget = if chunked_prefill {
        budget
    } else {
        max_model_len.max(UNCHUNKED_MIN_BUDGET)
    };
    (budget, seqs.min(budget))
}

/// Resolves explicit `--max-num-batched-tokens` / `--max-num-seqs` against the defaults,
/// rejecting what vLLM rejects: a budget below `max_model_len` with chunked prefill off, a
/// zero limit, and more sequences than budget tokens.
pub fn resolve_scheduler_limits(
    gpu: &GpuSpec,
    chunked_prefill: bool,
    max_model_len: u32,
    max_num_batched_tokens: Option<u32>,
    max_num_seqs: Option<u32>,
) -> Result<(u32, u32), RooflineError> {
    let (default_budget, _) = scheduler_defaults(gpu, chunked_prefill, max_model_len);
    let budget = max_num_batched_tokens.unwrap_or(default_budget);
    if budget == 0 {
        return Err(RooflineError::Invalid(
            "max_num_batched_tokens must be at least 1".into(),
        ));
    }
    if !chunked_prefill && budget < max_model_len {
        return Err(RooflineError::Invalid(format!(
            "max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}) \
             with chunked prefill disabled, so the longest prompts could never be scheduled; \
             raise max_num_batched_tokens, lower max_model_len or enable chunked prefill"
        )));
    }
    let seqs = match max_num_seqs {
        Some(0) => {
            return Err(RooflineError::Invalid(
                "max_num_seqs must be at least 1".into(),
            ))
        }
        Some(s) if s > budget => {
            return Err(RooflineError::Invalid(format!(
                "max_num_batched_tokens ({budget}) must be at least max_num_seqs ({s})"
            )))
        }
        Some(s) => s,
        None => class_defaults(gpu.batch_class).1.min(budget),
    };
    Ok((budget, seqs))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Catalog;

    #[test]
    fn defaults_by_class() {
        let c = Catalog::builtin();
        for id in ["h100", "h200", "b200", "mi300x", "h100-pcie"] {
            assert_eq!(
                scheduler_defaults(c.gpu(id).unwrap(), true, 131072),
                (8192, 1024),
                "{id}"
            );
        }
        for id in ["a100-80g", "a100-40g", "a40", "l4", "a10g"] {
            assert_eq!(
                scheduler_defaults(c.gpu(id).unwrap(), true, 131072),
                (2048, 256),
                "{id}"
            );
        }
    }

    #[test]
    fn unchunked_budget_covers_max_model_len() {
        let c = Catalog::builtin();
        let h100 = c.gpu("h100").unwrap();
        assert_eq!(scheduler_defaults(h100, false, 131072), (131072, 1024));
        assert_eq!(scheduler_defaults(h100, false, 1024), (2048, 1024));
        let l4 = c.gpu("l4").unwrap();
        assert_eq!(scheduler_defaults(l4, false, 512), (2048, 256));
    }

    #[test]
    fn explicit_limits() {
        let c = Catalog::builtin();
        let h100 = c.gpu("h100").unwrap();
        // max_num_seqs follows a small explicit budget down.
        assert_eq!(
            resolve_scheduler_limits(h100, true, 131072, Some(512), None).unwrap(),
            (512, 512)
        );
        assert_eq!(
            resolve_scheduler_limits(h100, true, 131072, None, Some(8)).unwrap(),
            (8192, 8)
        );
        let e = resolve_scheduler_limits(h100, false, 8192, Some(4096), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4096") && e.contains("8192") && e.contains("chunked prefill"),
            "{e}"
        );
        let e = resolve_scheduler_limits(h100, true, 8192, Some(16), Some(32))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least max_num_seqs"), "{e}");
        assert!(resolve_scheduler_limits(h100, true, 8192, Some(0), None).is_err());
        assert!(resolve_scheduler_limits(h100, true, 8192, None, Some(0)).is_err());
    }
}
