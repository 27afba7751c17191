//! JSON values as block-style YAML, for manifests people read. Every string is written as a
//! JSON string, which YAML reads as a double-quoted scalar with the same escapes, so no
//! value can change meaning (`"on"`, `"0123"`, `"a: b"` stay strings).

use serde_json::Value;

/// `v` as a YAML document.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => object(m, 0, &mut out),
        Value::Array(a) if !a.is_empty() => array(a, 0, &mut out),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        // A string's JSON form is a valid YAML double-quoted scalar.
        other => other.to_string(),
    }
}

/// A multi-line string as a literal block (`|` keeps its final newline, `|-` has none), where
/// that reads back the same: no carriage returns or tabs, no line starting with a space, no
/// blank first line.
fn literal_block(v: &Value, indent: usize) -> Option<String> {
    let s = v.as_str()?;
    let body = s.strip_suffix('\n').unwrap_or(s);
    let safe = body.contains('\n')
        && !body.contains(['\r', '\t'])
        && !body.ends_with('\n')
        && body
            .lines()
            .all(|l| !l.starts_with(' ') && !l.ends_with(' '))
        && !body.starts_with('\n');
    if !safe {
        return None;
    }
    let pad = " ".repeat(indent);
    let mut out = String::from(if s.ends_with('\n') { "|\n" } else { "|-\n" });
    for line in body.lines() {
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(line);
        }
        out.push('\n');
    }
    Some(out)
}

fn key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
        && k.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    if plain {
        k.to_owned()
    } else {
        Value::String(k.to_owned()).to_string()
    }
}

fn object(m: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (k, v) in m {
        if is_block(v) {
            out.push_str(&format!("{pad}{}:\n", key(k)));
            match v {
                Value::Object(inner) => object(inner, indent + 2, out),
                Value::Array(items) => array(items, indent + 2, out),
                _ => {}
            }
        } else if let Some(block) = literal_block(v, indent + 2) {
            out.push_str(&format!("{pad}{}: {block}", key(k)));
        } else {
            out.push_str(&format!("{pad}{}: {}\n", key(k), scalar(v)));
        }
    }
}

fn array(items: &[Value], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for item in items {
        if is_block(item) {
            // The item's first line goes on the dash line, the rest two columns in.
            let mut inner = String::new();
            match item {
                Value::Object(m) => object(m, indent + 2, &mut inner),
                Value::Array(a) => array(a, indent + 2, &mut inner),
                _ => {}
            }
            out.push_str(&pad);
            out.push_str("- ");
            out.push_str(&inner[indent + 2..]);
        } else if let Some(block) = literal_block(item, indent + 2) {
            out.push_str(&format!("{pad}- {block}"));
        } else {
            out.push_str(&format!("{pad}- {}\n", scalar(item)));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_blocks_and_quoted_strings() {
        let v = json!({
            "apiVersion": "batch/v1",
            "spec": {"containers": [{"name": "a", "args": ["x y", "on"]}], "empty": []},
            "labels": {"app.kubernetes.io/name": "s"},
            "n": 3,
        });
        let y = to_yaml(&v);
        let want = "\
apiVersion: \"batch/v1\"
labels:
  app.kubernetes.io/name: \"s\"
n: 3
spec:
  containers:
    - args:
        - \"x y\"
        - \"on\"
      name: \"a\"
  empty: []
";
        assert_eq!(y, want);
    }

    #[test]
    fn multi_line_strings_are_literal_blocks_where_safe() {
        let y = to_yaml(&json!({"script": "a; b\nexit $rc\n", "args": ["x\n\ny"]}));
        assert_eq!(
            y,
            "args:\n  - |-\n    x\n\n    y\nscript: |\n  a; b\n  exit $rc\n"
        );
        // Leading spaces or tabs would change meaning in a block: those stay quoted.
        let y = to_yaml(&json!({"s": " a\nb"}));
        assert_eq!(y, "s: \" a\\nb\"\n");
    }
}
