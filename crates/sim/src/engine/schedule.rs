//! One schedule (docs/simulator.md §2.2 steps 2–5): running requests first, then admissions from
//! the head of `waiting`, then the step's cost.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use servebench_metrics::units::{ms_to_s, NS_PER_S};
use servebench_roofline::SeqWork;

use super::request::Queue;
use super::{EngineCore, PlannedItem, StepPlan};

impl EngineCore {
    /// Schedule one step starting at `t0_ns`; `None` when idle. Every plan must be committed
    /// (`commit_step`) before the next one is made; commands (add, abort, reset) may come in
    /// between, and an aborted request simply drops out of its plan.
    pub fn plan_step(&mut self, t0_ns: u64) -> Option<StepPlan> {
        if self.is_idle() {
            return None;
        }
        let mut items = std::mem::take(&mut self.spare_items);
        items.clear();
        let mut scheduled = self.schedule(t0_ns, &mut items);
        if items.is_empty() && !self.is_idle() {
            // Only a request that preempted itself leaves a step empty; the next pass admits
            // it again (one `max_model_len` request always fits, see `EngineConfig::validate`).
            scheduled = self.schedule(t0_ns, &mut items);
        }
        self.refresh_gauges();
        if items.is_empty() {
            self.spare_items = items;
            return None;
        }
        let duration_ns = self.step_duration_ns(&items);
        Some(StepPlan {
            duration_ns,
            scheduled_tokens: scheduled,
            t0_ns,
            items,
        })
    }

