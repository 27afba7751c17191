//! Every failure kind becomes a failed record of that kind; the other requests of the run
//! succeed.

use std::time::Duration;

use servebench_loadgen::{ApiKind, ClientOptions, StopSignal};
use servebench_metrics::FailureKind;
use servebench_testserver::{Fault, Script, ScriptedServer, Trigger};

use crate::common::*;

fn by_id(id: u64) -> Trigger {
    Trigger::RequestId(servebench_wire::protocol::request_id(id))
}

async fn every_kind(api: ApiKind) {
    let script = Script::new()
        .first_token_delay(Duration::from_millis(10))
        .inter_token_interval(Duration::from_millis(5))
        .tokens(8)
        .fault(
            by_id(1),
            Fault::HttpStatus {
                status: 503,
                message: "the engine is overloaded".into(),
            },
        )
        .fault(by_id(2), Fault::Reset { after_events: 3 })
        .fault(by_id(3), Fault::Truncate { after_events: 3 })
        .fault(by_id(4), Fault::Malformed { at_event: 2 })
        .fault(
            by_id(5),
            Fault::Stall {
                after_events: 2,
                duration: Duration::from_secs(30),
            },
        )
        .fault(
            by_id(6),
            Fault::StreamError {
                after_events: 2,
                message: "CUDA error: out of memory".into(),
            },
        )
        .fault(by_id(7), Fault::Empty);
    let server = ScriptedServer::start(script).await.unwrap();
    let options = ClientOptions {
        request_timeout: Some(Duration::from_millis(1500)),
        ..ClientOptions::default()
    };
    let client = client(&server.base_url(), api, options);
    let reqs = requests(&client, 10, |_| Some(8));
    let started = std::time::Instant::now();
    let out = run(client, reqs, vec![0; 10], Some(4), StopSignal::never()).await;
    // The stalled request ends at its 1.5 s timeout, not after the 30 s stall.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "run took {:?}",
        started.elapsed()
    );
    assert_eq!(out.records.len(), 10);

    let expected = [
        (1, FailureKind::HttpStatus),
        (2, FailureKind::Truncated),
        (3, FailureKind::Truncated),
        (4, FailureKind::Malformed),
        (5, FailureKind::Timeout),
        (6, FailureKind::StreamError),
        (7, FailureKind::EmptyOutput),
    ];
    for r in &out.records {
        match expected.iter().find(|(id, _)| *id == r.id) {
            Some((_, kind)) => {
                let failure = r
                    .failure
                    .as_ref()
                    .unwrap_or_else(|| panic!("request {} should fail", r.id));
                assert_eq!(failure.kind, *kind, "request {}: {failure:?}", r.id);
            }
            None => {
                assert!(r.is_success(), "request {} failed: {:?}", r.id, r.failure);
                assert_eq!(r.output_tokens, 8);
            }
        }
    }
    let record = |id: u64| out.records.iter().find(|r| r.id == id).unwrap();
    let http = record(1).failure.as_ref().unwrap();
    assert_eq!(http.status, Some(503));
    assert!(
        http.message.contains("the engine is overloaded"),
        "{}",
        http.message
    );
    let stream_error = record(6).failure.as_ref().unwrap();
    assert!(
        stream_error.message.contains("CUDA error"),
        "{}",
        stream_error.message
    );
    // A stream cut short still keeps what arrived before the cut.
    assert_eq!(
        record(2).events.len(),
        3,
        "events before the reset are kept"
    );
    assert_eq!(
        record(3).events.len(),
        3,
        "events before the truncation are kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_kind_is_a_record_of_its_kind_completions() {
    let _serial = serial().await;
    every_kind(ApiKind::Completions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_kind_is_a_record_of_its_kind_chat() {
    let _serial = serial().await;
    every_kind(ApiKind::Chat).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_gives_connect_failures() {
    let _serial = serial().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
        // Dropped here: nothing listens on the port any more.
    };
    let client = client(
        &format!("http://127.0.0.1:{port}"),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    let reqs = requests(&client, 3, |_| Some(4));
    let out = run(client, reqs, vec![0; 3], None, StopSignal::never()).await;
    assert_eq!(out.records.len(), 3);
    for r in &out.records {
        let failure = r.failure.as_ref().expect("no server, no success");
        assert_eq!(failure.kind, FailureKind::Connect, "{failure:?}");
        assert!(r.first_token.is_none());
    }
}
