//! Ctrl-C semantics: `stop_dispatch` sends nothing new and lets in-flight requests finish;
//! `cancel` turns in-flight requests into `cancelled` records.

use std::time::Duration;

use servebench_loadgen::{stop_pair, ApiKind, ClientOptions};
use servebench_metrics::FailureKind;
use servebench_testserver::{Script, ScriptedServer};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_dispatch_sends_nothing_new_and_lets_in_flight_requests_finish() {
    let _serial = serial().await;
    // Each request takes ~300 ms; one is due every 50 ms; dispatch stops at ~275 ms.
    let script = Script::new()
        .first_token_delay(Duration::from_millis(100))
        .inter_token_interval(Duration::from_millis(20))
        .tokens(11);
    let server = ScriptedServer::start(script).await.unwrap();
    let client = client(
        &server.base_url(),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    let reqs = requests(&client, 20, |_| Some(11));
    let schedule: Vec<u64> = (0..20).map(|i| i * 50 * MS).collect();
    let (handle, signal) = stop_pair();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(275)).await;
        handle.stop_dispatch();
        handle
    });
    let out = run(client, reqs, schedule, None, signal).await;
    let _handle = stopper.await.unwrap();

    let sent = out.records.len();
    // Six are due before 275 ms; a late timer on a loaded machine may shift that by one or two.
    assert!((3..=8).contains(&sent), "{sent} requests were sent");
    assert_eq!(out.not_dispatched, 20 - sent);
    let ids: Vec<u64> = out.records.iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        (0..sent as u64).collect::<Vec<_>>(),
        "the sent ones are the first ones"
    );
    for r in &out.records {
        assert!(
            r.is_success(),
            "in-flight request {} should finish: {:?}",
            r.id,
            r.failure
        );
        assert_eq!(r.output_tokens, 11);
    }
    let log = settled_log(&server, sent).await;
    assert_eq!(log.len(), sent, "the server saw no request after the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_turns_in_flight_requests_into_cancelled_records() {
    let _serial = serial().await;
    // Each request would stream for ~5 s; the run is cancelled after 400 ms.
    let script = Script::new()
        .first_token_delay(Duration::from_millis(50))
        .inter_token_interval(Duration::from_millis(100))
        .tokens(50);
    let server = ScriptedServer::start(script).await.unwrap();
    let client = client(
        &server.base_url(),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    let reqs = requests(&client, 4, |_| Some(50));
    let (handle, signal) = stop_pair();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        handle.cancel();
        handle
    });
    let started = std::time::Instant::now();
    let out = run(client, reqs, vec![0; 4], None, signal).await;
    let _handle = stopper.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cancel ended the run ({:?})",
        started.elapsed()
    );
    assert_eq!(out.records.len(), 4);
    for r in &out.records {
        let failure = r
            .failure
            .as_ref()
            .expect("a cancelled request is no success");
        assert_eq!(failure.kind, FailureKind::Cancelled);
        // What arrived before the cancel is kept: ~4 events at 50, 150, 250, 350 ms.
        assert!(
            !r.events.is_empty() && r.events.len() < 50,
            "{} events kept",
            r.events.len()
        );
    }
}
