//! Committing a step at its end `t1` (docs/simulator.md §2.2 step 6) and the per-token and
//! per-request metrics of §6.

use servebench_metrics::units::ns_to_s;

use super::request::{Queue, Request};
use super::types::{FinishReason, StepOutputs, TokenOutput};
use super::{finished_of, EngineCore, StepPlan};

impl EngineCore {
    /// Apply a planned step that ended at `t1_ns`: advance, sample, finish, update metrics.
    pub fn commit_step(&mut self, plan: StepPlan, t1_ns: u64) -> StepOutputs {
        let mut out = StepOutputs {
            tokens: Vec::with_capacity(plan.items.len()),
            finished: std::mem::take(&mut self.aborted),
        };
        let bs = self.config.block_size;
        let caching = self.config.enable_prefix_caching;
        let mut iteration_tokens = 0u64;
        let mut any_finished = false;

        for it in &plan.items {
            let Some(r) = self.slots[it.slot].as_mut() else {
                continue;
            };
            // Aborted (and maybe replaced) since the plan, or preempted by a later plan.
            if r.id != it.id || r.queue != Queue::Running || r.num_computed != it.context {
                continue;
            }
            r.num_computed += it.new_tokens;
            // Verification: a prefix of the drafts is accepted and keeps its KV; the rejected
            // rest is discarded. The step then yields the accepted drafts and one token more.
            let mut emit = 1u32;
            if it.drafts > 0 {
                if let Some(spec) = &self.config.spec {
                    let accepted = spec.draw_accepted(&mut self.spec_rng, it.drafts);
                    r.num_computed -= it.drafts - accepted;
                    emit += accepted;
                    if let Some(m) = self.metrics.spec_decode.as_mut() {
                        m.observe_draft(it.drafts, accepted);
                    }
                }
            }
            if caching {
                // Only blocks of known tokens have hashes (accepted drafts become known below).
                let full = r.num_computed.min(r.num_tokens()) / bs;
                if full > r.num_registered {
                    r.update_hashes(bs);
                    for b in r.num_registered..full {
                        self.pool
                            .register(r.blocks[b as usize], r.block_hashes[b as usize]);
                    }
                    r.num_registered = full;
                }
            }
            if r.num_computed < r.num_tokens() {
                // Only part of the prompt was covered: nothing to sample yet.
                continue;
            }
            let m = &mut self.metrics;
            match r.last_token_ns {
                None => {
                    r.first_token_ns = Some(t1_ns);
                    m.time_to_first_token
                        .observe(ns_to_s(t1_ns.saturating_sub(r.arrival_ns)));
                    m.prompt_tokens_total += r.prompt.len() as u64;
                    iteration_tokens += r.prompt.len() as u64;
                }
                Some(last) => {
                    // One observation per step, however many tokens it yields (vLLM's
                    // iteration stats).
                    let itl = ns_to_s(t1_ns.saturating_sub(last));
                    m.inter_token_latency.observe(itl);
                    m.inter_token_latency_fine.observe(itl);
                }
            }
            r.last_token_ns = Some(t1_ns);
            let mut finish = None;
            for _ in 0..emit {
                let token = r.draw_token(&self.config.output_vocab);
                r.output.push(token);
                m.generation_tokens_total += 1;
                iteration_tokens += 1;
                let index = r.output.len() as u32;
                finish = (index >= r.target_len).then_some(r.target_reason);
                out.tokens.push(TokenOutput {
                    id: r.id,
                    token,
                    index,
                    finish,
                    cached_tokens: r.num_cached,
                });
                if finish.is_some() {
                    break;
                }
            }
            if let Some(reason) = finish {
                let mut r = match self.slots[it.slot].take() {
                    Some(r) => r,
                    None => continue,
                };
                self.index.remove(&r.id);
                self.free_blocks(&mut r);
                self.observe_finished(&r, reason, t1_ns);
                out.finished.push(finished_of(&r, reason));
                self.free_slots.push(it.slot);
                any_finished = true;
            }
        }
        if any_finished {
            let slots = &self.slots;
            self.running.retain(|&s| slots[s].is_some());
        }

        let m = &mut self.metrics;
        m.steps_total += 1;
        m.iteration_tokens.observe(iteration_tokens as f64);
        m.step_duration.observe(ns_to_s(plan.duration_ns));
        m.step_scheduled_tokens
            .observe(f64::from(plan.scheduled_tokens));
        self.refresh_gauges();
        let mut items = plan.items;
        items.clear();
        self.spare_items = items;
        out
    }

    pub(super) fn observe_finished(&mut self, r: &Request, reason: FinishReason, t1_ns: u64) {
        self.observe_finished_counts(r);
        let m = &mut self.metrics;
        match reason {
            FinishReason::Stop => m.request_success_stop += 1,
            FinishReason::Length => m.request_success_length += 1,
            FinishReason::Abort => m.request_success_abort += 1,
        }
        m.e2e_request_latency
            .observe(ns_to_s(t1_ns.saturating_sub(r.arrival_ns)));
        if let (Some(sched), Some(first), Some(last)) =
            (r.first_scheduled_ns, r.first_token_ns, r.last_token_ns)
        {
            m.request_queue_time
                .observe(ns_to_s(sched.saturating_sub(r.arrival_ns)));
            m.request_prefill_time
                .observe(ns_to_s(first.saturating_sub(sched)));
            m.request_decode_time
                .observe(ns_to_s(last.saturating_sub(first)));
            m.request_inference_time
                .observe(ns_to_s(last.saturating_sub(sched)));
            let generated = r.output.len();
            if generated > 1 {
                m.request_time_per_output_token
                    .observe(ns_to_s(last.saturating_sub(first)) / (generated - 1) as f64);
            }
        }
    }
}
