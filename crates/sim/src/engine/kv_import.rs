//! KV blocks that arrive from elsewhere (a prefill engine of a disaggregated pool): they enter
//! the prefix cache as free, hashed blocks, so the request that follows finds its prompt cached
//! and computes only the tail, as a decode engine of vLLM's P/D does after a KV transfer.

use super::hashing::block_hashes;
use super::EngineCore;

impl EngineCore {
    /// Registers the KV of `prompt`'s full blocks (all but the last token, which the engine
    /// recomputes for its logits) as cached. Returns the tokens now cached. Stops early when
    /// no block is free: the rest is recomputed, as if the transfer had been partial.
    pub fn import_prompt_kv(&mut self, prompt: &[u32], cache_salt: Option<&str>) -> u32 {
        let bs = self.config.block_size as usize;
        if bs == 0 || !self.config.enable_prefix_caching || prompt.len() < 2 {
            return 0;
        }
        let usable = (prompt.len() - 1) / bs * bs;
        let hashes = block_hashes(cache_salt, &prompt[..usable], bs);
        let mut fresh = Vec::with_capacity(hashes.len());
        let mut cached = 0u32;
        for h in hashes {
            if self.pool.lookup(h).is_none() {
                let Some(b) = self.pool.allocate() else {
                    break;
                };
                self.pool.register(b, h);
                fresh.push(b);
            }
            cached += bs as u32;
        }
        // Released tail first, so eviction takes a prompt's tail before its head.
        for b in fresh.into_iter().rev() {
            self.pool.release(b);
        }
        self.refresh_gauges();
        cached
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::NewRequest;
    use crate::test_support::engine_config as config;

    #[test]
    fn an_imported_prompt_is_a_prefix_hit() {
        let mut core = EngineCore::new(config()).unwrap();
        let prompt: Vec<u32> = (0..1000).collect();
        assert_eq!(core.import_prompt_kv(&prompt, None), 992);
        core.add(NewRequest {
            id: 1,
            prompt,
            max_tokens: 2,
            min_tokens: 0,
            ignore_eos: true,
            seed: None,
            cache_salt: None,
            arrival_ns: 0,
            lora: None,
        });
        let plan = core.plan_step(0).unwrap();
        // Only the uncached tail is computed in the first step.
        assert_eq!(plan.scheduled_tokens, 8);
        let out = core.commit_step(plan, 1);
        assert_eq!(out.tokens.len(), 1);
    }
}
