//! A reasoning model's output shape (`--reasoning-tokens`, `--reasoning-fraction`): the first
//! tokens of each chat response are thinking, sent as `reasoning_content` deltas as vLLM does
//! with a reasoning parser, and the rest is the answer. Completions have no such split.

/// How many leading output tokens of a chat response are reasoning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReasoningSplit {
    /// A fixed count (`--reasoning-tokens N`); a response shorter than that is all reasoning.
    Tokens(u32),
    /// A share of each response's output tokens (`--reasoning-fraction F`), rounded to the
    /// nearest token.
    Fraction(f64),
}

impl ReasoningSplit {
    /// Reasoning tokens of a response that generates `output_tokens` in all.
    pub fn reasoning_tokens(self, output_tokens: u32) -> u32 {
        match self {
            ReasoningSplit::Tokens(n) => n.min(output_tokens),
            ReasoningSplit::Fraction(f) => {
                // f is validated to [0, 1], so the product fits a u32.
                let n = (f * f64::from(output_tokens)).round() as u32;
                n.min(output_tokens)
            }
        }
    }

    /// Does the split depend on the response's length (so a server must know the length
    /// before streaming)?
    pub fn needs_output_len(self) -> bool {
        matches!(self, ReasoningSplit::Fraction(_))
    }

    /// The flag form, for the effective configuration.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            ReasoningSplit::Tokens(n) => serde_json::json!({ "reasoning_tokens": n }),
            ReasoningSplit::Fraction(f) => serde_json::json!({ "reasoning_fraction": f }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_cap_at_the_output_and_fractions_round() {
        assert_eq!(ReasoningSplit::Tokens(64).reasoning_tokens(100), 64);
        assert_eq!(ReasoningSplit::Tokens(64).reasoning_tokens(10), 10);
        assert_eq!(ReasoningSplit::Fraction(0.25).reasoning_tokens(100), 25);
        assert_eq!(ReasoningSplit::Fraction(0.5).reasoning_tokens(3), 2);
        assert_eq!(ReasoningSplit::Fraction(1.0).reasoning_tokens(7), 7);
        assert_eq!(ReasoningSplit::Fraction(0.0).reasoning_tokens(7), 0);
        assert!(ReasoningSplit::Fraction(0.1).needs_output_len());
        assert!(!ReasoningSplit::Tokens(1).needs_output_len());
    }
}
