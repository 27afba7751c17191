//! Queue time when `max_concurrency` binds.

use std::time::Duration;

use servebench_loadgen::{ApiKind, ClientOptions, StopSignal};
use servebench_testserver::{Script, ScriptedServer};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_cap_queue_in_multiples_of_the_service_time() {
    let _serial = serial().await;
    // Each request takes 200 ms (one token, 200 ms after arrival); 8 arrive at once, 2 slots.
    let service = 200 * MS;
    let script = Script::new()
        .first_token_delay(Duration::from_millis(200))
        .tokens(1);
    let server = ScriptedServer::start(script).await.unwrap();
    let client = client(
        &server.base_url(),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    let reqs = requests(&client, 8, |_| Some(1));
    let out = run(client, reqs, vec![0; 8], Some(2), StopSignal::never()).await;
    assert_eq!(out.records.len(), 8);
    assert!(out.records.iter().all(|r| r.is_success()));

    // Which two requests get the first slots depends on task scheduling, so check the sorted
    // release times: two at ~0, two at ~200 ms, two at ~400 ms, two at ~600 ms.
    let mut released: Vec<u64> = out.records.iter().map(|r| r.released).collect();
    released.sort_unstable();
    for (k, t) in released.iter().enumerate() {
        let wave = (k / 2) as u64;
        // Lower bound: a slot frees only after a whole service time (less 1 ms of rounding).
        assert!(*t + MS >= wave * service, "release {k}: {:.1} ms", ms(*t));
        // Upper bound: 100 ms of slack per wave for a loaded machine.
        assert!(
            *t <= wave * (service + 100 * MS) + 50 * MS,
            "release {k}: {:.1} ms",
            ms(*t)
        );
    }

    // Exactly the six that found no free slot waited for one. Everything was intended at
    // once behind a cap: a closed loop, whose user sends when a slot frees, so the wait is
    // not queue time (docs/metrics.md, "Open and closed loops"): each request is intended
    // when it was released, and queue time is only the send's own overhead.
    let waited = out.records.iter().filter(|r| r.waited_for_slot).count();
    assert_eq!(waited, 6);
    for r in &out.records {
        let queue = r.sent - r.intended;
        assert!(
            queue < 50 * MS,
            "request {} queued {:.1} ms in a closed loop",
            r.id,
            ms(queue)
        );
        if r.waited_for_slot {
            assert_eq!(r.intended, r.released, "request {}", r.id);
            assert!(
                r.released + MS >= service,
                "request {} waited only {:.1} ms",
                r.id,
                ms(r.released)
            );
        }
    }
}
