//! Scale-out: one schedule started at an agreed wall-clock instant (`--start-at`) and split
//! across processes (`--shard I/N`, or `--shards N` with the index from
//! `JOB_COMPLETION_INDEX`, as a Kubernetes Indexed Job sets it). Every shard builds the whole
//! schedule exactly as an unsharded run would and sends its share at the original intended
//! times, so `servebench merge` can join the shards' records into one run.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use servebench_answer::Expected;
use servebench_workload::RequestSpec;

use super::args::{DatasetName, RunArgs};
use super::plan::{TargetChoice, Traffic};

/// The environment variable a Kubernetes Indexed Job sets to the pod's index.
pub const JOB_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// How late a `--start-at` instant may be before the run is refused.
const START_LATE_LIMIT: Duration = Duration::from_secs(1);

/// `--start-at` and the shard this process sends.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScaleOut {
    pub start_at: Option<StartAt>,
    pub shard: Option<Shard>,
}

/// A wall-clock instant for the schedule's time zero.
#[derive(Debug, Clone, PartialEq)]
pub struct StartAt {
    /// As the flag gave it (kept for the result and the plan's flags).
    pub given: String,
    pub at: SystemTime,
}

/// Shard `index` of `count`: the requests whose id % count == index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Shard> {
        let bad = || anyhow!("--shard {s:?}: expected I/N with 0 <= I < N, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// Whether request `id` belongs to this shard.
    pub fn takes(&self, id: u64) -> bool {
        id % u64::from(self.count) == u64::from(self.index)
    }

    /// This shard's part of a `--max-concurrency` cap: the cap divided as evenly as it goes,
    /// the first `cap % count` shards taking one slot more, so the shards' caps add up to it.
    pub fn concurrency(&self, cap: usize) -> usize {
        let n = self.count as usize;
        let i = self.index as usize;
        cap / n + usize::from(i < cap % n)
    }

    /// The file-name tag of this shard's results.
    pub fn file_tag(&self) -> String {
        format!("shard{}of{}", self.index, self.count)
    }
}

impl ScaleOut {
    /// Validate `--start-at`, `--shard` and `--shards` against the rest of the plan.
    pub fn from_args(a: &RunArgs, target: &TargetChoice, traffic: &Traffic) -> Result<ScaleOut> {
        let index_env = std::env::var(JOB_INDEX_ENV).ok();
        let shard = match (&a.shard, a.shards) {
            (Some(s), _) => Some(s.parse::<Shard>()?),
            (None, Some(n)) => Some(shard_from_env(n, index_env.as_deref())?),
            (None, None) => None,
        };
        let start_at = match &a.start_at {
            Some(given) => {
                let at = parse_start_at(given)?;
                check_not_late(at, given, SystemTime::now())?;
                Some(StartAt {
                    given: given.clone(),
                    at,
                })
            }
            None => None,
        };
        if shard.is_some() && a.dataset_name == DatasetName::TimedTrace {
            bail!("--shard with --dataset-name timed_trace is not supported yet: a trace's prompts are built while it runs; split the trace file instead (each process its own window, --trace-start/--trace-duration)");
        }
        if a.multi_turn && (shard.is_some() || start_at.is_some()) {
            bail!("--shard and --start-at are not supported with --multi-turn yet: a session's turns depend on each other's answers, and the session driver keeps its own time zero");
        }
        let virtual_time = matches!(target, TargetChoice::VirtualTime { .. });
        if virtual_time && (shard.is_some() || start_at.is_some()) {
            bail!("--start-at and --shard place real load on the wall clock; a --virtual-time run has no wall clock to share");
        }
        if virtual_time && a.realtime_priority.is_some() {
            bail!("--realtime-priority schedules the threads that keep real time; a --virtual-time run keeps none");
        }
        if a.repeat > 1 && (shard.is_some() || start_at.is_some()) {
            bail!("--repeat cannot be combined with --start-at or --shard: every repeat would need its own start instant; run the shards once per repeat instead");
        }
        if let (Some(s), Some(cap)) = (shard, traffic.max_concurrency) {
            if cap < s.count as usize {
                bail!(
                    "--max-concurrency {cap} cannot be split across {} shards: each shard needs at least one slot",
                    s.count
                );
            }
        }
        Ok(ScaleOut { start_at, shard })
    }
}

