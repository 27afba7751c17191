//! From one run's records to fit observations: the engine's step timeline rebuilt as far as
//! the records allow.
//!
//! Every token event ends an engine step, so the step ends are the run's event times (events
//! closer than the clock tolerance are one step). A request decodes in every step from its
//! first token to its last, on a context of its prompt plus the tokens it had received; its
//! prompt (less cached tokens) is prefilled in the steps that end up to its first token, in
//! chunks of the step budget left after the decodes, the last chunk sampling. A request that
//! arrived while a step was running waits for it; one that arrived on an idle engine starts at
//! once, and its chunks before the first token, when no event marks them, are steps of its
//! own. TTFT observations span a request's prefill steps; inter-token gaps span the steps
//! between two events.

// Steps are addressed by index across several parallel vectors.
#![allow(clippy::needless_range_loop)]

use servebench_metrics::RequestRecord;
use servebench_roofline::{Deployment, SeqWork};

use super::fit::{Dataset, Metric, Observation, StepWork};

/// A request as the reconstruction sees it.
struct Req {
    sent: u64,
    first: u64,
    end: u64,
    events: Vec<u64>,
    input: u32,
    prefill: u32,
    tokens_per_event: f64,
}

/// How one run's step timeline was rebuilt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rebuilt {
    /// Requests used (successful, with a first token).
    pub requests: usize,
    /// Steps the timeline holds.
    pub steps: usize,
    /// Output tokens per token event (above 1: the server sent several per event).
    pub tokens_per_event: f64,
}

