//! `--fail-if` gates: conditions on a candidate run, usually relative to a baseline, that
//! fail a comparison.
//!
//! Syntax: `METRIC OP BOUND`, with `OP` one of `>`, `>=`, `<`, `<=` and the gate *failing*
//! when the condition holds:
//! - `p99_ttft_ms>+10%`: a percentage is a relative change from the baseline (the sign is
//!   optional): fails if p99 TTFT rose by more than 10 %;
//! - `output_throughput<-5%`: fails if output throughput fell by more than 5 %;
//! - `mean_tpot_ms>+2`: a signed number without `%` is an absolute change in the metric's
//!   unit: fails if mean TPOT rose by more than 2 ms;
//! - `p99_ttft_ms>500`: an unsigned number without `%` bounds the candidate's own value:
//!   fails if its p99 TTFT exceeds 500 ms, whatever the baseline.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::AnalysisError;

/// A gate's comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GateOp {
    /// `>`
    #[serde(rename = ">")]
    Gt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `<=`
    #[serde(rename = "<=")]
    Le,
}

impl GateOp {
    fn holds(self, observed: f64, bound: f64) -> bool {
        match self {
            GateOp::Gt => observed > bound,
            GateOp::Ge => observed >= bound,
            GateOp::Lt => observed < bound,
            GateOp::Le => observed <= bound,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            GateOp::Gt => ">",
            GateOp::Ge => ">=",
            GateOp::Lt => "<",
            GateOp::Le => "<=",
        }
    }
}

/// What a gate's bound measures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum GateBound {
    /// `(candidate − baseline) / baseline`, as a fraction (`+10%` is 0.10).
    RelativeChange(f64),
    /// `candidate − baseline`, in the metric's unit.
    AbsoluteChange(f64),
    /// The candidate's value itself.
    Value(f64),
}

/// One parsed gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    /// The metric's key (`p99_ttft_ms`), or a dotted JSON path.
    pub metric: String,
    /// The comparison.
    pub op: GateOp,
    /// The bound.
    pub bound: GateBound,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bound = match self.bound {
            GateBound::RelativeChange(r) => format!("{:+}%", round6(r * 100.0)),
            GateBound::AbsoluteChange(a) => format!("{:+}", round6(a)),
            GateBound::Value(v) => format!("{}", round6(v)),
        };
        write!(f, "{}{}{bound}", self.metric, self.op.as_str())
    }
}

/// Rounds away binary noise (`0.1 × 100 = 10.000000000000002`) for display.
fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

impl FromStr for Gate {
    type Err = AnalysisError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |message: &str| AnalysisError::Gate {
            input: text.to_string(),
            message: message.to_string(),
        };
        let s = text.trim();
        let op_at = s
            .find(['<', '>'])
            .ok_or_else(|| err("no comparison operator (>, >=, <, <=)"))?;
        let metric = s[..op_at].trim();
        if metric.is_empty() {
            return Err(err("no metric before the operator"));
        }
        if !metric
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(err("a metric name holds only letters, digits, '_' and '.'"));
        }
        let rest = &s[op_at..];
        let (op, rest) = if let Some(r) = rest.strip_prefix(">=") {
            (GateOp::Ge, r)
        } else if let Some(r) = rest.strip_prefix("<=") {
            (GateOp::Le, r)
        } else if let Some(r) = rest.strip_prefix('>') {
            (GateOp::Gt, r)
        } else if let Some(r) = rest.strip_prefix('<') {
            (GateOp::Lt, r)
        } else {
            return Err(err("no comparison operator"));
        };
        let rest = rest.trim();
        if rest.is_empty() {
            return Err(err("no bound after the operator"));
        }
        let (number, percent) = match rest.strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (rest, false),
        };
        let signed = number.starts_with(['+', '-']);
        let value: f64 = number
            .parse()
            .map_err(|_| err(&format!("'{number}' is not a number")))?;
        if !value.is_finite() {
            return Err(err("the bound must be finite"));
        }
        let bound = if percent {
            GateBound::RelativeChange(value / 100.0)
        } else if signed {
            GateBound::AbsoluteChange(value)
        } else {
            GateBound::Value(value)
        };
        Ok(Gate {
            metric: metric.to_string(),
            op,
            bound,
        })
    }
}

/// Parses gates separated by commas or whitespace (`"p99_ttft_ms>+10%, output_throughput<-5%"`).
pub fn parse_gates(text: &str) -> Result<Vec<Gate>, AnalysisError> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// A gate checked against numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateOutcome {
    /// The gate as written canonically.
    pub gate: String,
    /// The metric.
    pub metric: String,
    /// The baseline's value, when there is one.
    pub baseline: Option<f64>,
    /// The candidate's value.
    pub candidate: f64,
    /// The quantity compared with the bound: the relative change (a fraction), the absolute
    /// change, or the candidate's value.
    pub observed: f64,
    /// Whether the failing condition holds.
    pub failed: bool,
    /// One line for people.
    pub message: String,
}

