//! `servebench k8s job`: a Kubernetes Indexed Job whose pods each send one shard of one
//! schedule (`run --shards N`, the index from `JOB_COMPLETION_INDEX`), all starting at one
//! wall-clock instant; `servebench merge` joins their results (docs/kubernetes.md).

mod yaml;

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

/// Arguments of `servebench k8s`.
#[derive(Debug, Clone, Args)]
pub struct K8sArgs {
    #[command(subcommand)]
    pub command: K8sCommand,
}

/// The `k8s` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum K8sCommand {
    /// Print an Indexed Job manifest that runs one schedule split across N pods:
    /// `servebench k8s job --shards 4 --image REGISTRY/servebench:TAG -- --base-url URL ...`.
    Job(JobArgs),
}

/// Where the pods leave their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ResultsTo {
    /// Each pod prints its result files as a base64 tar.gz block at the end of its log,
    /// collected with `kubectl logs` (no storage needed).
    Stdout,
    /// A PersistentVolumeClaim (ReadWriteMany) mounted at /results, named by --pvc.
    Pvc,
}

/// Manifest format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestFormat {
    Yaml,
    Json,
}

/// Arguments of `servebench k8s job`.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// Pods (shards) the schedule is split across: completions = parallelism = N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub shards: u32,
    /// Container image holding the servebench binary (the repository's Dockerfile builds it).
    #[arg(long, default_value = concat!("servebench:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// Job name (also the results folder's name).
    #[arg(long, default_value = "servebench")]
    pub name: String,
    /// Namespace of the Job (omitted: kubectl's current namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Seconds from now to the shared start instant: long enough for the image to be pulled
    /// and every pod scheduled (a pod later than 1 s refuses to run).
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub start_in: u64,
    /// The shared start instant instead (RFC 3339 or Unix seconds), e.g. to render once and
    /// apply at a known time.
    #[arg(long, value_name = "WHEN", conflicts_with = "start_in")]
    pub start_at: Option<String>,
    /// Where results go.
    #[arg(long, value_enum, default_value = "stdout")]
    pub results: ResultsTo,
    /// The PersistentVolumeClaim for `--results pvc`.
    #[arg(long, value_name = "CLAIM")]
    pub pvc: Option<String>,
    /// The API key from a Secret, as NAME or NAME:KEY (key defaults to OPENAI_API_KEY); an API
    /// key never appears in the manifest itself.
    #[arg(long, value_name = "NAME[:KEY]")]
    pub api_key_secret: Option<String>,
    /// CPU each pod requests (and is limited to).
    #[arg(long, default_value = "2")]
    pub cpu: String,
    /// Memory each pod requests (and is limited to).
    #[arg(long, default_value = "2Gi")]
    pub memory: String,
    /// Spread the pods over nodes (one per node where possible), so no two shards share a NIC.
    #[arg(long)]
    pub spread: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "yaml")]
    pub output: ManifestFormat,
    /// `servebench run` flags for the whole schedule (after `--`): the target, workload and
    /// traffic. --shards, --start-at and --output-dir are set by the Job.
    #[arg(last = true, required = true, value_name = "RUN_FLAGS")]
    pub run: Vec<String>,
}

