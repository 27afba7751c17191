//! LoRA adapters (`--lora-modules`, `--lora-assignment`): which adapter each request names as
//! its `model`. vLLM's client picks one at random per request (vllm/benchmarks/serve.py,
//! `random.choice(lora_modules)`); servebench adds weights and a round-robin order, both
//! deterministic with `--seed`, and keeps each request's adapter in its record.
//!
//! The assignment is by request id, so the shards of one schedule agree on it.

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use servebench_loadgen::Prepared;

use super::args::{LoraAssignment, RunArgs};

/// Keeps the adapters' random stream apart from the dataset's, which uses the same seed.
const STREAM: u64 = 0x4c6f_5241;

/// One adapter and its share of the requests.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraModule {
    pub name: String,
    pub weight: f64,
}

/// The adapters of a run and how requests are spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraPlan {
    pub modules: Vec<LoraModule>,
    pub assignment: LoraAssignment,
}

impl LoraPlan {
    /// The flags back (`NAME:WEIGHT`, weight left out when it is 1).
    pub fn flags(&self) -> Vec<String> {
        self.modules
            .iter()
            .map(|m| {
                if m.weight == 1.0 {
                    m.name.clone()
                } else {
                    format!("{}:{}", m.name, m.weight)
                }
            })
            .collect()
    }

    /// The adapter (index into `modules`) of each request id `0..n`.
    pub fn assign(&self, n: usize, seed: u64) -> Vec<usize> {
        let weights: Vec<f64> = self.modules.iter().map(|m| m.weight).collect();
        let total: f64 = weights.iter().sum();
        match self.assignment {
            LoraAssignment::Random => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ STREAM);
                (0..n)
                    .map(|_| {
                        let mut x = rng.random::<f64>() * total;
                        for (i, w) in weights.iter().enumerate() {
                            if x < *w {
                                return i;
                            }
                            x -= w;
                        }
                        weights.len() - 1
                    })
                    .collect()
            }
            // Smooth weighted round-robin (as nginx balances upstreams): each adapter gets its
            // share, interleaved rather than in runs; equal weights give 0, 1, 2, 0, 1, 2, ...
            LoraAssignment::RoundRobin => {
                let mut current = vec![0.0; weights.len()];
                (0..n)
                    .map(|_| {
                        let mut best = 0;
                        for (i, w) in weights.iter().enumerate() {
                            current[i] += w;
                            if current[i] > current[best] {
                                best = i;
                            }
                        }
                        current[best] -= total;
                        best
                    })
                    .collect()
            }
        }
    }

    /// The adapter name of request `id` under this plan (`n` requests in the schedule).
    pub fn name_of(&self, assigned: &[usize], id: u64) -> Option<&str> {
        let i = *assigned.get(usize::try_from(id).ok()?)?;
        self.modules.get(i).map(|m| m.name.as_str())
    }
}

/// The LoRA part of a plan, or `None` without `--lora-modules`.
pub fn plan(a: &RunArgs) -> Result<Option<LoraPlan>> {
    if a.lora_modules.is_empty() {
        if a.lora_assignment.is_some() {
            bail!("--lora-assignment spreads requests over --lora-modules: give the adapters");
        }
        return Ok(None);
    }
    if a.multi_turn {
        bail!(
            "--lora-modules cannot be combined with --multi-turn: a conversation keeps one model"
        );
    }
    if a.dataset_name == super::args::DatasetName::TimedTrace {
        bail!("--lora-modules cannot be combined with --dataset-name timed_trace (its prompts are built while the run goes)");
    }
    let mut modules: Vec<LoraModule> = Vec::new();
    for spec in &a.lora_modules {
        let (name, weight) = match spec.rsplit_once(':') {
            Some((n, w)) => {
                let w: f64 = w.trim().parse().with_context(|| {
                    format!("--lora-modules {spec}: the weight after ':' must be a number")
                })?;
                (n.trim(), w)
            }
            None => (spec.trim(), 1.0),
        };
        if name.is_empty() {
            bail!("--lora-modules {spec}: the adapter name is empty");
        }
        if !(weight.is_finite() && weight > 0.0) {
            bail!("--lora-modules {spec}: the weight must be a positive number");
        }
        if modules.iter().any(|m| m.name == name) {
            bail!("--lora-modules names {name} twice");
        }
        modules.push(LoraModule {
            name: name.to_owned(),
            weight,
        });
    }
    Ok(Some(LoraPlan {
        modules,
        assignment: a.lora_assignment.unwrap_or(LoraAssignment::Random),
    }))
}

