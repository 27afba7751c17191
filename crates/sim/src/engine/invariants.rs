//! Read-only consistency checks of the engine state (docs/simulator.md §10.7), for tests.

use super::request::Queue;
use super::EngineCore;

impl EngineCore {
    /// Checks every structural invariant between steps: queue membership, `running ≤
    /// max_num_seqs`, block reference counts equal to the requests holding them, free +
    /// referenced = `num_gpu_blocks − 1`, blocks held = blocks needed for computed tokens.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let bs = self.config.block_size;
        if self.running.len() > self.config.max_num_seqs as usize {
            return Err(format!(
                "{} running > max_num_seqs {}",
                self.running.len(),
                self.config.max_num_seqs
            ));
        }
        let mut seen = vec![false; self.slots.len()];
        let mut holders = vec![0u32; self.config.num_gpu_blocks as usize];
        for (queue, slots) in [
            (
                Queue::Waiting,
                self.waiting.iter().copied().collect::<Vec<_>>(),
            ),
            (Queue::Running, self.running.clone()),
        ] {
            for s in slots {
                let r = self.slots[s]
                    .as_ref()
                    .ok_or(format!("queued slot {s} is empty"))?;
                if seen[s] {
                    return Err(format!("request {} queued twice", r.id));
                }
                seen[s] = true;
                if r.queue != queue {
                    return Err(format!("request {} is in the wrong queue", r.id));
                }
                if self.index.get(&r.id) != Some(&s) {
                    return Err(format!("request {} missing from the id index", r.id));
                }
                if queue == Queue::Waiting && (!r.blocks.is_empty() || r.num_computed != 0) {
                    return Err(format!("waiting request {} holds blocks or KV", r.id));
                }
                if queue == Queue::Running {
                    let want = r.num_computed.div_ceil(bs) as usize;
                    if r.blocks.len() != want {
                        return Err(format!(
                            "request {} holds {} blocks for {} computed tokens",
                            r.id,
                            r.blocks.len(),
                            r.num_computed
                        ));
                    }
                    if r.num_computed >= r.num_tokens() {
                        return Err(format!("running request {} has nothing to compute", r.id));
                    }
                }
                for &b in &r.blocks {
                    holders[b as usize] += 1;
                }
            }
        }
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        if live != self.waiting.len() + self.running.len() || live != self.index.len() {
            return Err(format!(
                "{live} live requests, {} waiting, {} running, {} indexed",
                self.waiting.len(),
                self.running.len(),
                self.index.len()
            ));
        }
        self.pool.check(&holders)
    }
}