impl Gate {
    /// Checks the gate. Change gates need a baseline. A relative change from a zero baseline
    /// is 0 when the candidate is also 0, else ±∞.
    pub fn evaluate(
        &self,
        baseline: Option<f64>,
        candidate: f64,
    ) -> Result<GateOutcome, AnalysisError> {
        if candidate.is_nan() || baseline.is_some_and(f64::is_nan) {
            return Err(AnalysisError::Invalid(format!(
                "gate {self}: {} is not a number",
                self.metric
            )));
        }
        let need_baseline = || {
            baseline.ok_or_else(|| {
                AnalysisError::Invalid(format!(
                    "gate {self} compares with a baseline, but there is none"
                ))
            })
        };
        let (observed, bound, shown) = match self.bound {
            GateBound::RelativeChange(r) => {
                let b = need_baseline()?;
                let change = if b == 0.0 {
                    if candidate == 0.0 {
                        0.0
                    } else {
                        f64::INFINITY.copysign(candidate)
                    }
                } else {
                    (candidate - b) / b.abs()
                };
                (change, r, format!("{:+.1} %", change * 100.0))
            }
            GateBound::AbsoluteChange(a) => {
                let b = need_baseline()?;
                let change = candidate - b;
                (change, a, format!("{:+}", round6(change)))
            }
            GateBound::Value(v) => (candidate, v, format!("{}", round6(candidate))),
        };
        let failed = self.op.holds(observed, bound);
        let values = match baseline {
            Some(b) => format!("{} → {}", round6(b), round6(candidate)),
            None => format!("{}", round6(candidate)),
        };
        let verdict = if failed { "FAIL" } else { "ok" };
        let message = format!(
            "{verdict}: {} {values} ({shown}); fails if {self}",
            self.metric
        );
        Ok(GateOutcome {
            gate: self.to_string(),
            metric: self.metric.clone(),
            baseline,
            candidate,
            observed,
            failed,
            message,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    use super::*;

    fn gate(s: &str) -> Gate {
        s.parse().unwrap()
    }

    #[test]
    fn relative_rise_gate() {
        let g = gate("p99_ttft_ms>+10%");
        assert_eq!(g.metric, "p99_ttft_ms");
        assert_eq!(g.op, GateOp::Gt);
        assert_eq!(g.bound, GateBound::RelativeChange(0.10));
        assert_eq!(g.to_string(), "p99_ttft_ms>+10%");
        // +12.5 % fails, +10 % exactly passes (strict), +5 % passes.
        let o = g.evaluate(Some(400.0), 450.0).unwrap();
        assert!(o.failed);
        assert!((o.observed - 0.125).abs() < 1e-12);
        assert_eq!(
            o.message,
            "FAIL: p99_ttft_ms 400 → 450 (+12.5 %); fails if p99_ttft_ms>+10%"
        );
        assert!(!g.evaluate(Some(400.0), 440.0).unwrap().failed);
        assert!(!g.evaluate(Some(400.0), 420.0).unwrap().failed);
        // A relative gate without a sign means the same.
        assert_eq!(gate("p99_ttft_ms>10%"), g);
    }

    #[test]
    fn relative_drop_gate() {
        let g = gate("output_throughput<-5%");
        assert_eq!(g.op, GateOp::Lt);
        assert_eq!(g.bound, GateBound::RelativeChange(-0.05));
        assert!(g.evaluate(Some(1000.0), 940.0).unwrap().failed);
        assert!(!g.evaluate(Some(1000.0), 960.0).unwrap().failed);
        // Gains never fail a drop gate.
        assert!(!g.evaluate(Some(1000.0), 2000.0).unwrap().failed);
        let o = g.evaluate(Some(1000.0), 940.0).unwrap();
        assert!(o.message.contains("(-6.0 %)"), "{}", o.message);
    }

    #[test]
    fn absolute_change_gate() {
        let g = gate("mean_tpot_ms>+2");
        assert_eq!(g.bound, GateBound::AbsoluteChange(2.0));
        assert!(g.evaluate(Some(7.0), 9.5).unwrap().failed);
        assert!(!g.evaluate(Some(7.0), 8.9).unwrap().failed);
        assert!(!g.evaluate(Some(7.0), 9.0).unwrap().failed);
        assert!(
            gate("mean_tpot_ms>=+2")
                .evaluate(Some(7.0), 9.0)
                .unwrap()
                .failed
        );
        let g = gate("request_throughput<=-0.5");
        assert!(g.evaluate(Some(10.0), 9.5).unwrap().failed);
        assert!(!g.evaluate(Some(10.0), 9.6).unwrap().failed);
    }

    #[test]
    fn value_gate_needs_no_baseline() {
        let g = gate("p99_ttft_ms > 500");
        assert_eq!(g.bound, GateBound::Value(500.0));
        assert!(g.evaluate(None, 501.0).unwrap().failed);
        assert!(!g.evaluate(None, 499.0).unwrap().failed);
        // Change gates without a baseline are an error, not a pass.
        let e = gate("p99_ttft_ms>+10%").evaluate(None, 1.0).unwrap_err();
        assert!(e.to_string().contains("no"), "{e}");
    }

    #[test]
    fn zero_baseline() {
        let g = gate("failed>+10%");
        assert!(!g.evaluate(Some(0.0), 0.0).unwrap().failed);
        assert!(g.evaluate(Some(0.0), 3.0).unwrap().failed);
    }

    #[test]
    fn gate_lists_and_errors() {
        let gates = parse_gates("p99_ttft_ms>+10%, output_throughput<-5% mean_tpot_ms>+2").unwrap();
        assert_eq!(gates.len(), 3);
        let e = |s: &str| s.parse::<Gate>().unwrap_err().to_string();
        assert!(e("p99_ttft_ms+10%").contains("no comparison operator"));
        assert!(e(">+10%").contains("no metric"));
        assert!(e("p99_ttft_ms>").contains("no bound"));
        assert!(e("p99_ttft_ms>+ten%").contains("'+ten' is not a number"));
        assert!(e("p99 ttft>+1").contains("letters, digits"));
        assert!(e("x>inf").contains("finite"));
    }
}
