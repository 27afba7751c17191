//! LoRA adapters in the engine core, as vLLM's scheduler treats them
//! (vllm/v1/core/sched/scheduler.py): a step holds requests of at most `max_loras` distinct
//! adapters; a waiting request whose adapter would exceed that is skipped for this step (the
//! requests behind it may still be admitted) and keeps its place in the queue. Adapters live in
//! `max_loras` GPU slots: a step that needs one not resident loads it (`load_ns`, evicting the
//! least recently used), and each token of an adapter's request costs a little more compute,
//! about `2·rank / hidden_size` of the base model's per-token work.

use super::{EngineCore, PlannedItem};

/// The engine's LoRA limits; `max_loras` 0: adapters are not served.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraConfig {
    /// `--max-loras`: distinct adapters per step, and GPU-resident adapters.
    pub max_loras: u32,
    /// `--max-lora-rank`: the rank every adapter is charged for.
    pub max_lora_rank: u32,
    /// Loading one adapter into a GPU slot.
    pub load_ns: u64,
}

/// May a request of adapter `lora` join a step whose adapters so far are `scheduled`?
pub(crate) fn fits(cfg: &LoraConfig, lora: Option<u32>, scheduled: &[u32]) -> bool {
    match lora {
        None => true,
        Some(l) => scheduled.contains(&l) || (scheduled.len() as u32) < cfg.max_loras.max(1),
    }
}

impl EngineCore {
    /// The adapter of the request in `slot`.
    pub(crate) fn lora_of(&self, slot: usize) -> Option<u32> {
        self.slots[slot].as_ref().and_then(|r| r.lora)
    }

    /// Extra seconds of a step of `base_secs` over `items`: loading the adapters it needs that
    /// are not resident, and the adapters' compute.
    pub(crate) fn lora_step_secs(&mut self, items: &[PlannedItem], base_secs: f64) -> f64 {
        let cfg = &self.config.lora;
        if cfg.max_loras == 0 {
            return 0.0;
        }
        let (mut lora_tokens, mut all_tokens) = (0u64, 0u64);
        let mut loads = 0u64;
        for it in items {
            all_tokens += u64::from(it.new_tokens);
            let Some(l) = self.lora_of(it.slot) else {
                continue;
            };
            lora_tokens += u64::from(it.new_tokens);
            if let Some(pos) = self.lora_resident.iter().position(|&r| r == l) {
                // Most recently used last.
                self.lora_resident.remove(pos);
            } else {
                loads += 1;
                if self.lora_resident.len() >= cfg.max_loras as usize {
                    self.lora_resident.remove(0);
                }
            }
            self.lora_resident.push(l);
        }
        let hidden = f64::from(self.config.deployment.model().hidden_size.max(1));
        let compute = if all_tokens > 0 {
            base_secs
                * (lora_tokens as f64 / all_tokens as f64)
                * 2.0
                * f64::from(cfg.max_lora_rank)
                / hidden
        } else {
            0.0
        };
        compute + loads as f64 * cfg.load_ns as f64 / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_loras_distinct_adapters_per_step() {
        let one = LoraConfig {
            max_loras: 1,
            ..LoraConfig::default()
        };
        assert!(fits(&one, None, &[1]));
        assert!(fits(&one, Some(1), &[1]));
        assert!(!fits(&one, Some(2), &[1]));
        assert!(fits(&one, Some(2), &[]));
        let two = LoraConfig {
            max_loras: 2,
            ..one
        };
        assert!(fits(&two, Some(2), &[1]));
        assert!(!fits(&two, Some(3), &[1, 2]));
    }
}
