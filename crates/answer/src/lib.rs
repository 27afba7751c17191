//! Answer checks: a 200 with garbage in it is not a success. The text of a completed
//! response (the streamed pieces concatenated, or the whole non-streamed text) is held
//! against the run's checks (`--expect-regex`, `--expect-json-schema`) and the request's own
//! `expected` from the dataset; a miss becomes a failure of kind `invalid_output` whose
//! message names the check and quotes a bounded excerpt of the answer.
//!
//! Everything that can be wrong with a check itself (a regex that does not compile, a schema
//! file that is unreadable, not JSON or not a valid schema) is found when the check is built,
//! before any request is sent. Schemas are compiled without any network access: a `$ref` to
//! another document is refused, never fetched.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use regex::Regex;
use servebench_metrics::{Failure, FailureKind};

/// Characters of the answer quoted in a failure's message (the head of the text).
pub const EXCERPT_CHARS: usize = 80;

/// Why a check could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{flag} {pattern:?}: not a valid regular expression: {message}")]
    Regex {
        flag: String,
        pattern: String,
        message: String,
    },
    #[error("{flag} {}: {message}", path.display())]
    Schema {
        flag: String,
        path: PathBuf,
        message: String,
    },
}

/// A regex check with the pattern it was compiled from (for messages).
#[derive(Debug, Clone)]
struct Pattern {
    re: Regex,
}

impl Pattern {
    fn compile(flag: &str, pattern: &str) -> Result<Pattern, CheckError> {
        Regex::new(pattern)
            .map(|re| Pattern { re })
            .map_err(|e| CheckError::Regex {
                flag: flag.to_owned(),
                pattern: pattern.to_owned(),
                // The regex error spans lines (pattern, caret, reason); one line reads better.
                message: one_line(&e.to_string()),
            })
    }
}

/// A compiled JSON schema and the file it came from.
#[derive(Clone)]
struct Schema {
    path: PathBuf,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema").field("path", &self.path).finish()
    }
}

impl Schema {
    fn load(flag: &str, path: &Path) -> Result<Schema, CheckError> {
        let err = |message: String| CheckError::Schema {
            flag: flag.to_owned(),
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let validator = jsonschema::validator_for(&value).map_err(|e| {
            err(format!(
                "not a valid JSON schema: {}",
                one_line(&e.to_string())
            ))
        })?;
        Ok(Schema {
            path: path.to_path_buf(),
            validator: Arc::new(validator),
        })
    }

    fn verify(&self, text: &str) -> Result<(), String> {
        let value: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
            format!(
                "answer is not JSON ({e}), --expect-json-schema {}",
                self.path.display()
            )
        })?;
        self.validator.validate(&value).map_err(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!(
                "answer violates --expect-json-schema {} at {at}: {}",
                self.path.display(),
                bounded(&one_line(&e.to_string()), 160)
            )
        })
    }
}

/// What one request's answer must contain, from the dataset (`"expected"` in a custom
/// JSONL line): a plain substring, or a regex that must match somewhere in the text.
#[derive(Debug, Clone)]
pub enum Expected {
    Substring(String),
    Regex(Regex),
}

