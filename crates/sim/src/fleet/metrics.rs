//! `/metrics` of a fleet: every engine's series, labelled with its `pool` and `replica` (and a
//! fleet-wide `engine` index), under one HELP/TYPE header per metric as the exposition format
//! requires.

use crate::prometheus::{encode_labelled, MetricsView};

/// Merges per-engine pages: a family's header comes from the first page, then the samples of
/// every page in order. Families keep the first page's order.
pub fn merge_pages(pages: &[String]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    for page in pages {
        let mut current: Option<String> = None;
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default().to_owned();
                let entry = families.entry(name.clone()).or_insert_with(|| {
                    order.push(name.clone());
                    (String::new(), String::new())
                });
                if entry.0.is_empty() {
                    entry.0.push_str(line);
                    entry.0.push('\n');
                }
                current = Some(name);
                continue;
            }
            let Some(name) = &current else {
                continue;
            };
            let Some(entry) = families.get_mut(name) else {
                continue;
            };
            if line.starts_with("# TYPE ") {
                if !entry.0.contains("# TYPE ") {
                    entry.0.push_str(line);
                    entry.0.push('\n');
                }
            } else {
                entry.1.push_str(line);
                entry.1.push('\n');
            }
        }
    }
    let mut out = String::with_capacity(pages.iter().map(String::len).sum());
    for name in order {
        if let Some((head, samples)) = families.get(&name) {
            out.push_str(head);
            out.push_str(samples);
        }
    }
    out
}

/// One labelled page per engine: `(pool, replica, view)`, the faults counted on the first.
pub fn render(engines: &[(String, String, MetricsView<'_>)]) -> String {
    let pages: Vec<String> = engines
        .iter()
        .enumerate()
        .map(|(i, (pool, replica, view))| {
            let mut v = *view;
            if i > 0 {
                v.faults = [0; 4];
            }
            encode_labelled(
                &v,
                &i.to_string(),
                &[("pool", pool.clone()), ("replica", replica.clone())],
            )
        })
        .collect();
    merge_pages(&pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_merged_under_one_header() {
        let a = "# HELP x help\n# TYPE x gauge\nx{pool=\"a\"} 1.0\n# HELP y h\n# TYPE y counter\ny_total{pool=\"a\"} 2.0\n";
        let b = "# HELP x help\n# TYPE x gauge\nx{pool=\"b\"} 3.0\n# HELP y h\n# TYPE y counter\ny_total{pool=\"b\"} 4.0\n";
        let m = merge_pages(&[a.to_owned(), b.to_owned()]);
        assert_eq!(
            m,
            "# HELP x help\n# TYPE x gauge\nx{pool=\"a\"} 1.0\nx{pool=\"b\"} 3.0\n# HELP y h\n# TYPE y counter\ny_total{pool=\"a\"} 2.0\ny_total{pool=\"b\"} 4.0\n"
        );
    }
}