/// `servebench k8s`.
pub fn k8s(args: K8sArgs) -> Result<ExitCode> {
    match args.command {
        K8sCommand::Job(a) => {
            let manifest = job_manifest(&a, SystemTime::now())?;
            let text = match a.output {
                ManifestFormat::Yaml => yaml::to_yaml(&manifest),
                ManifestFormat::Json => {
                    serde_json::to_string_pretty(&manifest).context("serializing the manifest")?
                        + "\n"
                }
            };
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Flags the Job sets itself.
const SET_BY_JOB: &[&str] = &["--shards", "--shard", "--start-at", "--output-dir"];

/// The Indexed Job for `a`, its start instant counted from `now`.
pub fn job_manifest(a: &JobArgs, now: SystemTime) -> Result<Value> {
    check_name(&a.name)?;
    check_run_flags(&a.run)?;
    let start_at = match &a.start_at {
        Some(s) => {
            crate::run::scale_out::parse_start_at(s)?;
            s.clone()
        }
        None => {
            let at = now + Duration::from_secs(a.start_in);
            chrono::DateTime::<chrono::Utc>::from(at)
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string()
        }
    };
    let mut run: Vec<String> = vec!["servebench".into(), "run".into()];
    run.extend(a.run.iter().cloned());
    run.extend([
        "--shards".into(),
        a.shards.to_string(),
        "--start-at".into(),
        start_at.clone(),
        "--disable-tqdm".into(),
    ]);
    let (command, args): (Vec<String>, Vec<String>) = match a.results {
        ResultsTo::Pvc => {
            run.extend(["--output-dir".into(), format!("/results/{}", a.name)]);
            (run[..1].to_vec(), run[1..].to_vec())
        }
        ResultsTo::Stdout => (
            vec!["/bin/sh".into(), "-c".into()],
            vec![stdout_script(&run)],
        ),
    };
    let labels = json!({
        "app.kubernetes.io/name": "servebench",
        "app.kubernetes.io/instance": a.name,
    });
    let mut env = Vec::new();
    if let Some(secret) = &a.api_key_secret {
        let (name, key) = secret.split_once(':').unwrap_or((secret, "OPENAI_API_KEY"));
        if name.is_empty() || key.is_empty() {
            bail!("--api-key-secret {secret:?}: expected NAME or NAME:KEY");
        }
        env.push(json!({
            "name": "OPENAI_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": name, "key": key}},
        }));
    }
    let resources = json!({"cpu": a.cpu, "memory": a.memory});
    let mut container = json!({
        "name": "servebench",
        "image": a.image,
        "command": command,
        "args": args,
        "resources": {"requests": resources, "limits": resources},
    });
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "containers": [],
    });
    if !env.is_empty() {
        container["env"] = Value::Array(env);
    }
    if a.results == ResultsTo::Pvc {
        let Some(claim) = &a.pvc else {
            bail!("--results pvc needs --pvc CLAIM (a ReadWriteMany PersistentVolumeClaim)");
        };
        container["volumeMounts"] = json!([{"name": "results", "mountPath": "/results"}]);
        pod_spec["volumes"] =
            json!([{"name": "results", "persistentVolumeClaim": {"claimName": claim}}]);
    } else if a.pvc.is_some() {
        bail!("--pvc is for --results pvc");
    }
    if a.spread {
        pod_spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels},
        }]);
    }
    pod_spec["containers"] = json!([container]);
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(a.name));
    if let Some(ns) = &a.namespace {
        metadata.insert("namespace".into(), json!(ns));
    }
    metadata.insert("labels".into(), labels.clone());
    metadata.insert(
        "annotations".into(),
        json!({"servebench/start-at": start_at, "servebench/shards": a.shards.to_string()}),
    );
    Ok(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": a.shards,
            "parallelism": a.shards,
            // A retried pod would start after the shared instant and refuse to run.
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": pod_spec,
            },
        },
    }))
}

/// The pod's shell script in `--results stdout` mode: run into a folder of its own, then print
/// the result files as a marked base64 tar.gz block, whatever the run's exit code, so records
/// are never lost.
fn stdout_script(run: &[String]) -> String {
    let cmd: Vec<String> = run.iter().map(|a| shell_quote(a)).collect();
    format!(
        "out=\"${{TMPDIR:-/tmp}}/servebench-results-${{JOB_COMPLETION_INDEX:-0}}\"\n\
         mkdir -p \"$out\"\n\
         {} --output-dir \"$out\"; rc=$?\n\
         echo '{BEGIN_MARK}'\n\
         tar -C \"$out\" -czf - . | base64 -w0\n\
         echo\n\
         echo '{END_MARK}'\n\
         exit $rc\n",
        cmd.join(" "),
    )
}

/// The line before a pod's results block in its log.
pub const BEGIN_MARK: &str = "=== servebench results: base64 tar.gz ===";
/// The line after it.
pub const END_MARK: &str = "=== end of servebench results ===";

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A Job name is a DNS label (RFC 1123), ≤ 63 characters.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        bail!("--name {name:?}: a Job name is lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit");
    }
    Ok(())
}

