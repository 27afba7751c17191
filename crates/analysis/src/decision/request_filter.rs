//! Which requests a contract is judged on (`prompt_tokens<4096`): in a mixed workload the
//! contract that matters may be the chats' alone, while long documents have their own.

use std::fmt;

use serde::Serialize;
use servebench_metrics::RequestRecord;

use crate::AnalysisError;

/// The request property a filter tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestField {
    /// Prompt tokens (the record's `input_tokens`).
    PromptTokens,
    /// Output tokens (the record's `output_tokens`).
    OutputTokens,
}

/// Requests whose field lies within `[lo, hi]` (inclusive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestFilter {
    /// The property tested.
    pub field: RequestField,
    /// Smallest value admitted.
    pub lo: u64,
    /// Largest value admitted.
    pub hi: u64,
    /// The filter as written.
    pub text: String,
}

impl RequestFilter {
    /// Parses `FIELD OP VALUE`: `prompt_tokens` or `output_tokens`, one of `>= > <= < ==`.
    pub fn parse(text: &str) -> Result<RequestFilter, AnalysisError> {
        let bad = |why: String| {
            AnalysisError::Invalid(format!(
                "request filter '{text}': {why} (expected e.g. \"prompt_tokens<4096\")"
            ))
        };
        let t = text.trim();
        let (field, rest) = if let Some(r) = t.strip_prefix("prompt_tokens") {
            (RequestField::PromptTokens, r)
        } else if let Some(r) = t.strip_prefix("output_tokens") {
            (RequestField::OutputTokens, r)
        } else {
            return Err(bad(
                "the field must be prompt_tokens or output_tokens".into()
            ));
        };
        let rest = rest.trim_start();
        let (op, value) = [">=", "<=", "==", ">", "<"]
            .iter()
            .find_map(|op| rest.strip_prefix(op).map(|v| (*op, v.trim())))
            .ok_or_else(|| bad("the operator must be >=, >, <=, < or ==".into()))?;
        let v: u64 = value
            .parse()
            .map_err(|_| bad(format!("'{value}' is not a whole number")))?;
        let (lo, hi) = match op {
            ">=" => (v, u64::MAX),
            ">" => (v.saturating_add(1), u64::MAX),
            "<=" => (0, v),
            "<" if v == 0 => return Err(bad("no request has fewer than 0 tokens".into())),
            "<" => (0, v - 1),
            _ => (v, v),
        };
        Ok(RequestFilter {
            field,
            lo,
            hi,
            text: t.to_owned(),
        })
    }

    /// Whether a record falls within the filter.
    pub fn admits(&self, r: &RequestRecord) -> bool {
        let v = match self.field {
            RequestField::PromptTokens => r.input_tokens,
            RequestField::OutputTokens => r.output_tokens,
        };
        (self.lo..=self.hi).contains(&v)
    }
}

impl fmt::Display for RequestFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_into_inclusive_ranges() {
        let f = RequestFilter::parse("prompt_tokens<4096").unwrap();
        assert_eq!((f.field, f.lo, f.hi), (RequestField::PromptTokens, 0, 4095));
        let f = RequestFilter::parse(" output_tokens >= 200 ").unwrap();
        assert_eq!((f.lo, f.hi), (200, u64::MAX));
        assert_eq!(f.to_string(), "output_tokens >= 200");
        let f = RequestFilter::parse("prompt_tokens==7").unwrap();
        assert_eq!((f.lo, f.hi), (7, 7));
    }

    #[test]
    fn bad_filters_say_what_is_wrong() {
        for (text, says) in [
            ("tokens<5", "prompt_tokens or output_tokens"),
            ("prompt_tokens~5", "operator"),
            ("prompt_tokens<lots", "'lots' is not a whole number"),
            ("prompt_tokens<0", "fewer than 0"),
        ] {
            let e = RequestFilter::parse(text).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(text), "{text}: {e}");
        }
    }
}
