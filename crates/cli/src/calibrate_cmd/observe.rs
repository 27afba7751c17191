//! From one run's records to fit observations: the engine's step timeline rebuilt as far as
//! the records allow.
//!
//! Every token event ends an engine step, so the step ends are the run's event times (events
//! closer than the clock tolerance are one step). A request decodes in every step from its
//! first token to its last, on a context of its prompt plus the tokens it had received; its
//! prompt (less cached tokens) is prefilled in the steps that end up to its first token, in
//! chunks of the step budget left after the decodes, the last chunk sampling. A request that
//! arrived while a step was running waits for it, as does one sent as a busy engine's step
//! ended (the next step was planned without it); one that arrived on an idle engine starts at
//! once, and its chunks before the first token, when no event marks them, are steps of its
//! own. TTFT observations span a request's prefill steps; inter-token gaps span the steps
//! between two events.

// Steps are addressed by index across several parallel vectors.
#![allow(clippy::needless_range_loop)]

use servebench_metrics::RequestRecord;
use servebench_roofline::{Deployment, SeqWork};

use super::fit::{Dataset, Metric, Observation, StepWork};

/// Consecutive inter-token gaps observed as one on a real clock (see [`add_run`]).
const REAL_CLOCK_GAP_WINDOW: usize = 4;

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
            let input = u32::try_from(r.input_tokens).unwrap_or(u32::MAX).max(1);
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
    let mut sents: Vec<u64> = reqs.iter().map(|r| r.sent).collect();
    sents.sort_unstable();
    let mut req_ends: Vec<u64> = reqs.iter().map(|r| r.end).collect();
    req_ends.sort_unstable();
    // Busy right after the step ending at `p`: a request sent before it is still unfinished
    // (every end follows its send). One sent at `p` itself does not count: that is a send
    // the step's end caused, which an otherwise idle engine starts at once.
    let busy_after = |p: u64| {
        sents.partition_point(|&t| t < p) > req_ends.partition_point(|&t| t <= p + tolerance_ns)
    };
    // The first send in (after, until].
    let woke = |after: Option<u64>, until: u64| {
        let k = after.map_or(0, |p| sents.partition_point(|&t| t <= p));
        sents.get(k).copied().filter(|&t| t <= until)
    };
    // Whether a step followed its predecessor at once (a busy engine) or was woken by a send.
    let (step_start, busy): (Vec<u64>, Vec<bool>) = (0..n_steps)
        .map(|s| {
            if s == 0 {
                return (woke(None, ends[0]).unwrap_or(ends[0]), false);
            }
            let prev = ends[s - 1];
            if busy_after(prev) {
                (prev, true)
            } else {
                (woke(Some(prev), ends[s]).unwrap_or(prev), false)
            }
        })
        .unzip();

    // Prefill chunks, as vLLM's scheduler hands them out: decodes first, then waiting
    // prompts in arrival order fill the rest of the budget; a prompt's last chunk is in the
    // step that produced its first token. What does not fit that step ran in steps before it
    // that no event marks (an idle engine working through a long prompt).
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by_key(|&i| (reqs[i].sent, i));
    // A busy engine plans its next step the moment the last one ends, so a request sent at
    // or after that end (a closed loop's replacement, sent once the client saw its
    // predecessor's last token) waits for the step after; a woken step holds the send that
    // woke it.
    let eligible_from: Vec<usize> = reqs
        .iter()
        .map(|r| {
            let mut s = step_start.partition_point(|&t| t + tolerance_ns < r.sent);
            while s < n_steps && busy[s] && step_start[s] <= r.sent {
                s += 1;
            }
            s.min(n_steps - 1)
        })
        .collect();
    let mut remaining: Vec<u32> = reqs.iter().map(|r| r.prefill).collect();
    let mut hidden_of: Vec<Vec<u32>> = vec![Vec::new(); reqs.len()];
    let mut hidden: Vec<StepWork> = Vec::new();
    // Requests become eligible in arrival order, so a cursor over `order` and a list of the
    // ones still prefilling keep this linear in steps plus requests.
    let mut next = 0usize;
    let mut active: Vec<usize> = Vec::new();
    for s in 0..n_steps {
        while next < order.len() && eligible_from[order[next]] <= s {
            active.push(order[next]);
            next += 1;
        }
        active.retain(|&i| remaining[i] > 0 && s <= first_step[i].max(eligible_from[i]));
        let mut free = budget.saturating_sub(plans[s].len() as u32);
        for &i in &active {
            let r = &reqs[i];
            let f = first_step[i].max(eligible_from[i]);
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
        // On a real clock a token delivered late makes one gap long and the next one short
        // (down to a fraction of a step): the pair's sum is the engine's, each alone is not, and
        // a short one's relative error would swamp the fit. Gaps are observed in runs of
        // `window` consecutive ones there; in virtual time every gap is exact.
        let window = if tolerance_ns == 0 {
            1
        } else {
            REAL_CLOCK_GAP_WINDOW
        };
        let ends: Vec<u64> = r
            .events
            .iter()
            .copied()
            .step_by(window)
            .chain((r.events.len() > 1 && (r.events.len() - 1) % window != 0).then_some(r.end))
            .collect();
        for pair in ends.windows(2) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use servebench_roofline::Catalog;

    fn deployment() -> Deployment {
        let c = Catalog::builtin();
        Deployment::builder(
            c.gpu("h100").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
        )
        .build()
        .unwrap()
    }

    fn record(id: u64, sent_ms: u64, events_ms: &[u64], input: u64) -> RequestRecord {
        let ms = |t: u64| t * 1_000_000;
        let times: Vec<u64> = events_ms.iter().map(|&t| ms(t)).collect();
        RequestRecord::streamed(id, ms(sent_ms), &times, input)
    }

    #[test]
    fn a_single_stream_becomes_one_prefill_and_one_decode_step_per_gap() {
        let d = deployment();
        let mut data = Dataset::default();
        let rebuilt = add_run(
            &mut data,
            0,
            &[record(0, 5, &[15, 23, 31], 100)],
            &d,
            8192,
            0,
        );
        assert_eq!(rebuilt.requests, 1);
        assert_eq!(rebuilt.steps, 3);
        let ttft: Vec<_> = data
            .observations
            .iter()
            .filter(|o| o.metric == Metric::Ttft)
            .collect();
        assert_eq!(ttft.len(), 1);
        assert!((ttft[0].observed - 0.010).abs() < 1e-12);
        // The prefill step computes 100 new tokens; a decode step one.
        let prefill = data.steps[ttft[0].steps[0] as usize];
        let decode = data.steps[data.observations[1].steps[0] as usize];
        assert!(
            prefill.t_c0 > 90.0 * decode.t_c0,
            "{prefill:?} vs {decode:?}"
        );
        assert_eq!(data.observations.len(), 3);
        assert!((data.observations[2].observed - 0.008).abs() < 1e-12);
    }

    #[test]
    fn a_replacement_sent_as_a_step_ends_waits_for_the_step_after() {
        // Steps end every 10 ms. Request 0 ends at 20; request 1 runs on; request 2 is sent at
        // 20 (a closed loop's replacement), so the step 20–30 was planned without it and its
        // prompt is prefilled in the step 30–40 that gives its first token: the observation
        // is that step alone (10 ms), not the 20 ms since the send.
        let d = deployment();
        let mut data = Dataset::default();
        add_run(
            &mut data,
            0,
            &[
                record(0, 0, &[10, 20], 100),
                record(1, 0, &[10, 20, 30, 40, 50], 100),
                record(2, 20, &[40, 50], 100),
            ],
            &d,
            8192,
            0,
        );
        let ttft = data
            .observations
            .iter()
            .rfind(|o| o.metric == Metric::Ttft)
            .unwrap();
        assert!((ttft.observed - 0.010).abs() < 1e-12, "{ttft:?}");
        assert_eq!(ttft.steps.len(), 1, "{ttft:?}");
        let step = data.steps[ttft.steps[0] as usize];
        let decode_only = data.steps[data
            .observations
            .iter()
            .find(|o| o.metric == Metric::Itl)
            .unwrap()
            .steps[0] as usize];
        assert!(
            step.t_c0 > 20.0 * decode_only.t_c0,
            "{step:?} vs {decode_only:?}"
        );
    }

    #[test]
    fn a_prompt_longer_than_the_budget_on_an_idle_engine_gets_steps_no_event_marks() {
        let d = deployment();
        let mut data = Dataset::default();
        add_run(
            &mut data,
            0,
            &[record(0, 0, &[300, 308], 5000)],
            &d,
            2048,
            0,
        );
        let ttft = &data.observations[0];
        assert_eq!(ttft.metric, Metric::Ttft);
        // 5000 tokens in chunks of 2048: two steps before the one that samples.
        assert_eq!(ttft.steps.len(), 3);
        let total: f64 = ttft
            .steps
            .iter()
            .map(|&s| data.steps[s as usize].t_c0)
            .sum();
        let one = d.step_time(&[SeqWork {
            new_tokens: 5000,
            context: 0,
            samples: true,
        }]);
        // The chunks' compute adds up to the whole prompt's (attention is causal either way).
        assert!((total / (one.flops / d.peak_flops()) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn on_a_real_clock_gaps_are_observed_in_runs_of_four() {
        let d = deployment();
        // Steps every 10 ms; the token of the step ending at 30 arrived 8 ms late, so its gap
        // reads 18 ms and the next one 2 ms. Over four gaps the late delivery cancels out.
        let events = [10, 20, 38, 40, 50, 60, 70];
        let gaps = |tolerance_ns: u64| {
            let mut data = Dataset::default();
            add_run(
                &mut data,
                0,
                &[record(0, 0, &events, 50)],
                &d,
                8192,
                tolerance_ns,
            );
            data.observations
                .iter()
                .filter(|o| o.metric == Metric::Itl)
                .map(|o| (o.observed, o.steps.len()))
                .collect::<Vec<_>>()
        };
        let exact = gaps(0);
        assert_eq!(exact.len(), 6);
        assert!((exact[2].0 - 0.002).abs() < 1e-12, "{exact:?}");
        let real = gaps(1_000_000);
        assert_eq!(real.len(), 2, "{real:?}");
        assert!(
            (real[0].0 - 0.040).abs() < 1e-12 && real[0].1 == 4,
            "{real:?}"
        );
        // The remainder (two gaps) is one more observation, up to the last token.
        assert!(
            (real[1].0 - 0.020).abs() < 1e-12 && real[1].1 == 2,
            "{real:?}"
        );
    }

    #[test]
    fn a_request_arriving_mid_step_waits_for_it() {
        let d = deployment();
        let mut data = Dataset::default();
        // Request 1 decodes in steps ending at 10, 20, 30, 40; request 2 arrives at 12, during
        // the step ending at 20, so its prefill runs in the step ending at 30.
        let records = [
            record(0, 0, &[10, 20, 30, 40], 50),
            record(1, 12, &[30, 40], 50),
        ];
        add_run(&mut data, 0, &records, &d, 8192, 0);
        let ttft = data
            .observations
            .iter()
            .find(|o| o.metric == Metric::Ttft && o.request == 1)
            .unwrap();
        assert!((ttft.observed - 0.010).abs() < 1e-12, "{}", ttft.observed);
        assert_eq!(ttft.steps.len(), 1);
        // That step held the prefill (50 tokens) and request 1's decode.
        assert_eq!(data.steps[ttft.steps[0] as usize].requests, 2.0);
    }
}
