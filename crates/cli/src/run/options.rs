//! Validation of `servebench run` flags into plain values (the RunPlan pieces).

use anyhow::{bail, Context, Result};
use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use servebench_metrics::summary::{Slo, SloMetric};
use servebench_report::PERCENTILE_METRICS;

use super::args::RunArgs;

/// `KEY=VALUE` pairs (vLLM's `--header` / `--metadata` syntax).
pub fn key_values(flag: &str, items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => bail!("{flag} {item:?}: use KEY=VALUE"),
        })
        .collect()
}

pub fn headers(items: &[String]) -> Result<Vec<(HeaderName, HeaderValue)>> {
    key_values("--header", items)?
        .into_iter()
        .map(|(k, v)| {
            let name = HeaderName::from_bytes(k.as_bytes())
                .with_context(|| format!("--header: {k:?} is not a valid header name"))?;
            let value = HeaderValue::from_str(&v)
                .with_context(|| format!("--header {k}: the value is not a valid header value"))?;
            Ok((name, value))
        })
        .collect()
}

/// `--percentile-metrics` (default ttft,tpot,itl as vLLM).
pub fn percentile_metrics(arg: Option<&str>) -> Result<Vec<String>> {
    let raw = arg.unwrap_or("ttft,tpot,itl");
    let mut out = Vec::new();
    for m in raw.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if !PERCENTILE_METRICS.contains(&m) {
            bail!(
                "--percentile-metrics: unknown metric {m:?}; allowed: {}",
                PERCENTILE_METRICS.join(", ")
            );
        }
        out.push(m.to_owned());
    }
    Ok(out)
}

/// `--metric-percentiles 50,90,99`.
pub fn metric_percentiles(raw: &str) -> Result<Vec<f64>> {
    raw.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let v: f64 = p
                .parse()
                .with_context(|| format!("--metric-percentiles: {p:?} is not a number"))?;
            if !(0.0..=100.0).contains(&v) {
                bail!("--metric-percentiles: {v} is outside 0–100");
            }
            Ok(v)
        })
        .collect()
}

/// `--goodput ttft:500 tpot:50` (vLLM's names plus servebench's `itl`).
pub fn goodput(items: &[String]) -> Result<Vec<Slo>> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item.split_once(':').with_context(|| {
                format!("--goodput {item:?}: use KEY:MILLISECONDS, e.g. ttft:500")
            })?;
            let ms: f64 = v.parse().with_context(|| {
                format!("--goodput {item:?}: {v:?} is not a number of milliseconds")
            })?;
            let metric = match k {
                "ttft" => SloMetric::Ttft,
                "tpot" => SloMetric::Tpot,
                "e2el" => SloMetric::E2el,
                "itl" => SloMetric::Itl,
                _ => bail!(
                    "--goodput {item:?}: unknown metric {k:?}; allowed: ttft, tpot, e2el, itl"
                ),
            };
            if ms < 0.0 {
                bail!("--goodput {item:?}: the value must be non-negative");
            }
            Ok(Slo::per_request(metric, ms))
        })
        .collect()
}

/// The body fields every request carries: sampling flags, then `--extra-body` (which wins).
pub fn extra_body(args: &RunArgs) -> Result<Map<String, Value>> {
    // JSON has no NaN or infinity: such a value would be dropped from every request without
    // a word (serde_json writes it as null), so it is refused here instead.
    for (flag, v) in [
        ("--top-p", args.top_p),
        ("--min-p", args.min_p),
        ("--temperature", args.temperature),
        ("--frequency-penalty", args.frequency_penalty),
        ("--presence-penalty", args.presence_penalty),
        ("--repetition-penalty", args.repetition_penalty),
    ] {
        if let Some(v) = v.filter(|v| !v.is_finite()) {
            bail!("{flag} {v} is not a finite number (allowed: any finite number; the server checks its own range)");
        }
    }
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("top_p", args.top_p.map(Value::from));
    put("top_k", args.top_k.map(Value::from));
    put("min_p", args.min_p.map(Value::from));
    put("temperature", args.temperature.map(Value::from));
    put("frequency_penalty", args.frequency_penalty.map(Value::from));
    put("presence_penalty", args.presence_penalty.map(Value::from));
    put(
        "repetition_penalty",
        args.repetition_penalty.map(Value::from),
    );
    if let Some(raw) = &args.extra_body {
        let v: Value = serde_json::from_str(raw).context("--extra-body is not valid JSON")?;
        match v {
            Value::Object(obj) => m.extend(obj),
            _ => bail!("--extra-body must be a JSON object, e.g. '{{\"temperature\": 0}}'"),
        }
    }
    Ok(m)
}

/// vLLM's checks of the ramp-up flags.
pub fn check_ramp_up(args: &RunArgs) -> Result<Option<(String, u64, u64)>> {
    let Some(strategy) = args.ramp_up_strategy else {
        if args.ramp_up_start_rps.is_some() || args.ramp_up_end_rps.is_some() {
            bail!(
                "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential"
            );
        }
        return Ok(None);
    };
    if args.request_rate.is_finite() {
        bail!("when using ramp-up, do not specify --request-rate: the rate is controlled by the ramp-up parameters");
    }
    let (Some(start), Some(end)) = (args.ramp_up_start_rps, args.ramp_up_end_rps) else {
        bail!("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps");
    };
    if start > end {
        bail!("--ramp-up-start-rps ({start}) must not exceed --ramp-up-end-rps ({end})");
    }
    let name = match strategy {
        super::args::RampUp::Linear => "linear",
        super::args::RampUp::Exponential => {
            if start == 0 {
                bail!("for exponential ramp-up, --ramp-up-start-rps cannot be 0");
            }
            "exponential"
        }
    };
    Ok(Some((name.to_owned(), start, end)))
}

/// Python's `str(float)` for the rate in file names: `inf`, `10.0`, `2.5`.
pub fn python_float(v: f64) -> String {
    if v.is_infinite() {
        "inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn goodput_parses_and_rejects() {
        let g = goodput(&["ttft:500".into(), "itl:50".into()]).unwrap();
        assert_eq!(g[1], Slo::per_request(SloMetric::Itl, 50.0));
        assert!(goodput(&["foo:1".into()])
            .unwrap_err()
            .to_string()
            .contains("allowed"));
        assert!(goodput(&["ttft".into()]).is_err());
    }

    #[test]
    fn percentile_metrics_default_and_unknown() {
        assert_eq!(
            percentile_metrics(None).unwrap(),
            vec!["ttft", "tpot", "itl"]
        );
        assert!(percentile_metrics(Some("ttft,bogus")).is_err());
    }

    #[test]
    fn python_float_matches_str() {
        assert_eq!(python_float(f64::INFINITY), "inf");
        assert_eq!(python_float(10.0), "10.0");
        assert_eq!(python_float(2.5), "2.5");
    }
}
