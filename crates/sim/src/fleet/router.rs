//! Picking a replica inside a pool, and the per-pool admission rate limit. Both are plain state
//! machines over engine time, shared by the real-time server and the virtual-time driver.

use super::args::RouterPolicy;

/// Tokens of the prompt's head that key prefix affinity: long enough to tell system prompts
/// and documents apart, short enough that a shared head maps requests together.
pub const AFFINITY_PREFIX_TOKENS: usize = 64;
/// Prefix affinity gives way to least-outstanding when its replica has this many more
/// requests in flight than the idlest one, so one hot prefix cannot pile a whole pool's load
/// onto one replica (the cache-aware routers of SGLang and llm-d balance the same way).
pub const AFFINITY_IMBALANCE: usize = 32;

/// Chooses replicas for one pool.
#[derive(Debug, Clone)]
pub struct ReplicaPicker {
    policy: RouterPolicy,
    next: usize,
}

impl ReplicaPicker {
    pub fn new(policy: RouterPolicy) -> Self {
        ReplicaPicker { policy, next: 0 }
    }

    /// The replica for a request with this prompt, given each replica's requests in flight.
    pub fn pick(&mut self, outstanding: &[usize], prompt: &[u32]) -> usize {
        self.pick_for(outstanding, prompt, None)
    }

    /// [`ReplicaPicker::pick`] for a request of a session (`--router session` keys on it).
    pub fn pick_for(
        &mut self,
        outstanding: &[usize],
        prompt: &[u32],
        session: Option<&str>,
    ) -> usize {
        let n = outstanding.len();
        if n <= 1 {
            return 0;
        }
        match self.policy {
            RouterPolicy::RoundRobin => {
                let r = self.next % n;
                self.next = (r + 1) % n;
                r
            }
            RouterPolicy::LeastOutstanding => least(outstanding),
            RouterPolicy::Session => match session {
                Some(s) => {
                    let r = (session_key(s) % n as u64) as usize;
                    let idlest = least(outstanding);
                    if outstanding[r] > outstanding[idlest] + AFFINITY_IMBALANCE {
                        idlest
                    } else {
                        r
                    }
                }
                None => least(outstanding),
            },
            RouterPolicy::PrefixAffinity => {
                let r = (prefix_key(prompt) % n as u64) as usize;
                let idlest = least(outstanding);
                if outstanding[r] > outstanding[idlest] + AFFINITY_IMBALANCE {
                    idlest
                } else {
                    r
                }
            }
        }
    }
}

fn least(outstanding: &[usize]) -> usize {
    outstanding
        .iter()
        .enumerate()
        .min_by_key(|(i, o)| (**o, *i))
        .map_or(0, |(i, _)| i)
}

/// FNV-1a over the prompt's first [`AFFINITY_PREFIX_TOKENS`] ids: stable across runs and
/// platforms, unlike the standard library's seeded hasher.
pub fn prefix_key(prompt: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in prompt.iter().take(AFFINITY_PREFIX_TOKENS) {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// FNV-1a over a session id.
pub fn session_key(session: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A token bucket over engine nanoseconds: `rate` requests per second, at most `burst` at once.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_ns: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate_per_s: f64, burst: f64) -> Self {
        let burst = burst.max(1.0);
        TokenBucket {
            rate_per_ns: rate_per_s / 1e9,
            burst,
            tokens: burst,
            last_ns: 0,
        }
    }

    /// Takes one token at `now_ns` if there is one; false means "answer 429".
    pub fn admit(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt * self.rate_per_ns).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_spreads_evenly() {
        let mut p = ReplicaPicker::new(RouterPolicy::RoundRobin);
        let mut counts = [0; 3];
        for _ in 0..30 {
            counts[p.pick(&[5, 0, 9], &[1, 2, 3])] += 1;
        }
        assert_eq!(counts, [10, 10, 10]);
    }

    #[test]
    fn least_outstanding_prefers_the_idle_replica() {
        let mut p = ReplicaPicker::new(RouterPolicy::LeastOutstanding);
        assert_eq!(p.pick(&[3, 0, 2], &[]), 1);
        assert_eq!(p.pick(&[1, 1, 1], &[]), 0);
        assert_eq!(p.pick(&[4, 2, 1], &[]), 2);
    }

    #[test]
    fn prefix_affinity_sends_equal_prefixes_to_one_replica() {
        let mut p = ReplicaPicker::new(RouterPolicy::PrefixAffinity);
        let head: Vec<u32> = (0..64).collect();
        let mut a = head.clone();
        a.extend([900, 901]);
        let mut b = head.clone();
        b.extend([7; 300]);
        let ra = p.pick(&[0; 4], &a);
        assert_eq!(p.pick(&[1, 1, 1, 1], &b), ra);
        // Different heads spread over the replicas.
        let used: std::collections::HashSet<usize> = (0..40u32)
            .map(|k| p.pick(&[0; 4], &[k, k + 1, k + 2]))
            .collect();
        assert!(used.len() > 1);
        // A hot replica gives way.
        let mut load = [0usize; 4];
        load[ra] = AFFINITY_IMBALANCE + 5;
        assert_ne!(p.pick(&load, &a), ra);
    }

    #[test]
    fn session_routing_keeps_a_session_on_one_replica() {
        let mut p = ReplicaPicker::new(RouterPolicy::Session);
        let r = p.pick_for(&[0; 4], &[1, 2], Some("fix-1"));
        for load in [[3, 0, 0, 0], [0, 5, 2, 1], [1, 1, 1, 1]] {
            assert_eq!(p.pick_for(&load, &[9; 100], Some("fix-1")), r);
        }
        let used: std::collections::HashSet<usize> = (0..40)
            .map(|k| p.pick_for(&[0; 4], &[], Some(&format!("s{k}"))))
            .collect();
        assert!(used.len() > 1);
        // No session: the idlest replica.
        assert_eq!(p.pick_for(&[3, 0, 2, 1], &[], None), 1);
        let mut load = [0usize; 4];
        load[r] = AFFINITY_IMBALANCE + 5;
        assert_ne!(p.pick_for(&load, &[], Some("fix-1")), r);
    }

    #[test]
    fn the_bucket_refuses_above_its_rate() {
        let mut b = TokenBucket::new(10.0, 2.0);
        assert!(b.admit(0));
        assert!(b.admit(0));
        assert!(!b.admit(0));
        // 100 ms later one token has come back.
        assert!(b.admit(100_000_000));
        assert!(!b.admit(100_000_000));
        // Over a long stretch the admitted rate is the limit.
        let admitted = (0..1000u64)
            .filter(|i| b.admit(200_000_000 + i * 10_000_000))
            .count();
        assert!((99..=102).contains(&admitted), "{admitted}");
    }
}