/// Adds one run's steps and observations (tagged `run`) to `data`. `budget` is the step token
/// budget; `tolerance_ns` merges events into one step end.
pub fn add_run(
    data: &mut Dataset,
    run: usize,
    records: &[RequestRecord],
    deployment: &Deployment,
    budget: u32,
    tolerance_ns: u64,
) -> Rebuilt {
    let reqs: Vec<Req> = records
        .iter()
        .filter(|r| r.failure.is_none())
        .filter_map(|r| {
            let first = r.first_token?;
            let mut events: Vec<u64> = r.events.iter().map(|e| e.t).collect();
            events.sort_unstable();
            let end = *events.last()?;
            let input = u32::try_from(r.input_tokens).unwrap_or(u32::MAX);
            let cached = u32::try_from(r.cached_tokens.unwrap_or(0)).unwrap_or(0);
            let tokens_per_event = (r.output_tokens as f64 / events.len() as f64).max(1.0);
            Some(Req {
                sent: r.sent,
                first,
                end,
                events,
                input,
                prefill: input.saturating_sub(cached).max(1),
                tokens_per_event,
            })
        })
        .collect();
    let mut rebuilt = Rebuilt {
        requests: reqs.len(),
        steps: 0,
        tokens_per_event: 1.0,
    };
    if reqs.is_empty() {
        return rebuilt;
    }
    rebuilt.tokens_per_event =
        reqs.iter().map(|r| r.tokens_per_event).sum::<f64>() / reqs.len() as f64;

    // Step ends: clusters of event times, each represented by its last time.
    let mut times: Vec<u64> = reqs.iter().flat_map(|r| r.events.iter().copied()).collect();
    times.push(0);
    times.sort_unstable();
    times.dedup();
    let mut starts: Vec<u64> = Vec::new();
    let mut ends: Vec<u64> = Vec::new();
    for &t in times.iter().skip(1) {
        match (starts.last(), ends.last_mut()) {
            (Some(&s), Some(e)) if t - s <= tolerance_ns => *e = t,
            _ => {
                starts.push(t);
                ends.push(t);
            }
        }
    }
    let step_of = |t: u64| -> usize {
        // The last cluster starting at or before t.
        starts.partition_point(|&s| s <= t).saturating_sub(1)
    };

    let n_steps = ends.len();
    let mut plans: Vec<Vec<SeqWork>> = vec![Vec::new(); n_steps];
    let first_step: Vec<usize> = reqs.iter().map(|r| step_of(r.first)).collect();
    let last_step: Vec<usize> = reqs.iter().map(|r| step_of(r.end)).collect();

    // Decodes: every step after the first token up to the last.
    for (i, r) in reqs.iter().enumerate() {
        let mut seen = 0usize;
        for s in first_step[i] + 1..=last_step[i] {
            while seen < r.events.len() && step_of(r.events[seen]) < s {
                seen += 1;
            }
            let out = (seen as f64 * r.tokens_per_event).round() as u32;
            plans[s].push(SeqWork {
                new_tokens: 1,
                context: r.input + out.saturating_sub(1),
                samples: true,
            });
        }
    }

    // When each step started: right after the previous one while any request was in flight,
    // else when the arrival that woke the idle engine was sent.
    let step_start: Vec<u64> = (0..n_steps)
        .map(|s| {
            let woke = |after: Option<u64>| {
                reqs.iter()
                    .map(|r| r.sent)
                    .filter(|&t| after.is_none_or(|p| t > p) && t <= ends[s])
                    .min()
            };
            if s == 0 {
                return woke(None).unwrap_or(ends[0]);
            }
            let prev = ends[s - 1];
            let busy = reqs
                .iter()
                .any(|r| r.sent <= prev + tolerance_ns && r.end > prev + tolerance_ns);
            if busy {
                prev
            } else {
                woke(Some(prev)).unwrap_or(prev)
            }
        })
        .collect();

    // Prefill chunks, as vLLM's scheduler hands them out: decodes first, then waiting
    // prompts in arrival order fill the rest of the budget; a prompt's last chunk is in the
    // step that produced its first token. What does not fit that step ran in steps before it
    // that no event marks (an idle engine working through a long prompt).
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by_key(|&i| (reqs[i].sent, i));
    let eligible_from: Vec<usize> = reqs
        .iter()
        .map(|r| {
            step_start
                .partition_point(|&t| t + tolerance_ns < r.sent)
                .min(n_steps - 1)
        })
        .collect();
    let mut remaining: Vec<u32> = reqs.iter().map(|r| r.prefill).collect();
    let mut hidden_of: Vec<Vec<u32>> = vec![Vec::new(); reqs.len()];
    let mut hidden: Vec<StepWork> = Vec::new();
    for s in 0..n_steps {
        let mut free = budget.saturating_sub(plans[s].len() as u32);
        for &i in &order {
            let r = &reqs[i];
            let f = first_step[i].max(eligible_from[i]);
            if remaining[i] == 0 || s < eligible_from[i] || s > f {
                continue;
            }
            let mut q = if s == f {
                remaining[i]
            } else {
                // It did not finish before its first token came out: keep a token back.
                free.min(remaining[i] - 1)
            };
            if q == 0 {
                continue;
            }
            if s == f && q > free.max(1) {
                // Steps of budget-sized chunks ahead of this one.
                let mut ahead = q - free.max(1);
                while ahead > 0 {
                    let c = ahead.min(budget.max(1));
                    let work = SeqWork {
                        new_tokens: c,
                        context: r.input - remaining[i],
                        samples: false,
                    };
                    let t = deployment.step_time(std::slice::from_ref(&work));
                    hidden_of[i].push((n_steps + hidden.len()) as u32);
                    hidden.push(work_of(deployment, &t, 1));
                    remaining[i] -= c;
                    ahead -= c;
                }
                q = remaining[i];
            }
            plans[s].push(SeqWork {
                new_tokens: q,
                context: r.input - remaining[i],
                samples: q == remaining[i],
            });
            remaining[i] -= q;
            free = free.saturating_sub(q);
        }
    }
    let ttft_spans: Vec<Option<(u64, Vec<u32>)>> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (e, f) = (eligible_from[i], first_step[i].max(eligible_from[i]));
            let start = step_start[e].max(r.sent);
            let mut span = hidden_of[i].clone();
            span.extend((e..=f).map(|s| s as u32));
            (r.first > start).then(|| (r.first - start, span))
        })
        .collect();

    for plan in &plans {
        let t = deployment.step_time(plan);
        data.steps
            .push(work_of(deployment, &t, plan.len().max(1) as u32));
    }
    let base = data.steps.len() - n_steps;
    data.steps.extend(hidden);
    let offset = |s: u32| s + base as u32;
    rebuilt.steps = n_steps;

    for (i, r) in reqs.iter().enumerate() {
        if let Some((observed, span)) = &ttft_spans[i] {
            data.observations.push(Observation {
                metric: Metric::Ttft,
                run,
                request: i,
                observed: *observed as f64 * 1e-9,
                steps: span.iter().map(|&s| offset(s)).collect(),
                weight: 1.0,
                class_size: 1,
            });
        }
        for pair in r.events.windows(2) {
            let (s0, s1) = (step_of(pair[0]), step_of(pair[1]));
            if s1 <= s0 || pair[1] <= pair[0] {
                continue;
            }
            data.observations.push(Observation {
                metric: Metric::Itl,
                run,
                request: i,
                observed: (pair[1] - pair[0]) as f64 * 1e-9,
                steps: (s0 + 1..=s1).map(|s| offset(s as u32)).collect(),
                weight: 1.0,
                class_size: 1,
            });
        }
    }
    data.balance_weights();
    rebuilt
}

fn work_of(d: &Deployment, t: &servebench_roofline::StepTime, requests: u32) -> StepWork {
    StepWork {
        t_c0: t.flops / d.peak_flops(),
        t_m0: t.bytes / d.peak_bandwidth(),
        requests: f64::from(requests),
        t_ar: t.t_ar,
    }
}
