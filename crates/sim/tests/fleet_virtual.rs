//! Fleets in virtual time: routers, rate limits and prefill/decode pools, driven straight
//! through the fleet driver (the CLI's `--virtual-time` path adds only record keeping).
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use std::collections::BTreeMap;

use behaviour_support::{mean, percentile, poisson};
use servebench_sim::fleet::{run_fleet_virtual, FleetRun, ResolvedFleet};
use servebench_sim::virtual_time::{VirtualArrival, VirtualWorkload};
use servebench_sim::SimArgs;

fn fleet(spec: &str) -> ResolvedFleet {
    let sim = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
    sim.fleet.unwrap().as_ref().clone()
}

fn run(spec: &str, arrivals: Vec<VirtualArrival>) -> FleetRun {
    run_fleet_virtual(
        &fleet(spec),
        VirtualWorkload {
            arrivals,
            max_concurrency: None,
        },
        false,
    )
    .unwrap()
}

fn per_replica(r: &FleetRun) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for s in &r.served {
        *m.entry(format!("{}/{}", s.pool, s.replica)).or_insert(0) += 1;
    }
    m
}

fn ttfts_s(r: &FleetRun) -> Vec<f64> {
    r.run
        .traces
        .iter()
        .filter_map(|t| t.ttft_ns())
        .map(|x| x as f64 * 1e-9)
        .collect()
}

fn itls_s(r: &FleetRun) -> Vec<f64> {
    r.run
        .traces
        .iter()
        .flat_map(|t| t.itls_ns())
        .map(|x| x as f64 * 1e-9)
        .collect()
}

#[test]
fn round_robin_spreads_requests_evenly() {
    let r = run("--replicas 4", poisson(400, 20.0, 256, 16, 1));
    let counts: Vec<usize> = per_replica(&r).into_values().collect();
    assert_eq!(counts, vec![100; 4]);
    assert!(r.run.traces.iter().all(|t| t.completion_tokens == 16));
}

#[test]
fn least_outstanding_prefers_the_idle_replica() {
    // Long requests pile up on whichever replica got them; least-outstanding sends the next
    // one elsewhere, round-robin does not look.
    let mut arrivals = poisson(200, 8.0, 512, 8, 2);
    for (i, a) in arrivals.iter_mut().enumerate() {
        if i % 3 == 0 {
            a.request.max_tokens = 600;
        }
    }
    let rr = run("--replicas 3 --jitter-sigma 0", arrivals.clone());
    let lo = run(
        "--replicas 3 --router least-outstanding --jitter-sigma 0",
        arrivals,
    );
    // Every third request is long: round-robin lands all of them on replica 0.
    let long_on_0 = |r: &FleetRun| {
        r.run
            .traces
            .iter()
            .zip(&r.served)
            .filter(|(t, s)| t.completion_tokens == 600 && s.replica == "0")
            .count()
    };
    assert_eq!(long_on_0(&rr), 67);
    assert!(long_on_0(&lo) < 40, "{}", long_on_0(&lo));
    // And no replica ever has more in flight than it would under round-robin's pile-up.
    let longest = |r: &FleetRun| {
        r.run
            .traces
            .iter()
            .map(|t| t.end_ns.unwrap())
            .max()
            .unwrap()
    };
    assert!(longest(&lo) <= longest(&rr));
}

#[test]
fn prefix_affinity_sends_equal_prefixes_to_one_replica_and_hits_its_cache() {
    // Three system prompts of 512 tokens, each followed by a unique question (three, so that
    // round-robin over four replicas does not keep them apart by chance).
    let mut arrivals = poisson(200, 10.0, 600, 4, 3);
    for (i, a) in arrivals.iter_mut().enumerate() {
        let sys = (i % 3) as u32;
        for (k, t) in a.request.prompt.iter_mut().take(512).enumerate() {
            *t = 50_000 + sys * 1000 + k as u32;
        }
    }
    let pa = run("--replicas 4 --router prefix-affinity", arrivals.clone());
    let rr = run("--replicas 4", arrivals.clone());
    let mut home: BTreeMap<u32, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (a, s) in arrivals.iter().zip(&pa.served) {
        home.entry(a.request.prompt[0])
            .or_default()
            .insert(s.replica.clone());
    }
    assert!(home.values().all(|r| r.len() == 1), "{home:?}");
    let cached = |r: &FleetRun| r.run.traces.iter().map(|t| t.cached_tokens).sum::<u32>();
    assert!(
        cached(&pa) > cached(&rr),
        "{} vs {}",
        cached(&pa),
        cached(&rr)
    );
}

#[test]
fn rules_route_by_length() {
    let mut arrivals = poisson(100, 5.0, 200, 4, 4);
    for a in arrivals.iter_mut().step_by(5) {
        a.request.prompt = behaviour_support::random_tokens(a.request.id + 9000, 5000);
    }
    let r = run(
        "--pool 'chat=--replicas 2' --pool 'long=--replicas 1' --route 'prompt_tokens>=4096 -> long'",
        arrivals.clone(),
    );
    for (a, s) in arrivals.iter().zip(&r.served) {
        let want = if a.request.prompt.len() >= 4096 {
            "long"
        } else {
            "chat"
        };
        assert_eq!(s.pool, want);
    }
}

