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
    // queue times: two at ~0, two at ~200 ms, two at ~400 ms, two at ~600 ms.
    let mut queues: Vec<u64> = out.records.iter().map(|r| r.sent - r.intended).collect();
    queues.sort_unstable();
    for (k, q) in queues.iter().enumerate() {
        let wave = (k / 2) as u64;
        // Lower bound: a slot frees only after a whole service time (less 1 ms of rounding).
        assert!(*q + MS >= wave * service, "queue {k}: {:.1} ms", ms(*q));
        // Upper bound: 100 ms of slack per wave for a loaded machine.
        assert!(
            *q <= wave * (service + 100 * MS) + 50 * MS,
            "queue {k}: {:.1} ms",
            ms(*q)
        );
    }

    // Exactly the six that found no free slot waited for one; the others left at once.
    let waited = out.records.iter().filter(|r| r.waited_for_slot).count();
    assert_eq!(waited, 6);
    for r in &out.records {
        let queue = r.sent - r.intended;
        if r.waited_for_slot {
            assert!(
                queue + MS >= service,
                "request {} waited only {:.1} ms",
                r.id,
                ms(queue)
            );
        } else {
            assert!(
                queue < 50 * MS,
                "request {} had a free slot yet queued {:.1} ms",
                r.id,
                ms(queue)
            );
        }
    }
}
