//! A figure together with the formula and inputs that produced it, so `--explain` can show
//! the arithmetic and JSON consumers can re-derive every number.

use serde::Serialize;

/// One named input of a formula.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Input {
    /// The symbol as the formula writes it (`W_step`, `peak_BW`).
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its unit (`B`, `s`, `B/s`, `tokens`, or empty for a pure number).
    pub unit: String,
}

/// A computed figure with its formula and inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    /// The figure.
    pub value: f64,
    /// Its unit (`B`, `s`, `tok/s`, `tokens`, `blocks`, `req/s`, `GPUs`, `USD`, …).
    pub unit: String,
    /// The formula in the symbols of [`Explained::inputs`].
    pub formula: String,
    /// Every input the formula reads.
    pub inputs: Vec<Input>,
}

impl Explained {
    /// A figure without inputs yet.
    pub fn new(value: f64, unit: &str, formula: impl Into<String>) -> Explained {
        Explained {
            value,
            unit: unit.to_string(),
            formula: formula.into(),
            inputs: Vec::new(),
        }
    }

    /// Adds an input.
    pub fn with(mut self, name: &str, value: f64, unit: &str) -> Explained {
        self.inputs.push(Input {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        });
        self
    }

    /// The value formatted in its unit (`4.48 ms`, `15.01 GB`).
    pub fn display(&self) -> String {
        format_quantity(self.value, &self.unit)
    }

    /// The formula and its inputs on indented lines, for `--explain`.
    pub fn explanation(&self, indent: &str) -> String {
        let mut out = format!("{indent}= {}\n", self.formula);
        for input in &self.inputs {
            out.push_str(&format!(
                "{indent}  {} = {}\n",
                input.name,
                format_quantity(input.value, &input.unit)
            ));
        }
        out
    }
}

/// Formats a quantity for people: seconds below 1 s in ms or µs, bytes in GB with GiB beside,
/// large counts with thousands separators, rates with three significant digits.
pub fn format_quantity(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return format!("{value} {unit}").trim_end().to_string();
    }
    match unit {
        "s" => {
            let a = value.abs();
            if a == 0.0 {
                "0 s".to_string()
            } else if a < 1e-3 {
                format!("{:.1} µs", value * 1e6)
            } else if a < 1.0 {
                format!("{} ms", sig3(value * 1e3))
            } else {
                format!("{} s", sig3(value))
            }
        }
        "B" => {
            let a = value.abs();
            if a >= 1e9 {
                format!("{:.3} GB ({:.2} GiB)", value / 1e9, value / GIB)
            } else if a >= 1e6 {
                format!("{:.2} MB ({:.2} MiB)", value / 1e6, value / MIB)
            } else {
                format!("{} B", thousands(value))
            }
        }
        "B/s" => format!("{} GB/s", sig3(value / 1e9)),
        "FLOP/s" => format!("{} TFLOP/s", sig3(value / 1e12)),
        "FLOP" => format!("{:.4e} FLOP", value),
        "USD" if value.abs() < 1.0 => format!("${}", sig3(value)),
        "USD" => {
            let cents = format!("{:.2}", value.abs().fract());
            let sign = if value < 0.0 { "-" } else { "" };
            // The cents may round up to a whole unit (0.999 → "1.00").
            let (whole, cents) = match cents.strip_prefix("1.") {
                Some(c) => (value.abs().trunc() + 1.0, c.to_string()),
                None => (
                    value.abs().trunc(),
                    cents.trim_start_matches("0.").to_string(),
                ),
            };
            format!("{sign}${}.{cents}", thousands(whole))
        }
        "×" => format!("{}×", sig3_or_int(value)),
        "" => sig3_or_int(value),
        _ => format!("{} {unit}", sig3_or_int(value)),
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

/// Whole numbers with thousands separators, others with three significant digits.
fn sig3_or_int(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        thousands(v)
    } else if v.abs() >= 1e5 {
        thousands(v.round())
    } else {
        sig3(v)
    }
}

/// Three significant digits, without exponent notation for everyday magnitudes.
fn sig3(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if a >= 1000.0 {
        return thousands(v.round());
    }
    let digits = (2 - a.log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.digits$}")
}

/// An integer-valued float with comma separators (`447,648`).
fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_naturally() {
        assert_eq!(format_quantity(0.00448, "s"), "4.48 ms");
        assert_eq!(format_quantity(0.0525, "s"), "52.5 ms");
        assert_eq!(format_quantity(26.2e-6, "s"), "26.2 µs");
        assert_eq!(format_quantity(1.5, "s"), "1.50 s");
        assert_eq!(format_quantity(447_648.0, "tokens"), "447,648 tokens");
        assert_eq!(format_quantity(143.9, "tok/s"), "144 tok/s");
        assert_eq!(format_quantity(12_534.4, "tok/s"), "12,534 tok/s");
        assert_eq!(format_quantity(3.35e12, "B/s"), "3,350 GB/s");
        assert_eq!(format_quantity(131_072.0, "B"), "131,072 B");
        assert_eq!(format_quantity(57.87, "req/s"), "57.9 req/s");
        assert_eq!(format_quantity(3.4157, ""), "3.42");
        assert_eq!(format_quantity(-1234.0, ""), "-1,234");
        assert!(format_quantity(15.009e9, "B").starts_with("15.009 GB (13.98 GiB)"));
        assert_eq!(format_quantity(7200.0, "USD"), "$7,200.00");
        assert_eq!(format_quantity(2.5, "USD"), "$2.50");
        assert_eq!(format_quantity(1.999, "USD"), "$2.00");
        assert_eq!(format_quantity(0.0992, "USD"), "$0.0992");
        assert_eq!(format_quantity(3.4157, "×"), "3.42×");
    }

    #[test]
    fn explanation_lists_formula_and_inputs() {
        let e = Explained::new(0.00448, "s", "W_step / peak_BW")
            .with("W_step", 15.009e9, "B")
            .with("peak_BW", 3.35e12, "B/s");
        let text = e.explanation("  ");
        assert!(text.starts_with("  = W_step / peak_BW\n"), "{text}");
        assert!(text.contains("W_step = 15.009 GB"), "{text}");
        assert!(text.contains("peak_BW = 3,350 GB/s"), "{text}");
        assert_eq!(e.display(), "4.48 ms");
    }
}
