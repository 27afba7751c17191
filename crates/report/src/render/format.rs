//! Number and text formatting shared by the renderers.

/// A figure with its spread across repeated runs (`std` is `None` for a single run).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Figure {
    /// The value (the mean across runs when there are several).
    pub value: Option<f64>,
    /// Standard deviation across runs (ddof = 0), when there were several runs.
    pub std: Option<f64>,
}

impl Figure {
    /// A single value without spread.
    pub fn single(value: Option<f64>) -> Figure {
        Figure { value, std: None }
    }
}

/// Milliseconds with a precision that suits the magnitude (`0.84`, `12.3`, `1204`).
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A rate (req/s, tok/s) with a precision that suits the magnitude.
pub fn rate(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A swept value (`4`, `0.5`, `unlimited` for an infinite request rate).
pub fn load(v: f64) -> String {
    if v.is_infinite() {
        return "unlimited".to_owned();
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// `value` or `value ± std` using `f` for both parts; `–` when absent.
pub fn figure(fig: Figure, f: fn(f64) -> String) -> String {
    match (fig.value, fig.std) {
        (None, _) => "–".to_owned(),
        (Some(v), Some(s)) => format!("{} ± {}", f(v), f(s)),
        (Some(v), None) => f(v),
    }
}

/// An optional value using `f`; `–` when absent.
pub fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_owned(), f)
}

/// Escapes text for HTML element content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for a Markdown table cell (pipes and line breaks would break the row).
pub fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A name usable inside an HTML id (`A`, `point-3`, `llama-3-1-8b`).
pub fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut dash = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
            dash = false;
        } else if !dash && !out.is_empty() {
            out.push('-');
            dash = true;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push('x');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magnitudes_pick_their_precision() {
        assert_eq!(ms(0.8421), "0.84");
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(1204.4), "1204");
        assert_eq!(rate(4.891), "4.89");
        assert_eq!(rate(625.47), "625");
        assert_eq!(load(f64::INFINITY), "unlimited");
        assert_eq!(load(0.5), "0.5");
        assert_eq!(load(8.0), "8");
    }

    #[test]
    fn figures_show_spread_only_for_repeats() {
        let one = Figure::single(Some(12.34));
        assert_eq!(figure(one, ms), "12.3");
        let rep = Figure {
            value: Some(12.34),
            std: Some(0.5),
        };
        assert_eq!(figure(rep, ms), "12.3 ± 0.50");
        assert_eq!(figure(Figure::default(), ms), "–");
    }

    #[test]
    fn escaping_and_slugs() {
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(md_cell("a|b\nc"), "a\\|b c");
        assert_eq!(slug("Llama 3.1 (8B)"), "Llama-3-1-8B");
        assert_eq!(slug("--"), "x");
    }
}
