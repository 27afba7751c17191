//! A fixed rate and seed give one schedule, and the client keeps to it.

use std::time::Duration;

use servebench_loadgen::{ApiKind, ClientOptions, StopSignal};
use servebench_testserver::{Script, ScriptedServer};
use servebench_workload::ArrivalConfig;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_rate_reproduces_its_intended_schedule() {
    let _serial = serial().await;
    let arrivals = ArrivalConfig {
        request_rate: 40.0,
        seed: 11,
        ..ArrivalConfig::default()
    };
    let schedule = arrivals.schedule(30).unwrap();
    assert_eq!(
        schedule,
        arrivals.schedule(30).unwrap(),
        "same rate and seed, same schedule"
    );
    let other = ArrivalConfig {
        seed: 12,
        ..arrivals.clone()
    }
    .schedule(30)
    .unwrap();
    assert_ne!(schedule, other, "another seed, another schedule");

    let script = Script::new()
        .first_token_delay(Duration::from_millis(5))
        .inter_token_interval(Duration::from_millis(1))
        .tokens(3);
    let server = ScriptedServer::start(script).await.unwrap();
    let client = client(
        &server.base_url(),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    let reqs = requests(&client, 30, |_| Some(3));
    let out = run(client, reqs, schedule.clone(), None, StopSignal::never()).await;

    let intended: Vec<u64> = out.records.iter().map(|r| r.intended).collect();
    assert_eq!(
        intended, schedule,
        "each record keeps its scheduled send time"
    );
    assert!(out
        .records
        .iter()
        .all(|r| r.is_success() && !r.waited_for_slot));

    // At 40 req/s the dispatcher is idle between arrivals: it sends on time. The timer has
    // 1 ms granularity; bounds: median 5 ms, any request 30 ms (a descheduled thread).
    let mut lag: Vec<u64> = out.records.iter().map(|r| r.sent - r.intended).collect();
    lag.sort_unstable();
    let (median, max) = (lag[lag.len() / 2], lag[lag.len() - 1]);
    eprintln!(
        "send lag: median {:.3} ms, max {:.3} ms",
        ms(median),
        ms(max)
    );
    assert!(
        median <= 5 * MS,
        "median sent − intended {:.3} ms",
        ms(median)
    );
    assert!(max <= 30 * MS, "max sent − intended {:.3} ms", ms(max));
}