/// The run flags must parse as `servebench run`, name one shared server, and leave the Job's
/// own flags (and the API key) to it.
fn check_run_flags(flags: &[String]) -> Result<()> {
    for f in flags {
        let name = f.split('=').next().unwrap_or(f);
        if SET_BY_JOB.contains(&name) {
            bail!("{name} is set by the Job itself; leave it out of the run flags");
        }
        if name == "--api-key" {
            bail!("an API key in run flags would be written into the manifest; store it in a Secret and give --api-key-secret NAME[:KEY]");
        }
    }
    let mut argv = vec!["servebench".to_owned(), "run".to_owned()];
    argv.extend(flags.iter().cloned());
    let cli = crate::try_parse_cli(&argv).context("the run flags after `--`")?;
    let crate::Command::Run { args, .. } = cli.command else {
        bail!("the flags after `--` must be `servebench run` flags");
    };
    if args.base_url.is_none() && args.host.is_none() {
        bail!("the run flags must name the server every pod loads (--base-url URL); a pod cannot share an in-process simulator");
    }
    if args.virtual_time {
        bail!("--virtual-time runs need no cluster: run it locally");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn args(extra: &[&str]) -> JobArgs {
        let mut argv = vec!["servebench", "k8s", "job", "--shards", "4"];
        argv.extend_from_slice(extra);
        argv.extend([
            "--",
            "--base-url",
            "http://vllm:8000",
            "--num-prompts",
            "100",
        ]);
        let cli = <crate::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        match cli.command {
            crate::Command::K8s(k) => match k.command {
                K8sCommand::Job(j) => j,
            },
            _ => unreachable!(),
        }
    }

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_795_543_200)
    }

    #[test]
    fn an_indexed_job_of_n_shards_starting_together() {
        let m = job_manifest(&args(&[]), at()).unwrap();
        assert_eq!(m["spec"]["completionMode"], "Indexed");
        assert_eq!(m["spec"]["completions"], 4);
        assert_eq!(m["spec"]["parallelism"], 4);
        assert_eq!(m["spec"]["backoffLimit"], 0);
        let c = &m["spec"]["template"]["spec"]["containers"][0];
        let script = c["args"][0].as_str().unwrap();
        assert!(script.contains("--shards 4"), "{script}");
        assert!(
            script.contains("--start-at 2026-11-24T18:02:00.000Z"),
            "{script}"
        );
        assert!(script.contains(BEGIN_MARK) && script.contains("exit $rc"));
        assert_eq!(c["command"][0], "/bin/sh");
    }

    #[test]
    fn pvc_mode_mounts_the_claim_and_runs_the_binary_directly() {
        let m = job_manifest(&args(&["--results", "pvc", "--pvc", "bench"]), at()).unwrap();
        let spec = &m["spec"]["template"]["spec"];
        assert_eq!(
            spec["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "bench"
        );
        let c = &spec["containers"][0];
        assert_eq!(c["command"][0], "servebench");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(args
            .windows(2)
            .any(|w| w == ["--output-dir", "/results/servebench"]));
        let e = job_manifest(&args_pvc_missing(), at())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--pvc CLAIM"), "{e}");
    }

    fn args_pvc_missing() -> JobArgs {
        args(&["--results", "pvc"])
    }

    #[test]
    fn the_api_key_comes_from_a_secret_only() {
        let m = job_manifest(&args(&["--api-key-secret", "vllm-key:token"]), at()).unwrap();
        let env = &m["spec"]["template"]["spec"]["containers"][0]["env"][0];
        assert_eq!(env["name"], "OPENAI_API_KEY");
        assert_eq!(env["valueFrom"]["secretKeyRef"]["name"], "vllm-key");
        assert_eq!(env["valueFrom"]["secretKeyRef"]["key"], "token");
        let mut a = args(&[]);
        a.run.extend(["--api-key".into(), "sk-secret".into()]);
        let e = job_manifest(&a, at()).unwrap_err().to_string();
        assert!(e.contains("Secret") && !e.contains("sk-secret"), "{e}");
    }

    #[test]
    fn flags_the_job_owns_and_bad_targets_are_refused() {
        for (extra, want) in [
            (vec!["--shards", "2"], "set by the Job"),
            (vec!["--output-dir=/x"], "set by the Job"),
            (vec!["--virtual-time"], "virtual-time"),
        ] {
            let mut a = args(&[]);
            a.run.extend(extra.iter().map(|s| s.to_string()));
            let e = job_manifest(&a, at()).unwrap_err().to_string();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
        let mut a = args(&[]);
        a.run = vec!["--num-prompts".into(), "5".into()];
        let e = job_manifest(&a, at()).unwrap_err().to_string();
        assert!(e.contains("--base-url"), "{e}");
        let mut a = args(&[]);
        a.name = "Bench_1".into();
        assert!(job_manifest(&a, at()).is_err());
    }

    #[test]
    fn shell_quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("--num-prompts"), "--num-prompts");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
