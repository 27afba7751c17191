//! Parameter files of `vllm bench sweep serve` (`--serve-params`, `--bench-params`): a list of
//! objects, or an object of named objects; each object's keys become `--key-name value` flags
//! of the command, replacing a flag the command already has.

use std::fmt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The key naming an entry (vLLM's dict-of-dicts form sets it; a list entry may).
pub const NAME_KEY: &str = "_benchmark_name";

/// One combination: its keys in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParamItem(pub Vec<(String, Value)>);

/// Every combination of one file, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSweep(pub Vec<ParamItem>);

impl ParamSweep {
    /// One empty combination: the command runs as given.
    pub fn unchanged() -> ParamSweep {
        ParamSweep(vec![ParamItem::default()])
    }

    /// Reads a parameter file (either form).
    pub fn read(path: &Path) -> Result<ParamSweep> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses a parameter file's text.
    pub fn parse(text: &str) -> Result<ParamSweep> {
        let file: ParamFile = serde_json::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "line {} column {}: {e} (expected a list of objects or an object of named objects)",
                e.line(),
                e.column()
            )
        })?;
        let items = file.0;
        let mut names: Vec<&str> = items.iter().filter_map(ParamItem::given_name).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!("duplicate {NAME_KEY} {:?}: names must be unique", w[0]);
        }
        if items.is_empty() {
            bail!("no parameter combination (an empty list or object)");
        }
        Ok(ParamSweep(items))
    }
}

impl ParamItem {
    fn given_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == NAME_KEY)
            .and_then(|(_, v)| v.as_str())
    }

    /// The value of `key`, as written.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether the combination sets nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets `key` (replacing it where present).
    pub fn set(&mut self, key: &str, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    /// The parameters without the name.
    pub fn params(&self) -> impl Iterator<Item = &(String, Value)> {
        self.0.iter().filter(|(k, _)| k != NAME_KEY)
    }

    /// Its name: the given one, else `key=value` pairs joined by `-` (as vLLM names it).
    pub fn name(&self) -> String {
        if let Some(n) = self.0.iter().find(|(k, _)| k == NAME_KEY) {
            return text(&n.1);
        }
        self.as_text("-")
    }

    /// `key=value` pairs joined by `sep`.
    pub fn as_text(&self, sep: &str) -> String {
        self.params()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect::<Vec<_>>()
            .join(sep)
    }

    /// `cmd` with every parameter applied: an existing flag (under its `-` or `_` spelling)
    /// takes the new value in place; a new one is appended.
    pub fn apply_to(&self, cmd: &[String]) -> Vec<String> {
        let mut cmd = cmd.to_vec();
        for (k, v) in self.params() {
            let pair = flag_pair(k, v);
            let found = cmd_key_candidates(k)
                .iter()
                .find_map(|c| cmd.iter().position(|a| a == c));
            match found {
                Some(i) if pair.len() == 1 => cmd[i] = pair[0].clone(),
                Some(i) if i + 1 < cmd.len() => {
                    cmd[i] = pair[0].clone();
                    cmd[i + 1] = pair[1].clone();
                }
                Some(i) => {
                    cmd[i] = pair[0].clone();
                    cmd.push(pair[1].clone());
                }
                None => cmd.extend(pair),
            }
        }
        cmd
    }

    /// This combination's parameters as a JSON object (name included).
    pub fn to_json(&self) -> serde_json::Map<String, Value> {
        self.0.iter().cloned().collect()
    }
}

/// A value as a flag value: strings bare, booleans as vLLM's Python prints them, objects and
/// lists as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Null => "None".to_owned(),
        other => other.to_string(),
    }
}

/// The spellings of a key as written in a file: as given, `-` → `_`, `_` → `-`; a dotted
/// key varies only its first part (the rest is an inner config path the CLI does not convert).
fn key_candidates(key: &str) -> Vec<String> {
    if let Some((prefix, rest)) = key.split_once('.') {
        return key_candidates(prefix)
            .into_iter()
            .map(|p| format!("{p}.{rest}"))
            .collect();
    }
    vec![key.to_owned(), key.replace('-', "_"), key.replace('_', "-")]
}

/// Flag spellings searched in a command, the CLI's `-` spelling first.
fn cmd_key_candidates(key: &str) -> Vec<String> {
    key_candidates(key)
        .into_iter()
        .rev()
        .map(|k| format!("--{k}"))
        .collect()
}

fn flag_name(key: &str) -> String {
    cmd_key_candidates(key)
        .into_iter()
        .next()
        .unwrap_or_else(|| format!("--{key}"))
}

