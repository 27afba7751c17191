//! JSON written the way Python's `json.dump(obj, f)` writes it, so vLLM-format files match
//! vLLM's byte for byte: `", "` and `": "` separators, keys in insertion order, floats as
//! `repr(float)` (`1e-05`, `1e+16`, `12.0`), `NaN`/`Infinity`/`-Infinity` for non-finite
//! floats, and every character outside printable ASCII escaped (`ensure_ascii`).

use std::fmt::Write as _;

/// A value of vLLM's result object, as Python holds it (an int and a float stay apart).
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    List(Vec<PyValue>),
    Object(OrderedObject),
}

impl PyValue {
    /// The number, int or float.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyValue::Int(i) => Some(*i as f64),
            PyValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A non-negative int.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            PyValue::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            PyValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[PyValue]> {
        match self {
            PyValue::List(l) => Some(l),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, PyValue::Null)
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for PyValue {
            fn from(v: $t) -> Self {
                PyValue::Int(v as i128)
            }
        }
    )*};
}
from_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64);

impl From<f64> for PyValue {
    fn from(v: f64) -> Self {
        PyValue::Float(v)
    }
}

impl From<bool> for PyValue {
    fn from(v: bool) -> Self {
        PyValue::Bool(v)
    }
}

impl From<String> for PyValue {
    fn from(v: String) -> Self {
        PyValue::Str(v)
    }
}

impl From<&str> for PyValue {
    fn from(v: &str) -> Self {
        PyValue::Str(v.to_owned())
    }
}

impl From<OrderedObject> for PyValue {
    fn from(v: OrderedObject) -> Self {
        PyValue::Object(v)
    }
}

impl<T: Into<PyValue>> From<Option<T>> for PyValue {
    fn from(v: Option<T>) -> Self {
        v.map(Into::into).unwrap_or(PyValue::Null)
    }
}

impl<T: Into<PyValue>> From<Vec<T>> for PyValue {
    fn from(v: Vec<T>) -> Self {
        PyValue::List(v.into_iter().map(Into::into).collect())
    }
}

/// A JSON object that keeps its keys in insertion order, as a Python dict does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderedObject(pub Vec<(String, PyValue)>);

impl OrderedObject {
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert or replace (keeping the first position, as a Python dict does).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<PyValue>) {
        let key = key.into();
        let value = value.into();
        if let Some(slot) = self.0.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.0.push((key, value));
        }
    }

    pub fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }

    pub fn get(&self, key: &str) -> Option<&PyValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

/// Python's `repr(float)`: the shortest digits that read back to the same float, in fixed
/// notation when the decimal exponent is in `[-4, 16)` (with `.0` for whole numbers), else as
/// `d.ddde±XX` with at least two exponent digits.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits Python's repr uses.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    // Python's decpt: the value is 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    let n = digits.len() as i32;
    let body = if -4 < decpt && decpt <= 16 {
        if decpt <= 0 {
            format!("0.{}{digits}", "0".repeat((-decpt) as usize))
        } else if decpt >= n {
            format!("{digits}{}.0", "0".repeat((decpt - n) as usize))
        } else {
            let (a, b) = digits.split_at(decpt as usize);
            format!("{a}.{b}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let mant = if rest.is_empty() {
            first.to_owned()
        } else {
            format!("{first}.{rest}")
        };
        let e = decpt - 1;
        let esign = if e < 0 { '-' } else { '+' };
        format!("{mant}e{esign}{:02}", e.abs())
    };
    format!("{sign}{body}")
}

/// Python's `json` string encoding with `ensure_ascii=True`.
fn write_py_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Python's layout: `indent` None is `json.dump`'s one line (", " and ": "); Some(n) is
/// `indent=n`: one item per line, "," at line ends, empty containers as `[]`/`{}`.
#[derive(Clone, Copy)]
struct Layout {
    indent: Option<usize>,
}

impl Layout {
    fn open(self, out: &mut String, depth: usize) {
        if let Some(n) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * (depth + 1)));
        }
    }

    fn separate(self, out: &mut String, depth: usize) {
        match self.indent {
            None => out.push_str(", "),
            Some(_) => {
                out.push(',');
                self.open(out, depth);
            }
        }
    }

    fn close(self, out: &mut String, depth: usize) {
        if let Some(n) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    }
}

