//! JSON written the way Python's `json.dump` writes it (`", "` and `": "` separators, keys in
//! insertion order), so files match vLLM's byte for byte in layout, not only in content.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;
use serde_json::Value;

/// A JSON object that keeps its keys in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderedObject(pub Vec<(String, Value)>);

impl OrderedObject {
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert or replace (keeping the first position, as a Python dict does).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
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

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl Serialize for OrderedObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Python's default `json.dumps` separators.
#[derive(Debug, Clone, Copy, Default)]
pub struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// Serialize like Python's `json.dump(obj, f)`.
pub fn to_python_json<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    // Serializing plain values into a Vec cannot fail.
    let _ = value.serialize(&mut ser);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_layout() {
        let mut o = OrderedObject::new();
        o.insert("b", 1.0);
        o.insert("a", serde_json::json!([1, 2]));
        o.insert("c", Value::Null);
        o.insert("b", 2.5);
        let s = String::from_utf8(to_python_json(&o)).unwrap();
        assert_eq!(s, r#"{"b": 2.5, "a": [1, 2], "c": null}"#);
    }
}