/// `--shards N`: the index comes from `JOB_COMPLETION_INDEX`.
fn shard_from_env(count: u32, index: Option<&str>) -> Result<Shard> {
    if count == 0 {
        bail!("--shards must be at least 1");
    }
    let Some(raw) = index else {
        bail!("--shards {count} takes this process's index from {JOB_INDEX_ENV} (set by a Kubernetes Indexed Job), which is not set; give --shard I/{count} instead");
    };
    let index: u32 = raw.trim().parse().map_err(|_| {
        anyhow!("{JOB_INDEX_ENV}={raw:?} is not a shard index (a whole number below {count})")
    })?;
    if index >= count {
        bail!("{JOB_INDEX_ENV}={index} is out of range for --shards {count} (0..{count})");
    }
    Ok(Shard { index, count })
}

/// RFC 3339 (`2026-11-24T18:00:00Z`, offsets allowed) or Unix seconds (`1795543200.25`).
pub fn parse_start_at(s: &str) -> Result<SystemTime> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        // Up to the year 9999 (253402300799): RFC 3339's range, and far from where
        // `Duration` or `SystemTime` overflow.
        if !secs.is_finite() || !(0.0..=253_402_300_799.0).contains(&secs) {
            bail!("--start-at {s:?}: Unix seconds out of range (allowed: 0 to 253402300799, the year 9999)");
        }
        return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
    }
    let dt = chrono::DateTime::parse_from_rfc3339(t).with_context(|| {
        format!("--start-at {s:?}: expected RFC 3339 (2026-11-24T18:00:00Z) or Unix seconds")
    })?;
    let ns = dt
        .timestamp_nanos_opt()
        .filter(|ns| *ns >= 0)
        .ok_or_else(|| anyhow!("--start-at {s:?} is outside the representable range"))?;
    Ok(UNIX_EPOCH + Duration::from_nanos(ns as u64))
}

/// Refuse an instant already past by more than the limit (a pod that started too late must
/// not pretend to share the others' clock).
pub fn check_not_late(at: SystemTime, given: &str, now: SystemTime) -> Result<()> {
    if let Ok(late) = now.duration_since(at) {
        if late > START_LATE_LIMIT {
            bail!(
                "--start-at {given} is {:.1} s in the past (at most {} s late is accepted); choose a later instant",
                late.as_secs_f64(),
                START_LATE_LIMIT.as_secs()
            );
        }
    }
    Ok(())
}

/// Nanoseconds since the Unix epoch (0 before it).
pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A fingerprint of the whole schedule (ids, intended times, prompts, output lengths): equal
/// for every shard of one run, different when any shard built another schedule (other seed,
/// dataset, rate or tokenizer). FNV-1a, 64 bits, stable across builds.
pub fn plan_hash(requests: &[RequestSpec], schedule: &[u64]) -> String {
    let mut h = Fnv::default();
    h.u64(requests.len() as u64);
    for (r, at) in requests.iter().zip(schedule) {
        h.u64(r.id);
        h.u64(*at);
        h.u64(r.prompt_tokens);
        h.u64(r.max_tokens.map_or(u64::MAX, |m| m));
        h.u64(r.prompt.len() as u64);
        h.bytes(r.prompt.as_bytes());
    }
    format!("{:016x}", h.0)
}

#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= u64::from(*x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// The part of a workload one shard sends.
pub struct ShardWork {
    pub requests: Vec<RequestSpec>,
    pub schedule: Vec<u64>,
    pub expected: Vec<Option<Expected>>,
}

