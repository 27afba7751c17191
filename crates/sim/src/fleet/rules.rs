//! Routing rules by request shape (`--route "prompt_tokens>=4096 -> long"`) and the checks that
//! refuse a rule set before the run: a rule that can never match, and a request length that
//! reaches a pool too short for it.

use crate::SimError;

/// The request property a rule tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    PromptTokens,
    MaxTokens,
}

impl Field {
    fn as_str(self) -> &'static str {
        match self {
            Field::PromptTokens => "prompt_tokens",
            Field::MaxTokens => "max_tokens",
        }
    }
}

/// One parsed rule: `field` within `[lo, hi]` (inclusive) goes to pool `pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRule {
    pub field: Field,
    pub lo: u64,
    pub hi: u64,
    pub pool_name: String,
    /// Index into the fleet's pools, set when the fleet resolves.
    pub pool: usize,
    /// The rule as written, for messages.
    pub text: String,
}

impl RouteRule {
    /// Parses `FIELD OP VALUE -> POOL`.
    pub fn parse(text: &str) -> Result<RouteRule, SimError> {
        let bad = |why: &str| {
            SimError::Config(format!(
                "--route '{text}': {why} (expected e.g. \"prompt_tokens>=4096 -> long\")"
            ))
        };
        let (cond, pool) = text.split_once("->").ok_or_else(|| bad("no '->'"))?;
        let pool = pool.trim();
        if pool.is_empty() {
            return Err(bad("no pool after '->'"));
        }
        let cond = cond.trim();
        let (field, rest) = if let Some(r) = cond.strip_prefix("prompt_tokens") {
            (Field::PromptTokens, r)
        } else if let Some(r) = cond.strip_prefix("max_tokens") {
            (Field::MaxTokens, r)
        } else {
            return Err(bad("the field must be prompt_tokens or max_tokens"));
        };
        let rest = rest.trim_start();
        let (op, value) = [">=", "<=", "==", ">", "<"]
            .iter()
            .find_map(|op| rest.strip_prefix(op).map(|v| (*op, v.trim())))
            .ok_or_else(|| bad("the operator must be >=, >, <=, < or =="))?;
        let v: u64 = value
            .parse()
            .map_err(|_| bad(&format!("'{value}' is not a whole number")))?;
        let (lo, hi) = match op {
            ">=" => (v, u64::MAX),
            ">" => (v.saturating_add(1), u64::MAX),
            "<=" => (0, v),
            "<" => {
                if v == 0 {
                    (1, 0)
                } else {
                    (0, v - 1)
                }
            }
            _ => (v, v),
        };
        Ok(RouteRule {
            field,
            lo,
            hi,
            pool_name: pool.to_owned(),
            pool: 0,
            text: text.trim().to_owned(),
        })
    }

    /// Whether a request of this shape matches.
    pub fn matches(&self, prompt_tokens: u64, max_tokens: u64) -> bool {
        let v = match self.field {
            Field::PromptTokens => prompt_tokens,
            Field::MaxTokens => max_tokens,
        };
        self.lo <= v && v <= self.hi
    }
}

/// The pool of a request: the first matching rule's, else `default`.
pub fn route(rules: &[RouteRule], default: usize, prompt_tokens: u64, max_tokens: u64) -> usize {
    rules
        .iter()
        .find(|r| r.matches(prompt_tokens, max_tokens))
        .map_or(default, |r| r.pool)
}

/// Inclusive intervals, sorted and disjoint.
#[derive(Debug, Clone)]
struct Intervals(Vec<(u64, u64)>);

impl Intervals {
    fn intersect(&self, lo: u64, hi: u64) -> Intervals {
        Intervals(
            self.0
                .iter()
                .filter_map(|&(a, b)| {
                    let (a, b) = (a.max(lo), b.min(hi));
                    (a <= b).then_some((a, b))
                })
                .collect(),
        )
    }

    fn remove(&mut self, lo: u64, hi: u64) {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b < lo || a > hi {
                out.push((a, b));
                continue;
            }
            if a < lo {
                out.push((a, lo - 1));
            }
            if b > hi {
                out.push((hi + 1, b));
            }
        }
        self.0 = out;
    }

    fn max(&self) -> Option<u64> {
        self.0.last().map(|&(_, b)| b)
    }
}