#[test]
fn requests_above_the_rate_limit_are_refused() {
    // 10 req/s offered for 20 s against 2 req/s with a bucket of one: a token comes back
    // 0.5 s after it was taken, then waits for the next arrival (0.1 s on average), so about
    // 1 / 0.6 s ≈ 1.7 req/s, ≈ 33 requests, get through; never more than 2 req/s (≈ 41).
    let r = run("--replicas 1 --rate-limit 2", poisson(200, 10.0, 64, 4, 5));
    let limited = r.served.iter().filter(|s| s.rate_limited).count();
    let admitted = 200 - limited;
    assert!((28..=41).contains(&admitted), "{admitted} admitted");
    for (t, s) in r.run.traces.iter().zip(&r.served) {
        assert_eq!(s.rate_limited, t.token_times_ns.is_empty());
    }
}

#[test]
fn a_slower_kv_link_raises_ttft_and_leaves_itl_alone() {
    // Theory: the transfer (KV bytes / bandwidth + latency) sits between the prefill and the
    // decode engine's first step, so it adds to TTFT one for one; the decode engine's steps
    // do not read the link, so inter-token latency does not change (only the batches the
    // shifted arrivals form on the decode engine can move it, by a little).
    let arrivals = poisson(120, 2.0, 4000, 64, 6);
    let spec = |gbps: &str| {
        format!("--prefill-replicas 1 --decode-replicas 1 --jitter-sigma 0 --kv-link-gbps {gbps}")
    };
    let fast = run(&spec("400"), arrivals.clone());
    let slow = run(&spec("5"), arrivals.clone());
    let slower = run(&spec("1"), arrivals);
    let (tf, ts, tss) = (
        mean(&ttfts_s(&fast)),
        mean(&ttfts_s(&slow)),
        mean(&ttfts_s(&slower)),
    );
    // 4000 tokens × 128 KiB = 524 MB: 1.3 ms at 400 GB/s, 105 ms at 5, 524 ms at 1.
    assert!(ts - tf > 0.09 && ts - tf < 0.12, "{tf} → {ts}");
    assert!(tss - tf > 0.48 && tss - tf < 0.58, "{tf} → {tss}");
    let (i_fast, i_slower) = (mean(&itls_s(&fast)), mean(&itls_s(&slower)));
    assert!(
        (i_slower - i_fast).abs() / i_fast < 0.05,
        "ITL {i_fast} → {i_slower}"
    );
    assert!(fast.served.iter().all(|s| s.replica == "p0+d0"));
    assert!(percentile(&ttfts_s(&slower), 50.0) > percentile(&ttfts_s(&fast), 50.0));
}

#[test]
fn a_pd_pool_decodes_on_its_decode_replicas_from_transferred_kv() {
    let r = run(
        "--prefill-replicas 2 --decode-replicas 2 --jitter-sigma 0",
        poisson(40, 4.0, 2048, 32, 7),
    );
    let counts = per_replica(&r);
    assert_eq!(counts.values().sum::<usize>(), 40);
    assert!(counts.keys().all(|k| k.contains("+d")), "{counts:?}");
    assert!(r.run.traces.iter().all(|t| t.completion_tokens == 32));
    // The prefill engine's own token is not the client's: 32 tokens, not 33.
    assert!(r.run.traces.iter().all(|t| t.token_times_ns.len() == 32));
}

#[test]
fn a_closed_loop_replacement_is_sent_after_the_step_that_freed_its_slot() {
    // Two replicas, two in flight: request 0 (2 tokens, replica 0) ends while request 1 (6
    // tokens, replica 1) runs on. Request 2 goes into the freed slot just after that step's
    // end, as over HTTP (docs/simulator.md §8): never into a step beginning at that instant.
    let arrival = |id: u64, output: u32| VirtualArrival {
        intended_ns: 0,
        request: behaviour_support::request(id, behaviour_support::random_tokens(id, 64), output),
    };
    let r = run_fleet_virtual(
        &fleet("llama-3.1-8b --gpu h100 --replicas 2 --router round-robin"),
        VirtualWorkload {
            arrivals: vec![arrival(0, 2), arrival(1, 6), arrival(2, 2)],
            max_concurrency: Some(2),
        },
        false,
    )
    .unwrap();
    let t = &r.run.traces;
    let freed = t[0].end_ns.unwrap();
    assert_eq!(t[2].sent_ns, freed + 1, "{:?}", t[2]);
    assert!(t[2].first_scheduled_ns.unwrap() > freed);
    assert!(
        t[1].token_times_ns.iter().any(|&x| x > freed),
        "replica 1 still busy"
    );
}
