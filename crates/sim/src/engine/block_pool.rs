//! The paged KV block pool with its prefix cache (docs/simulator.md §2.3, §2.4).
//!
//! Block 0 is the reserved null block and never allocated. Free blocks sit in an LRU queue
//! (an intrusive doubly linked list over block ids, so a cache hit can pull a block out of the
//! middle in O(1)). Allocation pops from the front and evicts the popped block's hash; freed
//! blocks that carry a hash go to the back (kept longest), unhashed ones to the front.

use std::collections::HashMap;

/// Sentinel for "no block" in the intrusive free list.
const NIL: u32 = u32::MAX;

/// Reference counts, hashes, the LRU free queue and the `hash → block` map.
#[derive(Debug)]
pub(crate) struct BlockPool {
    ref_cnt: Vec<u32>,
    /// The prefix hash a block holds, if it is full and was registered.
    hash: Vec<Option<u64>>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    num_free: u32,
    /// Looked up only, never iterated, so it cannot make a decision order-dependent.
    cached: HashMap<u64, u32>,
}

impl BlockPool {
    /// A pool of `num_gpu_blocks` blocks (the null block included), all free and unhashed.
    pub(crate) fn new(num_gpu_blocks: u32) -> Self {
        let n = num_gpu_blocks as usize;
        let mut pool = BlockPool {
            ref_cnt: vec![0; n],
            hash: vec![None; n],
            prev: vec![NIL; n],
            next: vec![NIL; n],
            head: NIL,
            tail: NIL,
            num_free: 0,
            cached: HashMap::new(),
        };
        for b in 1..num_gpu_blocks {
            pool.push_back(b);
        }
        pool
    }

    /// Allocatable blocks: `num_gpu_blocks − 1`.
    pub(crate) fn capacity(&self) -> u32 {
        (self.ref_cnt.len() as u32).saturating_sub(1)
    }

    /// Free blocks, cached ones included.
    pub(crate) fn num_free(&self) -> u32 {
        self.num_free
    }

    /// `1 − free / (num_gpu_blocks − 1)`.
    pub(crate) fn usage(&self) -> f64 {
        let cap = self.capacity();
        if cap == 0 {
            return 0.0;
        }
        1.0 - f64::from(self.num_free) / f64::from(cap)
    }

    pub(crate) fn ref_count(&self, block: u32) -> u32 {
        self.ref_cnt[block as usize]
    }

    /// The cached block holding this prefix hash, if any.
    pub(crate) fn lookup(&self, hash: u64) -> Option<u32> {
        self.cached.get(&hash).copied()
    }

    /// Take one more reference to a cached block (a prefix hit), pulling it out of the free
    /// queue when nobody held it. The caller has checked there is room (see `can_allocate`).
    pub(crate) fn touch(&mut self, block: u32) {
        let b = block as usize;
        if self.ref_cnt[b] == 0 {
            self.unlink(block);
        }
        self.ref_cnt[b] += 1;
    }

