//! `accuracy`: how far a run's records are from the scripted server's log of the same
//! requests (`cargo run -p servebench-testserver --bin accuracy -- ...`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use servebench_metrics::RequestRecord;
use servebench_testserver::{compare_to_log, read_log_jsonl, Accuracy, ErrorStats};

mod support;

use support::{context, Result};

/// Compare a bench-server log with servebench's per-request records: TTFT and ITL error.
#[derive(Debug, Clone, Parser)]
#[command(name = "accuracy")]
struct AccuracyArgs {
    /// The server's log, as `bench-server --log` writes it.
    #[arg(long, value_name = "FILE")]
    server_log: PathBuf,
    /// The run's per-request records (`*.requests.jsonl`).
    #[arg(long, value_name = "FILE")]
    requests: PathBuf,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 when the mean TTFT or ITL error exceeds this many ms.
    #[arg(long, value_name = "MS")]
    max_mean_ms: Option<f64>,
    /// Exit with status 1 when the p99 TTFT or ITL error exceeds this many ms.
    #[arg(long, value_name = "MS")]
    max_p99_ms: Option<f64>,
}

/// Join records and log by `x-request-id` and report the client's TTFT and ITL error (mean,
/// p50, p99, max, in ms).
fn accuracy(args: AccuracyArgs) -> Result<ExitCode> {
    let log_text = read(&args.server_log)?;
    let log = context(read_log_jsonl(&log_text), || {
        format!("{} is not a scripted-server log", args.server_log.display())
    })?;
    let records = read_records(&args.requests)?;
    let acc = compare_to_log(&records, &log);
    if acc.matched == 0 {
        return Err(format!(
            "none of the {} successful records matches a logged request by x-request-id \
             (servebench-<id>); were both files written by the same run?",
            records.iter().filter(|r| r.is_success()).count()
        ));
    }
    if args.json {
        let json = context(serde_json::to_string_pretty(&acc), || "JSON".to_owned())?;
        println!("{json}");
    } else {
        print!("{}", render(&acc, records.len(), log.len()));
    }
    let missed = [acc.ttft, acc.itl].into_iter().flatten().any(|s| {
        args.max_mean_ms.is_some_and(|m| s.mean_ms > m)
            || args.max_p99_ms.is_some_and(|m| s.p99_ms > m)
    });
    Ok(if missed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn read(path: &Path) -> Result<String> {
    context(std::fs::read_to_string(path), || {
        format!("cannot read {}", path.display())
    })
}

fn read_records(path: &Path) -> Result<Vec<RequestRecord>> {
    let text = read(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            context(serde_json::from_str(l), || {
                format!("{}:{}: not a request record", path.display(), i + 1)
            })
        })
        .collect()
}

/// The comparison as a small table.
fn render(acc: &Accuracy, records: usize, logged: usize) -> String {
    let mut out = format!(
        "Client timing error: {} of {records} records joined with {logged} logged requests \
         ({} successful records unmatched, {} with differing event counts)\n",
        acc.matched, acc.unmatched, acc.event_count_mismatches
    );
    out.push_str(&format!(
        "{:<6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10}\n",
        "", "samples", "mean ms", "p50 ms", "p99 ms", "max ms", "bias ms"
    ));
    for (name, stats) in [("TTFT", acc.ttft), ("ITL", acc.itl)] {
        out.push_str(&row(name, stats));
    }
    out.push_str(
        "Errors are absolute: measured minus the server's logged value for the same event; \
         bias is the mean signed error.\n",
    );
    out
}

fn row(name: &str, stats: Option<ErrorStats>) -> String {
    match stats {
        Some(s) => format!(
            "{name:<6} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>+10.3}\n",
            s.count, s.mean_ms, s.p50_ms, s.p99_ms, s.max_ms, s.mean_signed_ms
        ),
        None => format!("{name:<6} {:>8}\n", 0),
    }
}

fn main() -> ExitCode {
    support::exit(accuracy(AccuracyArgs::parse()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::{CountSource, TokenEvent};
    use servebench_testserver::{write_log_jsonl, RequestLog};

    #[test]
    fn accuracy_joins_files_by_request_id_and_applies_thresholds() {
        let dir =
            std::env::temp_dir().join(format!("servebench-accuracy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = RequestLog {
            index: 0,
            request_id: Some("servebench-3".into()),
            path: "/v1/completions".into(),
            status: 200,
            events_ns: vec![50_000_000, 70_000_000, 90_000_000],
            ..RequestLog::default()
        };
        let record = RequestRecord {
            phases: None,
            images: None,
            id: 3,
            intended: 0,
            released: 0,
            sent: 1_000_000,
            started: None,
            bare_events: Vec::new(),
            // 0.5 ms later than the log on the first event, exact gaps afterwards.
            first_token: Some(51_500_000),
            end: Some(91_500_000),
            done: Some(91_500_000),
            waited_for_slot: false,
            events: [51_500_000, 71_500_000, 91_500_000]
                .map(|t| TokenEvent { t, chars: 4 })
                .to_vec(),
            input_tokens: 4,
            input_source: CountSource::Usage,
            output_tokens: 3,
            output_source: CountSource::Usage,
            intended_input_tokens: 4,
            max_tokens: Some(3),
            cached_tokens: None,
            finish_reason: Some("length".into()),
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        };
        let log_path = dir.join("server.jsonl");
        let rec_path = dir.join("run.requests.jsonl");
        write_log_jsonl(&[log], std::fs::File::create(&log_path).unwrap()).unwrap();
        std::fs::write(
            &rec_path,
            format!("{}\n", serde_json::to_string(&record).unwrap()),
        )
        .unwrap();

        let args = |max_mean_ms| AccuracyArgs {
            server_log: log_path.clone(),
            requests: rec_path.clone(),
            json: true,
            max_mean_ms,
            max_p99_ms: None,
        };
        assert_eq!(accuracy(args(Some(1.0))).unwrap(), ExitCode::SUCCESS);
        assert_eq!(accuracy(args(Some(0.1))).unwrap(), ExitCode::from(1));

        let acc = compare_to_log(
            &[record],
            &read_log_jsonl(&read(&log_path).unwrap()).unwrap(),
        );
        let ttft = acc.ttft.unwrap();
        assert!((ttft.mean_ms - 0.5).abs() < 1e-9, "{ttft:?}");
        assert_eq!(acc.itl.unwrap().max_ms, 0.0);
        let table = render(&acc, 1, 1);
        assert!(table.contains("TTFT") && table.contains("0.500"), "{table}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