    /// Fills `items`; returns the number of scheduled tokens.
    fn schedule(&mut self, t0_ns: u64, items: &mut Vec<PlannedItem>) -> u32 {
        let cfg = &self.config;
        let bs = cfg.block_size;
        let thr = cfg.long_prefill_token_threshold;
        let max_model_len = cfg.max_model_len;
        let mut budget = cfg.max_num_batched_tokens;
        let mut preempted = false;

        // Running first, in list order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            let Some(r) = self.slots[slot].as_ref() else {
                i += 1;
                continue;
            };
            let mut n = r.num_tokens() - r.num_computed;
            if thr > 0 {
                n = n.min(thr);
            }
            // A decoding request verifies the drafts proposed after its last step: 1 + k
            // tokens, as budget and max_model_len allow (vLLM trims the drafts so).
            let decoding = !r.output.is_empty() && n == 1;
            if decoding {
                if let Some(spec) = &self.config.spec {
                    n += spec.num_speculative_tokens;
                }
            }
            n = n
                .min(budget)
                .min(max_model_len.saturating_sub(1 + r.num_computed));
            let drafts = if decoding { n.saturating_sub(1) } else { 0 };
            if n == 0 {
                i += 1;
                continue;
            }
            let context = r.num_computed;
            let id = r.id;
            let need = ((context + n).div_ceil(bs) as usize).saturating_sub(r.blocks.len());
            let mut can_schedule = true;
            while (self.pool.num_free() as usize) < need {
                // Preempt the most recently admitted request; retry.
                let Some(victim) = self.running.pop() else {
                    can_schedule = false;
                    break;
                };
                self.preempt(victim);
                preempted = true;
                if victim == slot {
                    can_schedule = false;
                    break;
                }
            }
            if !can_schedule {
                break;
            }
            if let Some(r) = self.slots[slot].as_mut() {
                for _ in 0..need {
                    // Cannot fail: `need` free blocks were checked above.
                    if let Some(b) = self.pool.allocate() {
                        r.blocks.push(b);
                    }
                }
            }
            items.push(PlannedItem {
                slot,
                id,
                new_tokens: n,
                context,
                drafts,
            });
            budget -= n;
            i += 1;
        }

        // Waiting next, only if nothing was preempted in this step.
        if !preempted {
            let loras = self.step_loras(items);
            self.admit(t0_ns, &mut budget, items, loras);
        }
        self.config.max_num_batched_tokens - budget
    }

    /// Admissions from the head of `waiting` while budget, seats and blocks last.
    fn admit(
        &mut self,
        t0_ns: u64,
        budget: &mut u32,
        items: &mut Vec<PlannedItem>,
        mut loras: Vec<u32>,
    ) {
        let cfg = &self.config;
        let bs = cfg.block_size;
        let thr = cfg.long_prefill_token_threshold;
        let chunked = cfg.enable_chunked_prefill;
        let caching = cfg.enable_prefix_caching;
        let watermark_blocks = (cfg.kv_watermark * f64::from(self.pool.capacity())).ceil() as u64;
        let full_must_fit = cfg.full_sequence_must_fit;
        let max_num_seqs = cfg.max_num_seqs as usize;
        let prompt_cap = cfg.prompt_tokens_per_step_cap;
        let mut prompt_tokens = 0u32;
        // Requests whose adapter does not fit this step; back at the head afterwards.
        let mut skipped = Vec::new();

        while *budget > 0 && self.running.len() < max_num_seqs {
            let Some(&slot) = self.waiting.front() else {
                break;
            };
            let Some(r) = self.slots[slot].as_mut() else {
                self.waiting.pop_front();
                continue;
            };
            if !super::lora::fits(&cfg.lora, r.lora, &loras) {
                skipped.push(slot);
                self.waiting.pop_front();
                continue;
            }
            if let Some(l) = r.lora.filter(|l| !loras.contains(l)) {
                loras.push(l);
            }
            let num_tokens = r.num_tokens();

            // Longest cached prefix, capped so the last token is recomputed for its logits.
            self.hit_scratch.clear();
            if caching {
                r.update_hashes(bs);
                let max_blocks = ((num_tokens - 1) / bs) as usize;
                for &h in r.block_hashes.iter().take(max_blocks) {
                    match self.pool.lookup(h) {
                        Some(b) => self.hit_scratch.push(b),
                        None => break,
                    }
                }
                let hit = (self.hit_scratch.len() as u64) * u64::from(bs);
                if r.num_preemptions == 0 {
                    self.metrics.prefix_cache_queries_total += u64::from(num_tokens);
                    self.metrics.prefix_cache_hits_total += hit;
                } else {
                    self.metrics.preempted_prefix_queries_total += u64::from(num_tokens);
                    self.metrics.preempted_prefix_hits_total += hit;
                }
            }
            let hit_blocks = self.hit_scratch.len() as u32;
            let hit = hit_blocks * bs;

            let mut n = num_tokens - hit;
            if thr > 0 {
                n = n.min(thr);
            }
            if !chunked && n > *budget {
                // The rest must fit at once.
                break;
            }
            if !chunked && prompt_cap > 0 && prompt_tokens > 0 && prompt_tokens + n > prompt_cap {
                // TensorRT-LLM's max_num_tokens: a step already holding a prompt takes another
                // only within it (a longer prompt runs alone).
                break;
            }
            n = n.min(*budget);

            let new_blocks = (hit + n).div_ceil(bs) - hit_blocks;
            let hit_free = self
                .hit_scratch
                .iter()
                .filter(|&&b| self.pool.ref_count(b) == 0)
                .count() as u32;
            let need = u64::from(new_blocks) + u64::from(hit_free);
            let free = u64::from(self.pool.num_free());
            if need > free {
                // Head-of-line blocking: a later, smaller request never overtakes the head.
                break;
            }
            // The optional guards never block an empty engine: nothing else could free blocks.
            if !self.running.is_empty() {
                if watermark_blocks > 0 && free - need < watermark_blocks {
                    break;
                }
                if full_must_fit {
                    let whole =
                        (r.prompt.len() as u64 + u64::from(r.max_tokens)).div_ceil(u64::from(bs));
                    if whole - u64::from(hit_blocks) + u64::from(hit_free) > free {
                        break;
                    }
                }
            }

            for &b in &self.hit_scratch {
                self.pool.touch(b);
                r.blocks.push(b);
            }
            for _ in 0..new_blocks {
                if let Some(b) = self.pool.allocate() {
                    r.blocks.push(b);
                }
            }
            r.num_computed = hit;
            r.num_registered = hit_blocks;
            if r.first_scheduled_ns.is_none() {
                r.first_scheduled_ns = Some(t0_ns);
                r.num_cached = hit;
            }
            r.queue = Queue::Running;
            let id = r.id;
            self.waiting.pop_front();
            self.running.push(slot);
            items.push(PlannedItem {
                slot,
                id,
                new_tokens: n,
                context: hit,
                drafts: 0,
            });
            *budget -= n;
            prompt_tokens += n;
        }
        for slot in skipped.into_iter().rev() {
            self.waiting.push_front(slot);
        }
    }

    /// The distinct adapters of the requests planned so far.
    fn step_loras(&self, items: &[PlannedItem]) -> Vec<u32> {
        let mut loras = Vec::new();
        for it in items {
            if let Some(l) = self.lora_of(it.slot).filter(|l| !loras.contains(l)) {
                loras.push(l);
            }
        }
        loras
    }

    /// Recompute-only preemption: free the blocks, forget the computed tokens, back to the
    /// head of `waiting`.
    fn preempt(&mut self, slot: usize) {
        let Some(mut r) = self.slots[slot].take() else {
            return;
        };
        self.free_blocks(&mut r);
        r.num_computed = 0;
        r.num_registered = 0;
        r.num_preemptions += 1;
        r.queue = Queue::Waiting;
        self.slots[slot] = Some(r);
        self.metrics.num_preemptions_total += 1;
        self.waiting.push_front(slot);
    }

    /// `step_time(plan)` × jitter (+ hiccup), rounded to whole nanoseconds once; at least 1 ns
    /// so engine time always advances.
    fn step_duration_ns(&mut self, items: &[PlannedItem]) -> u64 {
        self.work.clear();
        for it in items {
            // Verified drafts run past the known tokens; the step samples at their end.
            let samples = self.slots[it.slot]
                .as_ref()
                .is_some_and(|r| it.context + it.new_tokens - it.drafts == r.num_tokens());
            self.work.push(SeqWork {
                new_tokens: it.new_tokens,
                context: it.context,
                samples,
            });
        }
        let mut secs = self.config.deployment.step_time(&self.work).total;
        if let Some(spec) = &self.config.spec {
            secs += spec.draft_seconds(&self.work);
            let drafts: u64 = items.iter().map(|it| u64::from(it.drafts)).sum();
            secs += super::spec::verify_logits_seconds(&self.config.deployment, drafts);
        }
        secs += self.lora_step_secs(items, secs);
        if self.config.jitter_sigma > 0.0 {
            let z: f64 = StandardNormal.sample(&mut self.jitter_rng);
            secs *= (self.config.jitter_sigma * z).exp();
        }
        if self.config.hiccup_prob > 0.0
            && self.jitter_rng.random::<f64>() < self.config.hiccup_prob
        {
            secs += ms_to_s(self.config.hiccup_ms);
        }
        let ns = (secs * NS_PER_S as f64).round();
        if ns.is_finite() && ns >= 1.0 {
            ns.min(u64::MAX as f64) as u64
        } else {
            1
        }
    }
}