    /// Pop a block from the front of the free queue, evicting its hash. `None` when empty.
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        let block = self.head;
        if block == NIL {
            return None;
        }
        self.unlink(block);
        let b = block as usize;
        if let Some(h) = self.hash[b].take() {
            // The map keeps the first block registered under a hash; only that one evicts it.
            if self.cached.get(&h) == Some(&block) {
                self.cached.remove(&h);
            }
        }
        self.ref_cnt[b] = 1;
        Some(block)
    }

    /// Drop one reference; at zero the block returns to the free queue (hashed: back,
    /// unhashed: front). Callers walk a request's blocks tail first.
    pub(crate) fn release(&mut self, block: u32) {
        let b = block as usize;
        debug_assert!(self.ref_cnt[b] > 0, "release of a free block {block}");
        self.ref_cnt[b] -= 1;
        if self.ref_cnt[b] == 0 {
            if self.hash[b].is_some() {
                self.push_back(block);
            } else {
                self.push_front(block);
            }
        }
    }

    /// Register a full block under its prefix hash. A block that already carries a hash keeps
    /// it; the map keeps the first block registered under a hash (no de-duplication).
    pub(crate) fn register(&mut self, block: u32, hash: u64) {
        let b = block as usize;
        if self.hash[b].is_some() {
            return;
        }
        self.hash[b] = Some(hash);
        self.cached.entry(hash).or_insert(block);
    }

    /// Drop every hash; refused (false) while any block is referenced.
    pub(crate) fn reset(&mut self) -> bool {
        if self.num_free != self.capacity() {
            return false;
        }
        self.cached.clear();
        for h in &mut self.hash {
            *h = None;
        }
        true
    }

    fn push_back(&mut self, block: u32) {
        let b = block as usize;
        self.prev[b] = self.tail;
        self.next[b] = NIL;
        if self.tail == NIL {
            self.head = block;
        } else {
            self.next[self.tail as usize] = block;
        }
        self.tail = block;
        self.num_free += 1;
    }

    fn push_front(&mut self, block: u32) {
        let b = block as usize;
        self.next[b] = self.head;
        self.prev[b] = NIL;
        if self.head == NIL {
            self.tail = block;
        } else {
            self.prev[self.head as usize] = block;
        }
        self.head = block;
        self.num_free += 1;
    }

    fn unlink(&mut self, block: u32) {
        let b = block as usize;
        let (p, n) = (self.prev[b], self.next[b]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[b] = NIL;
        self.next[b] = NIL;
        self.num_free -= 1;
    }

    /// Free-queue contents front to back (tests and invariant checks).
    pub(crate) fn free_list(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.num_free as usize);
        let mut b = self.head;
        while b != NIL {
            out.push(b);
            b = self.next[b as usize];
        }
        out
    }

    /// Checks the pool's own consistency against the expected per-block holder counts.
    pub(crate) fn check(&self, holders: &[u32]) -> Result<(), String> {
        if self.ref_cnt[0] != 0 || holders[0] != 0 {
            return Err("the null block 0 is referenced".into());
        }
        let free = self.free_list();
        if free.len() as u32 != self.num_free {
            return Err(format!(
                "free queue holds {} blocks but num_free is {}",
                free.len(),
                self.num_free
            ));
        }
        let mut in_free = vec![false; self.ref_cnt.len()];
        for &b in &free {
            if b == 0 {
                return Err("the null block is in the free queue".into());
            }
            if in_free[b as usize] {
                return Err(format!("block {b} is twice in the free queue"));
            }
            in_free[b as usize] = true;
        }
        let mut referenced = 0u32;
        for b in 1..self.ref_cnt.len() {
            if self.ref_cnt[b] != holders[b] {
                return Err(format!(
                    "block {b}: ref count {} but {} holders",
                    self.ref_cnt[b], holders[b]
                ));
            }
            if self.ref_cnt[b] > 0 {
                referenced += 1;
                if in_free[b] {
                    return Err(format!("referenced block {b} is in the free queue"));
                }
            } else if !in_free[b] {
                return Err(format!("block {b} is neither referenced nor free"));
            }
        }
        if self.num_free + referenced != self.capacity() {
            return Err(format!(
                "free {} + referenced {referenced} != {}",
                self.num_free,
                self.capacity()
            ));
        }
        for (h, &b) in &self.cached {
            if self.hash[b as usize] != Some(*h) {
                return Err(format!("map entry for block {b} does not match its hash"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_never_allocated() {
        let mut p = BlockPool::new(4);
        let got: Vec<u32> = std::iter::from_fn(|| p.allocate()).collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(p.num_free(), 0);
        assert!((p.usage() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn freed_hashed_blocks_go_back_unhashed_front() {
        let mut p = BlockPool::new(5);
        let a = p.allocate().unwrap();
        let b = p.allocate().unwrap();
        p.register(a, 11);
        p.release(a);
        p.release(b);
        // b (unhashed) is reused first, a (hashed) is kept longest.
        assert_eq!(p.free_list(), vec![b, 3, 4, a]);
        assert_eq!(p.lookup(11), Some(a));
    }

    #[test]
    fn allocation_evicts_the_hash() {
        let mut p = BlockPool::new(2);
        let a = p.allocate().unwrap();
        p.register(a, 7);
        p.release(a);
        assert_eq!(p.lookup(7), Some(a));
        let again = p.allocate().unwrap();
        assert_eq!(again, a);
        assert_eq!(p.lookup(7), None);
    }

    #[test]
    fn touch_pulls_a_cached_block_out_of_the_free_queue() {
        let mut p = BlockPool::new(4);
        let a = p.allocate().unwrap();
        p.register(a, 9);
        p.release(a);
        assert_eq!(p.num_free(), 3);
        p.touch(a);
        assert_eq!(p.num_free(), 2);
        assert_eq!(p.ref_count(a), 1);
        assert!(!p.free_list().contains(&a));
        let holders = vec![0, 1, 0, 0];
        p.check(&holders).unwrap();
    }

    #[test]
    fn map_keeps_the_first_block_of_a_hash() {
        let mut p = BlockPool::new(4);
        let a = p.allocate().unwrap();
        let b = p.allocate().unwrap();
        p.register(a, 5);
        p.register(b, 5);
        assert_eq!(p.lookup(5), Some(a));
        p.release(b);
        p.release(a);
        // Evicting the duplicate must not drop the entry that names the first block.
        let _ = p.allocate(); // block 3 (was at the front)
        let dup = p.allocate().unwrap();
        assert_eq!(dup, b);
        assert_eq!(p.lookup(5), Some(a));
    }

    #[test]
    fn reset_refused_while_referenced() {
        let mut p = BlockPool::new(3);
        let a = p.allocate().unwrap();
        p.register(a, 1);
        assert!(!p.reset());
        p.release(a);
        assert!(p.reset());
        assert_eq!(p.lookup(1), None);
    }
}