/// One parameter as flags: `--key value`; a boolean as `--key` / `--no-key` (a dotted key as
/// `--key=true|false`), as vLLM's argument parser takes them.
fn flag_pair(key: &str, v: &Value) -> Vec<String> {
    match v {
        Value::Bool(b) if key.contains('.') => vec![format!("{}={b}", flag_name(key))],
        Value::Bool(true) => vec![flag_name(key)],
        Value::Bool(false) => vec![flag_name(&format!("no-{key}"))],
        Value::Object(_) => vec![flag_name(key), v.to_string()],
        other => vec![flag_name(key), text(other)],
    }
}

/// `--link-vars serve_key=bench_key,...`.
pub fn parse_link_vars(s: &str) -> Result<Vec<(String, String)>> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
                Ok((a.trim().to_owned(), b.trim().to_owned()))
            }
            _ => bail!("--link-vars {item:?}: expected serve_key=bench_key"),
        })
        .collect()
}

/// Whether a server and a benchmark combination agree on every linked variable (both set it,
/// to the same value).
pub fn linked(serve: &ParamItem, bench: &ParamItem, links: &[(String, String)]) -> bool {
    links
        .iter()
        .all(|(s, b)| matches!((serve.get(s), bench.get(b)), (Some(x), Some(y)) if x == y))
}

/// The file: a list of objects or an object of named objects, key order kept.
struct ParamFile(Vec<ParamItem>);

impl<'de> Deserialize<'de> for ParamItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ParamItem;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of parameters")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ParamItem, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(ParamItem(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for ParamFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ParamFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of objects or an object of named objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<ParamFile, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = s.next_element::<ParamItem>()? {
                    out.push(item);
                }
                Ok(ParamFile(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ParamFile, A::Error> {
                let mut out = Vec::new();
                while let Some((name, mut item)) = m.next_entry::<String, ParamItem>()? {
                    if item.get(NAME_KEY).is_some() {
                        return Err(de::Error::custom(format!(
                            "entry {name:?} sets {NAME_KEY} itself"
                        )));
                    }
                    item.0.insert(0, (NAME_KEY.to_owned(), Value::String(name)));
                    out.push(item);
                }
                Ok(ParamFile(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn both_file_forms_keep_their_order_and_names() {
        let list = ParamSweep::parse(
            r#"[{"max_num_seqs": 4, "enable_chunked_prefill": true}, {"max_num_seqs": 64}]"#,
        )
        .expect("list");
        assert_eq!(list.0.len(), 2);
        assert_eq!(
            list.0[0].name(),
            "max_num_seqs=4-enable_chunked_prefill=True"
        );
        let named =
            ParamSweep::parse(r#"{"small": {"b": 1, "a": 2}, "big": {"b": 3}}"#).expect("dict");
        assert_eq!(named.0[0].name(), "small");
        assert_eq!(named.0[0].as_text(", "), "b=1, a=2");
        assert_eq!(named.0[1].name(), "big");
    }

    #[test]
    fn bad_files_are_named_errors() {
        let e = ParamSweep::parse("[{\"a\": 1},\n 3]").expect_err("not an object");
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        let e = ParamSweep::parse(r#"[{"_benchmark_name": "x"}, {"_benchmark_name": "x"}]"#)
            .expect_err("dup");
        assert!(format!("{e:#}").contains("duplicate"), "{e:#}");
        assert!(ParamSweep::parse("[]").is_err());
    }

    #[test]
    fn parameters_replace_or_extend_flags_as_vllm_does() {
        let item = ParamSweep::parse(
            r#"[{"max_num_seqs": 64, "max-model-len": 2048, "enable_prefix_caching": false,
                "enforce_eager": true, "compilation_config.mode": true, "hf": {"a": 1}}]"#,
        )
        .expect("ok")
        .0
        .remove(0);
        let cmd = item.apply_to(&argv("vllm serve m --max-num-seqs 4 --max_model_len 1024"));
        assert_eq!(
            cmd,
            argv(
                "vllm serve m --max-num-seqs 64 --max-model-len 2048 --no-enable-prefix-caching \
                 --enforce-eager --compilation-config.mode=true --hf {\"a\":1}"
            )
        );
    }

    #[test]
    fn link_vars_pair_equal_values() {
        let links = parse_link_vars("max_num_seqs=max_concurrency").expect("ok");
        let s = ParamSweep::parse(r#"[{"max_num_seqs": 4}]"#)
            .expect("s")
            .0
            .remove(0);
        let b4 = ParamSweep::parse(r#"[{"max_concurrency": 4}]"#)
            .expect("b")
            .0
            .remove(0);
        let b8 = ParamSweep::parse(r#"[{"max_concurrency": 8}]"#)
            .expect("b")
            .0
            .remove(0);
        assert!(linked(&s, &b4, &links));
        assert!(!linked(&s, &b8, &links));
        assert!(parse_link_vars("a").is_err());
    }
}