/// The prepared requests with each one's adapter as its `model` (and in its record).
pub fn apply(lora: &LoraPlan, seed: u64, prepared: Vec<Prepared>) -> Result<Vec<Prepared>> {
    let n = prepared.iter().map(|p| p.id + 1).max().unwrap_or(0) as usize;
    let assigned = lora.assign(n, seed);
    prepared
        .into_iter()
        .map(|mut p| {
            let name = lora
                .name_of(&assigned, p.id)
                .context("a request outside the schedule")?
                .to_owned();
            let mut body: serde_json::Value =
                serde_json::from_slice(&p.body).context("a request body that is not JSON")?;
            if let Some(o) = body.as_object_mut() {
                o.insert("model".into(), serde_json::Value::from(name.clone()));
            }
            p.body = serde_json::to_vec(&body)
                .context("serializing a request body")?
                .into();
            p.lora = Some(name);
            Ok(p)
        })
        .collect()
}

/// Each request's adapter as the simulator's engine numbers it (its `--lora-modules`, from
/// 1), for a virtual-time run; an adapter the simulator does not serve is refused before the
/// run, as its server answers 404.
pub fn engine_ids(
    sim: &servebench_sim::ResolvedSim,
    lora: Option<&(&LoraPlan, Vec<usize>)>,
    requests: &[servebench_workload::RequestSpec],
) -> Result<Vec<Option<u32>>> {
    let Some((plan, assigned)) = lora else {
        return Ok(vec![None; requests.len()]);
    };
    for m in &plan.modules {
        if !sim.lora_modules.contains(&m.name) {
            bail!(
                "the simulator serves no LoRA adapter named {}: add --lora-modules {} to --sim (it serves: {})",
                m.name,
                m.name,
                if sim.lora_modules.is_empty() {
                    "none".to_owned()
                } else {
                    sim.lora_modules.join(", ")
                }
            );
        }
    }
    Ok(requests
        .iter()
        .map(|r| {
            let name = plan.name_of(assigned, r.id)?;
            let i = sim.lora_modules.iter().position(|n| n == name)?;
            u32::try_from(i + 1).ok()
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plan_of(flags: &[&str]) -> Result<Option<LoraPlan>> {
        plan(&RunArgs::from_flags(flags).map_err(anyhow::Error::msg)?)
    }

    #[test]
    fn names_and_weights_are_read_and_checked() {
        let p = plan_of(&["--lora-modules", "a", "b:3"]).unwrap().unwrap();
        assert_eq!(
            p.modules[0],
            LoraModule {
                name: "a".into(),
                weight: 1.0
            }
        );
        assert_eq!(p.modules[1].weight, 3.0);
        assert_eq!(p.assignment, LoraAssignment::Random);
        assert_eq!(p.flags(), vec!["a", "b:3"]);
        for bad in [
            &["--lora-modules", "a:x"][..],
            &["--lora-modules", "a:0"],
            &["--lora-modules", "a", "a"],
            &["--lora-assignment", "random"],
        ] {
            assert!(plan_of(bad).is_err(), "{bad:?}");
        }
        assert!(plan_of(&[]).unwrap().is_none());
    }

    #[test]
    fn round_robin_interleaves_in_proportion() {
        let p = plan_of(&[
            "--lora-modules",
            "a",
            "b",
            "--lora-assignment",
            "round-robin",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(p.assign(6, 0), vec![0, 1, 0, 1, 0, 1]);
        let w = plan_of(&[
            "--lora-modules",
            "a:2",
            "b",
            "--lora-assignment",
            "round-robin",
        ])
        .unwrap()
        .unwrap();
        let got = w.assign(9, 0);
        assert_eq!(got.iter().filter(|&&i| i == 0).count(), 6);
        assert_eq!(&got[..3], &[0, 1, 0]);
    }

    #[test]
    fn random_is_weighted_and_seeded() {
        let p = plan_of(&["--lora-modules", "a:3", "b"]).unwrap().unwrap();
        let got = p.assign(4000, 7);
        assert_eq!(got, p.assign(4000, 7));
        assert_ne!(got, p.assign(4000, 8));
        let a = got.iter().filter(|&&i| i == 0).count() as f64 / 4000.0;
        assert!((a - 0.75).abs() < 0.03, "{a}");
    }
}