/// Number the requests by their place in the whole schedule, then keep this shard's.
pub fn select(
    shard: Shard,
    requests: Vec<RequestSpec>,
    schedule: Vec<u64>,
    expected: Vec<Option<Expected>>,
) -> ShardWork {
    let has_expected = !expected.is_empty();
    let mut expected = expected.into_iter();
    let mut out = ShardWork {
        requests: Vec::new(),
        schedule: Vec::new(),
        expected: Vec::new(),
    };
    for (i, (mut r, at)) in requests.into_iter().zip(schedule).enumerate() {
        let e = if has_expected {
            expected.next().flatten()
        } else {
            None
        };
        r.id = i as u64;
        if shard.takes(r.id) {
            out.requests.push(r);
            out.schedule.push(at);
            if has_expected {
                out.expected.push(e);
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(id: u64) -> RequestSpec {
        RequestSpec {
            images: Vec::new(),
            id,
            prompt: format!("p{id}"),
            prompt_tokens: 2,
            max_tokens: Some(4),
            prefix_tokens: 0,
        }
    }

    #[test]
    fn shard_parses_and_rejects() {
        assert_eq!(
            "1/4".parse::<Shard>().unwrap(),
            Shard { index: 1, count: 4 }
        );
        for bad in ["4/4", "1", "a/2", "0/0", "-1/2"] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains("expected I/N"), "{bad}: {e}");
        }
    }

    #[test]
    fn concurrency_split_adds_up() {
        for cap in 4..40 {
            for n in 1..=4u32 {
                let total: usize = (0..n)
                    .map(|i| Shard { index: i, count: n }.concurrency(cap))
                    .sum();
                assert_eq!(total, cap, "cap {cap} over {n}");
            }
        }
        assert_eq!(Shard { index: 0, count: 3 }.concurrency(10), 4);
        assert_eq!(Shard { index: 2, count: 3 }.concurrency(10), 3);
    }

    #[test]
    fn shards_partition_the_schedule_and_keep_times() {
        let requests: Vec<_> = (0..10).map(spec).collect();
        let schedule: Vec<u64> = (0..10).map(|i| i * 1000 + 7).collect();
        let mut seen = Vec::new();
        for i in 0..3 {
            let w = select(
                Shard { index: i, count: 3 },
                requests.clone(),
                schedule.clone(),
                Vec::new(),
            );
            assert!(w.expected.is_empty());
            for (r, at) in w.requests.iter().zip(&w.schedule) {
                assert_eq!(r.id % 3, u64::from(i));
                assert_eq!(*at, r.id * 1000 + 7);
                seen.push(r.id);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn plan_hash_follows_the_schedule() {
        let requests: Vec<_> = (0..5).map(spec).collect();
        let schedule: Vec<u64> = (0..5).map(|i| i * 10).collect();
        let a = plan_hash(&requests, &schedule);
        assert_eq!(a, plan_hash(&requests, &schedule));
        let mut later = schedule.clone();
        later[3] += 1;
        assert_ne!(a, plan_hash(&requests, &later));
        let mut other = requests.clone();
        other[0].prompt = "q0".into();
        assert_ne!(a, plan_hash(&other, &schedule));
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn start_at_accepts_both_forms() {
        let a = parse_start_at("2026-11-24T18:00:00Z").unwrap();
        let b = parse_start_at("1795543200").unwrap();
        assert_eq!(a, b);
        let c = parse_start_at("2026-11-24T19:00:00.5+01:00").unwrap();
        assert_eq!(unix_ns(c), 1_795_543_200_500_000_000);
        assert!(parse_start_at("tomorrow").is_err());
        assert!(parse_start_at("-3").is_err());
    }

    #[test]
    fn a_start_more_than_a_second_past_is_refused() {
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        check_not_late(now - Duration::from_millis(900), "x", now).unwrap();
        check_not_late(now + Duration::from_secs(60), "x", now).unwrap();
        let e = check_not_late(now - Duration::from_secs(5), "x", now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("5.0 s in the past"), "{e}");
    }

    #[test]
    fn multi_turn_runs_refuse_a_start_instant_and_shards() {
        for flags in [
            ["--multi-turn", "--start-at", "4102444800"],
            ["--multi-turn", "--shard", "0/2"],
        ] {
            let mut all = vec![
                "--base-url",
                "http://127.0.0.1:9",
                "--backend",
                "openai-chat",
                "--dataset-name",
                "custom",
                "--dataset-path",
                "sessions.jsonl",
            ];
            all.extend(flags);
            let a = RunArgs::from_flags(&all).unwrap();
            let e = super::super::plan::RunPlan::from_args(&a)
                .unwrap_err()
                .to_string();
            assert!(e.contains("its own time zero"), "{flags:?}: {e}");
        }
    }

    #[test]
    fn shards_from_the_job_index() {
        assert_eq!(
            shard_from_env(4, Some("2")).unwrap(),
            Shard { index: 2, count: 4 }
        );
        let e = shard_from_env(4, None).unwrap_err().to_string();
        assert!(
            e.contains("JOB_COMPLETION_INDEX") && e.contains("--shard I/4"),
            "{e}"
        );
        assert!(shard_from_env(4, Some("4")).is_err());
        assert!(shard_from_env(4, Some("x")).is_err());
    }
}
