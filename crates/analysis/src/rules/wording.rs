//! How findings write their figures, so every rule words a duration or a ratio alike.

use crate::explained::format_quantity;
use crate::figures::RowFigures;

pub fn ms(v: f64) -> String {
    format_quantity(v / 1e3, "s")
}

pub fn tok_s(v: f64) -> String {
    format_quantity(v, "tok/s")
}

pub fn tokens(v: f64) -> String {
    format_quantity(v.round(), "tokens")
}

pub fn ratio(v: f64) -> String {
    format_quantity(v, "×")
}

/// The single-variable change that halves a row's offered load, for a next experiment.
pub fn halved_load(row: &RowFigures) -> String {
    match (row.planned.request_rate, row.planned.max_concurrency) {
        (Some(r), _) if r.is_finite() => format!(
            "the request rate halved (--request-rate {})",
            format_quantity(r / 2.0, "")
        ),
        (_, Some(cap)) if cap > 1 => {
            format!("the concurrency halved (--max-concurrency {})", cap / 2)
        }
        _ => "the offered load halved".into(),
    }
}
