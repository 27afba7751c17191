//! A multi-turn run by turn index: TTFT, prompt and cached tokens as conversations grow.

use servebench_metrics::TurnStats;

use super::tables::Table;

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.decimals$}"))
}

/// One row per turn index (empty table for a run without sessions).
pub fn turn_table(turns: &[TurnStats]) -> Table {
    let columns = [
        ("Turn", true),
        ("Completed", true),
        ("Failed", true),
        ("TTFT p50 (ms)", true),
        ("TTFT p99 (ms)", true),
        ("Prompt tokens (mean)", true),
        ("Cached tokens (mean)", true),
    ];
    Table {
        headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
        numeric: columns.iter().map(|(_, n)| *n).collect(),
        rows: turns
            .iter()
            .map(|t| {
                vec![
                    t.turn.to_string(),
                    t.completed.to_string(),
                    t.failed.to_string(),
                    cell(t.ttft_p50_ms, 2),
                    cell(t.ttft_p99_ms, 2),
                    cell(t.prompt_tokens_mean, 1),
                    cell(t.cached_tokens_mean, 1),
                ]
            })
            .collect(),
    }
}

/// The terminal block of a multi-turn run; empty without sessions.
pub fn turn_block(turns: &[TurnStats]) -> String {
    if turns.is_empty() {
        return String::new();
    }
    format!(
        "{:-^50}\n{}",
        " By turn (multi-turn) ",
        turn_table(turns).to_text()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_turn_with_dashes_for_missing_figures() {
        let t = TurnStats {
            turn: 1,
            completed: 3,
            failed: 1,
            ttft_p50_ms: Some(12.345),
            ttft_p99_ms: None,
            prompt_tokens_mean: Some(100.0),
            cached_tokens_mean: None,
        };
        let table = turn_table(std::slice::from_ref(&t));
        assert_eq!(table.rows[0], ["1", "3", "1", "12.35", "-", "100.0", "-"]);
        let block = turn_block(&[t]);
        assert!(block.contains("By turn"), "{block}");
        assert!(block.contains("Cached tokens (mean)"), "{block}");
        assert!(turn_block(&[]).is_empty());
    }
}