/// Refuses rules that can never match and pools that some request length reaches but cannot
/// hold. `max_model_len` bounds every request the endpoint accepts; `pool_limits[i]` is pool
/// `i`'s own `max_model_len`.
pub fn check(
    rules: &[RouteRule],
    default: usize,
    names: &[String],
    max_model_len: u32,
    pool_limits: &[u32],
) -> Result<(), SimError> {
    let longest = u64::from(max_model_len.saturating_sub(1)).max(1);
    let mut prompt_left = Intervals(vec![(1, longest)]);
    let mut max_left = Intervals(vec![(1, longest)]);
    let fits = |pool: usize, reaching: &Intervals, why: &str| -> Result<(), SimError> {
        let Some(top) = reaching.max() else {
            return Ok(());
        };
        let limit = u64::from(pool_limits.get(pool).copied().unwrap_or(0));
        if top >= limit {
            return Err(SimError::Config(format!(
                "{why} sends prompts of up to {top} tokens to pool '{}', whose max_model_len is {limit}: those requests could reach no pool that can serve them",
                names.get(pool).map_or("?", String::as_str)
            )));
        }
        Ok(())
    };
    for r in rules {
        let left = match r.field {
            Field::PromptTokens => &mut prompt_left,
            Field::MaxTokens => &mut max_left,
        };
        if left.intersect(r.lo, r.hi).0.is_empty() {
            return Err(SimError::Config(format!(
                "--route '{}' can never match: {} is between 1 and {longest} here{}",
                r.text,
                r.field.as_str(),
                if left.0.len() == 1 && left.0[0] == (1, longest) {
                    ""
                } else {
                    ", and earlier rules already take every value it names"
                }
            )));
        }
        left.remove(r.lo, r.hi);
        let reaching = match r.field {
            Field::PromptTokens => prompt_left_snapshot(rules, r, longest),
            // Any prompt still unclaimed may carry a matching max_tokens.
            Field::MaxTokens => prompt_left.clone(),
        };
        fits(r.pool, &reaching, &format!("--route '{}'", r.text))?;
    }
    fits(default, &prompt_left, "the default pool")
}

/// Prompt lengths that reach rule `r` (a prompt_tokens rule): its range minus every earlier
/// prompt_tokens rule's.
fn prompt_left_snapshot(rules: &[RouteRule], r: &RouteRule, longest: u64) -> Intervals {
    let mut left = Intervals(vec![(1, longest)]);
    for e in rules {
        if std::ptr::eq(e, r) {
            break;
        }
        if e.field == Field::PromptTokens {
            left.remove(e.lo, e.hi);
        }
    }
    left.intersect(r.lo, r.hi)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rules(texts: &[&str], names: &[&str]) -> Vec<RouteRule> {
        texts
            .iter()
            .map(|t| {
                let mut r = RouteRule::parse(t).unwrap();
                r.pool = names.iter().position(|n| *n == r.pool_name).unwrap();
                r
            })
            .collect()
    }

    #[test]
    fn rules_parse_and_route_by_length() {
        let names = ["chat", "long"];
        let rs = rules(&["prompt_tokens >= 4096 -> long"], &names);
        assert_eq!(route(&rs, 0, 100, 10), 0);
        assert_eq!(route(&rs, 0, 4096, 10), 1);
        let rs = rules(&["max_tokens<16->long"], &names);
        assert_eq!(route(&rs, 0, 100, 15), 1);
        assert_eq!(route(&rs, 0, 100, 16), 0);
        for bad in [
            "prompt_tokens >= 10",
            "tokens > 3 -> a",
            "prompt_tokens ~ 3 -> a",
            "prompt_tokens > x -> a",
            "prompt_tokens > 3 ->",
        ] {
            assert!(RouteRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rule_that_can_never_match_is_refused() {
        let names: Vec<String> = ["chat", "long"].map(String::from).to_vec();
        let n = ["chat", "long"];
        let never = rules(&["prompt_tokens >= 9000 -> long"], &n);
        let e = check(&never, 0, &names, 8192, &[8192, 8192]).unwrap_err();
        assert!(e.to_string().contains("can never match"), "{e}");
        let shadowed = rules(
            &[
                "prompt_tokens >= 1000 -> long",
                "prompt_tokens >= 2000 -> chat",
            ],
            &n,
        );
        let e = check(&shadowed, 0, &names, 8192, &[8192, 8192]).unwrap_err();
        assert!(e.to_string().contains("earlier rules"), "{e}");
        let ok = rules(&["prompt_tokens >= 1000 -> long"], &n);
        check(&ok, 0, &names, 8192, &[8192, 8192]).unwrap();
    }

    #[test]
    fn a_length_no_pool_can_hold_is_refused() {
        let names: Vec<String> = ["chat", "long"].map(String::from).to_vec();
        let n = ["chat", "long"];
        // Prompts of 2048..4095 tokens go to chat, which holds only 2048.
        let rs = rules(&["prompt_tokens >= 4096 -> long"], &n);
        let e = check(&rs, 0, &names, 32768, &[2048, 32768]).unwrap_err();
        assert!(e.to_string().contains("pool 'chat'"), "{e}");
        let rs = rules(&["prompt_tokens >= 2000 -> long"], &n);
        check(&rs, 0, &names, 32768, &[2048, 32768]).unwrap();
    }
}
