//! What `-h` shows. `run` and `sim` take a hundred flags each; listed whole, `-h` fills five
//! screens and the flags a first run needs are lost among them. `-h` therefore lists the
//! flags most command lines use, and `--help` keeps every flag with its long text (clap says
//! so at the foot of `-h`).

use clap::Arg;

/// `run`: where the server is, what to send, how fast, where results go.
pub const RUN: &[&str] = &[
    "base-url",
    "host",
    "port",
    "model",
    "sim",
    "virtual-time",
    "dataset-name",
    "dataset-path",
    "num-prompts",
    "random-input-len",
    "random-output-len",
    "request-rate",
    "max-concurrency",
    "goodput",
    "save-result",
    "output-dir",
];

/// `sim`: the deployment simulated and where it listens (its subcommands are listed too).
pub const SIM: &[&str] = &[
    "gpu",
    "tensor-parallel-size",
    "dtype",
    "max-num-seqs",
    "max-model-len",
    "replicas",
    "calibration",
    "host",
    "port",
];

/// `plan`: the capacity flags and the fleet comparison's own; the workload flags `--fleet`
/// takes (those of `run`) are in `--help`.
pub const PLAN: &[&str] = &[
    "daily-requests",
    "peak-to-average",
    "headroom",
    "per-gpu-rps",
    "from",
    "gpus-per-replica",
    "gpu-hourly-cost",
    "output-tokens-per-request",
    "json",
    "fleet",
    "slo",
    "slo-requests",
];

/// For `#[command(mut_args = short_help::only(LIST))]`: every flag whose long name is not in
/// `keep` is left out of `-h` (and stays in `--help`). Positional arguments stay.
pub fn only(keep: &'static [&'static str]) -> impl FnMut(Arg) -> Arg {
    move |arg| match arg.get_long() {
        Some(long) if !keep.contains(&long) => arg.hide_short_help(true),
        _ => arg,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// A name in a list that is no flag of its command (renamed, removed) would silently
    /// shorten `-h`.
    #[test]
    fn every_listed_flag_exists() {
        let cli = crate::Cli::command();
        for (name, keep) in [
            ("run", super::RUN),
            ("sim", super::SIM),
            ("plan", super::PLAN),
        ] {
            let cmd = cli.find_subcommand(name).expect(name);
            for long in keep {
                assert!(
                    cmd.get_arguments().any(|a| a.get_long() == Some(long)),
                    "{name} has no --{long}"
                );
            }
        }
    }
}