fn write_value(out: &mut String, v: &PyValue, layout: Layout, depth: usize) {
    match v {
        PyValue::Null => out.push_str("null"),
        PyValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        PyValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        PyValue::Float(f) => out.push_str(&py_float_repr(*f)),
        PyValue::Str(s) => write_py_str(out, s),
        PyValue::List(items) if items.is_empty() => out.push_str("[]"),
        PyValue::List(items) => {
            out.push('[');
            layout.open(out, depth);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    layout.separate(out, depth);
                }
                write_value(out, item, layout, depth + 1);
            }
            layout.close(out, depth);
            out.push(']');
        }
        PyValue::Object(o) => write_object(out, o, layout, depth),
    }
}

fn write_object(out: &mut String, o: &OrderedObject, layout: Layout, depth: usize) {
    if o.0.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push('{');
    layout.open(out, depth);
    for (i, (k, v)) in o.0.iter().enumerate() {
        if i > 0 {
            layout.separate(out, depth);
        }
        write_py_str(out, k);
        out.push_str(": ");
        write_value(out, v, layout, depth + 1);
    }
    layout.close(out, depth);
    out.push('}');
}

/// Serialize like Python's `json.dump(obj, f)`.
pub fn to_python_json(o: &OrderedObject) -> Vec<u8> {
    let mut out = String::new();
    write_object(&mut out, o, Layout { indent: None }, 0);
    out.into_bytes()
}

/// Serialize like Python's `json.dump(obj, f, indent=indent)`.
pub fn to_python_json_indented(o: &OrderedObject, indent: usize) -> Vec<u8> {
    let mut out = String::new();
    write_object(
        &mut out,
        o,
        Layout {
            indent: Some(indent),
        },
        0,
    );
    out.into_bytes()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_layout() {
        let mut o = OrderedObject::new();
        o.insert("b", 1.0);
        o.insert("a", vec![1u64, 2]);
        o.insert("c", PyValue::Null);
        o.insert("b", 2.5);
        let s = String::from_utf8(to_python_json(&o)).unwrap();
        assert_eq!(s, r#"{"b": 2.5, "a": [1, 2], "c": null}"#);
    }

    /// Expected strings are what CPython 3 prints for `repr(x)` / `json.dumps(x)`.
    #[test]
    fn floats_are_pythons_repr() {
        let cases: &[(f64, &str)] = &[
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (1e16, "1e+16"),
            (1.2345e16, "1.2345e+16"),
            (1e15, "1000000000000000.0"),
            (9_999_999_999_999_998.0, "9999999999999998.0"),
            (12.0, "12.0"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123.456, "123.456"),
            (-2.5, "-2.5"),
            (-1e-7, "-1e-07"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for &(x, want) in cases {
            assert_eq!(py_float_repr(x), want, "repr({x:e})");
        }
    }

    #[test]
    fn strings_are_ascii_escaped_as_python_does() {
        let mut o = OrderedObject::new();
        o.insert("t", "é\u{1F600}\"\\\n\t\u{1}\u{7f}~");
        let s = String::from_utf8(to_python_json(&o)).unwrap();
        // json.dumps({"t": "é😀\"\\\n\t\x01\x7f~"})
        assert_eq!(s, r#"{"t": "\u00e9\ud83d\ude00\"\\\n\t\u0001\u007f~"}"#);
    }

    #[test]
    fn ints_stay_ints_and_floats_stay_floats() {
        let mut o = OrderedObject::new();
        o.insert("i", 3u64);
        o.insert("f", 3.0);
        o.insert("n", Option::<u64>::None);
        o.insert("l", vec![vec![0.5, 1e-6], vec![]]);
        let s = String::from_utf8(to_python_json(&o)).unwrap();
        assert_eq!(
            s,
            r#"{"i": 3, "f": 3.0, "n": null, "l": [[0.5, 1e-06], []]}"#
        );
    }

    #[test]
    fn indented_output_is_pythons_indent_4() {
        let mut inner = OrderedObject::new();
        inner.insert("10", 0.5);
        let mut o = OrderedObject::new();
        o.insert("avg_latency", 1.0);
        o.insert("latencies", vec![1.0, 2e-5]);
        o.insert("empty", Vec::<f64>::new());
        o.insert("percentiles", inner);
        o.insert("none", OrderedObject::new());
        // json.dumps({...}, indent=4) in Python 3.
        let expected = "{\n    \"avg_latency\": 1.0,\n    \"latencies\": [\n        1.0,\n        2e-05\n    ],\n    \"empty\": [],\n    \"percentiles\": {\n        \"10\": 0.5\n    },\n    \"none\": {}\n}";
        assert_eq!(
            String::from_utf8(to_python_json_indented(&o, 4)).unwrap(),
            expected
        );
    }
}