impl PartialEq for Expected {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Expected::Substring(a), Expected::Substring(b)) => a == b,
            (Expected::Regex(a), Expected::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Expected {
    /// From a dataset line's `expected` value: `"substring"` or `{"regex": "..."}`.
    pub fn from_json(value: &serde_json::Value) -> Result<Expected, String> {
        match value {
            serde_json::Value::String(s) => Ok(Expected::Substring(s.clone())),
            serde_json::Value::Object(m) if m.len() == 1 && m.contains_key("regex") => {
                match m.get("regex") {
                    Some(serde_json::Value::String(p)) => Pattern::compile("expected.regex", p)
                        .map(|p| Expected::Regex(p.re))
                        .map_err(|e| e.to_string()),
                    _ => Err("expected.regex must be a string".to_owned()),
                }
            }
            _ => Err(
                "expected must be a string (a substring of the answer) or {\"regex\": \"...\"}"
                    .to_owned(),
            ),
        }
    }

    fn verify(&self, text: &str) -> Result<(), String> {
        match self {
            Expected::Substring(s) if text.contains(s.as_str()) => Ok(()),
            Expected::Substring(s) => Err(format!(
                "answer does not contain the expected substring {:?}",
                bounded(s, 60)
            )),
            Expected::Regex(re) if re.is_match(text) => Ok(()),
            Expected::Regex(re) => Err(format!(
                "answer does not match the expected regex {:?}",
                bounded(re.as_str(), 60)
            )),
        }
    }
}

/// The checks of a whole run: every completed answer must pass all of them.
#[derive(Debug, Clone, Default)]
pub struct AnswerChecks {
    regexes: Vec<Pattern>,
    schemas: Vec<Schema>,
}

impl AnswerChecks {
    /// Compiles `--expect-regex` patterns and loads `--expect-json-schema` files.
    pub fn new(regexes: &[String], schemas: &[PathBuf]) -> Result<AnswerChecks, CheckError> {
        Ok(AnswerChecks {
            regexes: regexes
                .iter()
                .map(|p| Pattern::compile("--expect-regex", p))
                .collect::<Result<_, _>>()?,
            schemas: schemas
                .iter()
                .map(|p| Schema::load("--expect-json-schema", p))
                .collect::<Result<_, _>>()?,
        })
    }

    /// No run-wide check (per-request `expected` may still apply).
    pub fn is_empty(&self) -> bool {
        self.regexes.is_empty() && self.schemas.is_empty()
    }

    /// Whether an answer with this `expected` needs checking at all (so its text must be kept).
    pub fn applies(&self, expected: Option<&Expected>) -> bool {
        !self.is_empty() || expected.is_some()
    }

    /// The first check `text` fails, as the reason with an excerpt of the answer.
    pub fn verify(&self, text: &str, expected: Option<&Expected>) -> Result<(), String> {
        let outcome = (|| {
            for p in &self.regexes {
                if !p.re.is_match(text) {
                    return Err(format!(
                        "answer does not match --expect-regex {:?}",
                        bounded(p.re.as_str(), 60)
                    ));
                }
            }
            for s in &self.schemas {
                s.verify(text)?;
            }
            match expected {
                Some(e) => e.verify(text),
                None => Ok(()),
            }
        })();
        outcome.map_err(|reason| format!("{reason}; answer: {}", excerpt(text)))
    }

    /// [`Self::verify`] as a record's failure (`invalid_output`), `None` when it passes.
    pub fn judge(&self, text: &str, expected: Option<&Expected>) -> Option<Failure> {
        self.verify(text, expected).err().map(|message| Failure {
            kind: FailureKind::InvalidOutput,
            status: None,
            message,
        })
    }
}

/// The head of the answer, quoted, at most [`EXCERPT_CHARS`] characters (an ellipsis and the
/// total length when cut).
pub fn excerpt(text: &str) -> String {
    let n = text.chars().count();
    if n <= EXCERPT_CHARS {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(EXCERPT_CHARS).collect();
        format!("{head:?}… ({n} characters)")
    }
}

fn bounded(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema_file(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("servebench-answer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn a_regex_that_matches_passes_and_one_that_does_not_names_itself() {
        let c = AnswerChecks::new(&[r"\bthe\b".into()], &[]).unwrap();
        assert!(c.verify(" of the and", None).is_ok());
        let c = AnswerChecks::new(&["^SELECT".into()], &[]).unwrap();
        let f = c.judge(" of the and", None).unwrap();
        assert_eq!(f.kind, FailureKind::InvalidOutput);
        assert!(
            f.message.contains("--expect-regex \"^SELECT\""),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("answer: \" of the and\""),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_bad_regex_is_refused_when_built() {
        let e = AnswerChecks::new(&["(unclosed".into()], &[]).unwrap_err();
        let m = e.to_string();
        assert!(m.starts_with("--expect-regex \"(unclosed\""), "{m}");
        assert!(!m.contains('\n'), "{m}");
    }

    #[test]
    fn schema_checks_parse_and_validate() {
        let p = schema_file(
            "obj.json",
            r#"{"type":"object","required":["answer"],"properties":{"answer":{"type":"integer"}}}"#,
        );
        let c = AnswerChecks::new(&[], std::slice::from_ref(&p)).unwrap();
        assert!(c.verify(r#" {"answer": 42} "#, None).is_ok());
        let m = c.verify("not json at all", None).unwrap_err();
        assert!(m.contains("answer is not JSON"), "{m}");
        assert!(m.contains(&p.display().to_string()), "{m}");
        let m = c.verify(r#"{"answer": "forty-two"}"#, None).unwrap_err();
        assert!(m.contains("violates --expect-json-schema"), "{m}");
        assert!(m.contains("at /answer"), "{m}");
    }

    #[test]
    fn unusable_schema_files_are_refused_naming_the_file() {
        let missing = PathBuf::from("/nonexistent/schema.json");
        let m = AnswerChecks::new(&[], &[missing]).unwrap_err().to_string();
        assert!(
            m.contains("/nonexistent/schema.json") && m.contains("cannot read"),
            "{m}"
        );
        let p = schema_file("broken.json", "{ not json");
        let m = AnswerChecks::new(&[], std::slice::from_ref(&p))
            .unwrap_err()
            .to_string();
        assert!(
            m.contains(&p.display().to_string()) && m.contains("not JSON"),
            "{m}"
        );
        let p = schema_file("bad-type.json", r#"{"type": 12}"#);
        let m = AnswerChecks::new(&[], std::slice::from_ref(&p))
            .unwrap_err()
            .to_string();
        assert!(m.contains("not a valid JSON schema"), "{m}");
    }

    #[test]
    fn a_remote_ref_is_refused_never_fetched() {
        let p = schema_file(
            "remote.json",
            r#"{"$ref": "http://127.0.0.1:9/schema.json"}"#,
        );
        assert!(AnswerChecks::new(&[], &[p]).is_err());
    }

    #[test]
    fn expected_takes_a_substring_or_a_regex_object() {
        let e = Expected::from_json(&json!("Paris")).unwrap();
        assert_eq!(e, Expected::Substring("Paris".into()));
        let e = Expected::from_json(&json!({"regex": "^[0-9]+$"})).unwrap();
        assert!(matches!(&e, Expected::Regex(r) if r.as_str() == "^[0-9]+$"));
        assert!(Expected::from_json(&json!({"regex": "("})).is_err());
        assert!(Expected::from_json(&json!({"substring": "x"})).is_err());
        assert!(Expected::from_json(&json!(3)).is_err());

        let none = AnswerChecks::default();
        assert!(!none.applies(None));
        let paris = Expected::Substring("Paris".into());
        assert!(none.applies(Some(&paris)));
        assert!(none.verify("It is Paris.", Some(&paris)).is_ok());
        let m = none.verify("It is Lyon.", Some(&paris)).unwrap_err();
        assert!(m.contains("expected substring \"Paris\""), "{m}");
        let digits = Expected::from_json(&json!({"regex": "^[0-9]+$"})).unwrap();
        assert!(none.verify("1234", Some(&digits)).is_ok());
        assert!(none.verify("12a4", Some(&digits)).is_err());
    }

    #[test]
    fn the_excerpt_is_bounded() {
        let long = "x".repeat(10_000);
        let e = excerpt(&long);
        assert!(e.len() < EXCERPT_CHARS + 40, "{e}");
        assert!(e.ends_with("(10000 characters)"), "{e}");
        assert_eq!(excerpt("a\"b"), r#""a\"b""#);
    }
}
