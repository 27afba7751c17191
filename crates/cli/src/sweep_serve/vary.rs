//! One knob at a time: a baseline server configuration and, for each `--vary knob=v1,v2`,
//! the baseline with only that knob changed, so every difference measured is one knob's.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::params::{ParamItem, ParamSweep, NAME_KEY};

/// The name of the baseline combination.
pub const BASELINE: &str = "baseline";

/// One `--vary` flag: the knob and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Vary {
    pub knob: String,
    pub values: Vec<Value>,
}

/// A value as written on the command line: JSON where it parses (`64`, `true`, `0.9`),
/// else the text itself.
fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// Parses `knob=v1,v2,...`.
pub fn parse_vary(text: &str) -> Result<Vary> {
    let Some((knob, values)) = text.split_once('=') else {
        bail!("--vary {text:?}: expected knob=v1,v2,...");
    };
    let knob = knob.trim();
    let values: Vec<Value> = values
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(value)
        .collect();
    if knob.is_empty() || values.is_empty() {
        bail!("--vary {text:?}: expected knob=v1,v2,...");
    }
    Ok(Vary {
        knob: knob.to_owned(),
        values,
    })
}

/// The baseline: `--baseline FILE` (one object, or a parameter file whose first entry is the
/// baseline), else the first entry of `--serve-params`, else the command as given.
pub fn baseline(file: Option<&Path>, serve_params: &ParamSweep) -> Result<ParamItem> {
    let mut item = match file {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("--baseline: cannot read {}", p.display()))?;
            let text = if text.trim_start().starts_with('{')
                && serde_json::from_str::<serde_json::Map<String, Value>>(&text)
                    .is_ok_and(|m| !m.values().all(Value::is_object))
            {
                format!("[{text}]")
            } else {
                text
            };
            ParamSweep::parse(&text)
                .with_context(|| format!("--baseline {}", p.display()))?
                .0
                .remove(0)
        }
        None => serve_params.0.first().cloned().unwrap_or_default(),
    };
    item.0.retain(|(k, _)| k != NAME_KEY);
    Ok(item)
}

/// The baseline first, then every knob's values (a value equal to the baseline's is measured
/// once, as the baseline).
pub fn design(base: &ParamItem, varies: &[Vary]) -> ParamSweep {
    let mut named = base.clone();
    named
        .0
        .insert(0, (NAME_KEY.to_owned(), Value::from(BASELINE)));
    let mut out = vec![named];
    for v in varies {
        for val in &v.values {
            if base.get(&v.knob) == Some(val) {
                continue;
            }
            let mut item = base.clone();
            item.set(&v.knob, val.clone());
            let shown = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            item.0.insert(
                0,
                (
                    NAME_KEY.to_owned(),
                    Value::from(format!("{}={shown}", v.knob)),
                ),
            );
            if !out.iter().any(|o| o.name() == item.name()) {
                out.push(item);
            }
        }
    }
    ParamSweep(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_changes_exactly_one_knob() {
        let base = ParamSweep::parse(r#"[{"max_num_seqs": 64, "enable_chunked_prefill": true}]"#)
            .expect("base")
            .0
            .remove(0);
        let varies = [
            parse_vary("max_num_seqs=16,64,256").expect("v"),
            parse_vary("enable_chunked_prefill=false").expect("v"),
        ];
        let d = design(&base, &varies);
        let names: Vec<String> = d.0.iter().map(ParamItem::name).collect();
        assert_eq!(
            names,
            [
                "baseline",
                "max_num_seqs=16",
                "max_num_seqs=256",
                "enable_chunked_prefill=false"
            ]
        );
        for item in &d.0[1..] {
            let changed = item
                .params()
                .filter(|(k, v)| base.get(k) != Some(v))
                .count();
            assert_eq!(changed, 1, "{item:?}");
        }
        assert_eq!(
            d.0[3].get("enable_chunked_prefill"),
            Some(&Value::Bool(false))
        );
    }

    #[test]
    fn bad_vary_flags_are_named() {
        assert!(parse_vary("max_num_seqs").is_err());
        assert!(parse_vary("=1,2").is_err());
        assert!(parse_vary("x=").is_err());
        assert_eq!(
            parse_vary("gpu=h100").expect("ok").values,
            [Value::from("h100")]
        );
    }
}
