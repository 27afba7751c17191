//! The benchmark side of one run: `vllm bench serve …` (and `servebench run …`) run as our
//! own `servebench run` with the same flags, `servebench sweep …` as a frontier per server
//! combination, anything else as given; each pointed at the server and told where its result
//! goes.

use std::path::Path;

use crate::server_proc::port::{flag_value, PLACEHOLDER};
use crate::vllm_argv::{self, FlagSpec, Normalised};

/// What kind of benchmark a `--bench-cmd` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchKind {
    /// `vllm bench serve` or `servebench run`: one measured run writing vLLM's result JSON.
    Run,
    /// `servebench sweep`: a rate or concurrency frontier into an experiment directory.
    Frontier,
    /// Another command: run as given, with vLLM's result flags appended.
    External,
}

/// A `--bench-cmd`, classified, with its own program word(s) taken off for ours.
#[derive(Debug, Clone)]
pub struct BenchCmd {
    pub kind: BenchKind,
    /// The command as the user wrote it (recorded, and what parameters apply to).
    pub words: Vec<String>,
    /// How many leading words name the program (replaced by our binary and subcommand).
    program_words: usize,
}

fn is_servebench(word: &str) -> bool {
    Path::new(word)
        .file_name()
        .is_some_and(|n| n == "servebench")
}

impl BenchCmd {
    pub fn new(words: Vec<String>) -> BenchCmd {
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let (kind, program_words) = match w.as_slice() {
            [v, "bench", "serve", ..] if Path::new(v).file_name().is_some_and(|n| n == "vllm") => {
                (BenchKind::Run, 3)
            }
            [s, "run", ..] if is_servebench(s) => (BenchKind::Run, 2),
            [s, "sweep", ..] if is_servebench(s) => (BenchKind::Frontier, 2),
            _ => (BenchKind::External, 0),
        };
        BenchCmd {
            kind,
            words,
            program_words,
        }
    }

    /// The API key the runs send, resolved as `servebench run` resolves its `--api-key`: the
    /// flag in the command, else `OPENAI_API_KEY` (which the benchmark process inherits).
    pub fn api_key(&self) -> Option<String> {
        let words = match self.kind {
            // `--api_key` and `--api-k` are `--api-key` to the run.
            BenchKind::Run => self.run_flags(&self.words).args(),
            _ => self.words.clone(),
        };
        api_key_of(&words, std::env::var("OPENAI_API_KEY").ok())
    }

    /// A run's flags as vLLM's argument rules read them: checked once, before anything runs,
    /// so that an ambiguous abbreviation fails the sweep at once (and in `--dry-run`) rather
    /// than every run. Returns the warning for a flag the command repeats (the run keeps the
    /// last value; so does the built command).
    pub fn check_flags(&self) -> Result<Option<String>, String> {
        if self.kind != BenchKind::Run {
            return Ok(None);
        }
        let n = vllm_argv::run_spec()
            .normalise(&self.words[self.program_words..])
            .map_err(|e| e.to_string())?;
        Ok(n.duplicate_warning())
    }

    /// `words` (the program's words first) as `servebench run` reads them, each flag once.
    /// An ambiguous abbreviation (refused by `check_flags` already) is left for the run to
    /// report.
    fn run_flags(&self, words: &[String]) -> Normalised {
        let rest = words.get(self.program_words..).unwrap_or_default();
        vllm_argv::run_spec()
            .normalise(rest)
            .or_else(|_| FlagSpec::default().normalise(rest))
            .map(Normalised::keep_last)
            .unwrap_or_else(|_| unreachable!("a spec that knows no flag finds no ambiguity"))
    }

    /// The command of one run: `params` already applied to `words`; pointed at `base_url`,
    /// its result at `out` (a `run=N.json` file) and its own files in `out`'s directory.
    /// `exe` is our binary.
    pub fn argv(
        &self,
        applied: &[String],
        exe: &str,
        base_url: &str,
        port: Option<u16>,
        out: &Path,
        warmups: usize,
    ) -> Vec<String> {
        let port_text = port.map_or_else(|| PLACEHOLDER.to_owned(), |p| p.to_string());
        let filled: Vec<String> = applied
            .iter()
            .map(|a| a.replace(PLACEHOLDER, &port_text))
            .collect();
        let dir = out.parent().unwrap_or(Path::new("."));
        let file = out
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if self.kind == BenchKind::Run {
            return self.run_argv(&filled, exe, base_url, dir, &file, warmups);
        }
        let rest = filled.get(self.program_words..).unwrap_or_default();
        let names_server = flag_value(rest, &["--base-url", "--host", "--port"]).is_some();
        let mut argv = match self.kind {
            BenchKind::Frontier => vec![exe.to_owned(), "sweep".to_owned()],
            _ => Vec::new(),
        };
        // The frontier's own flags end where `--` starts its run flags.
        let split = match self.kind {
            BenchKind::Frontier => rest.iter().position(|a| a == "--").unwrap_or(rest.len()),
            _ => rest.len(),
        };
        match self.kind {
            BenchKind::Frontier => {
                // The frontier's directory is where sweep serve looks for it: ours wins.
                argv.extend(without_valued(&rest[..split], "--results-dir"));
                if !names_server {
                    argv.extend(["--base-url".to_owned(), base_url.to_owned()]);
                }
                let stem = file.trim_end_matches(".json");
                argv.extend([
                    "--results-dir".to_owned(),
                    dir.join(stem).display().to_string(),
                ]);
            }
            _ => {
                // Another program's flags are its own business: only the result flags are
                // looked for, by vLLM's names, so none is given twice.
                let mut words = without_valued(rest, "--result-dir");
                words = without_valued(&words, "--result-filename");
                let metrics = valued(&words, "--percentile-metrics").map(str::to_owned);
                words = without_valued(&words, "--percentile-metrics");
                let save = !words.iter().any(|w| dashed_name(w) == "--save-result");
                argv.extend(words);
                argv.extend(vllm_result_flags(dir, &file, metrics.as_deref(), save));
            }
        }
        argv.extend(rest[split..].iter().cloned());
        argv
    }

    /// A `servebench run`: the user's flags each once (a repeated flag at its last value, as
    /// the run would read it), then only what they leave out.
    fn run_argv(
        &self,
        filled: &[String],
        exe: &str,
        base_url: &str,
        dir: &Path,
        file: &str,
        warmups: usize,
    ) -> Vec<String> {
        let mut user = self.run_flags(filled);
        // Sweep serve reads each run's result back from DIR/run=N.json, one file per run: a
        // result directory or file name in the user's command (one name for every run, each
        // run overwriting the last) gives way to ours.
        user.remove("--result-dir");
        user.remove("--result-filename");
        // --warmup-num-prompts is sweep serve's own word on warm-ups; without it the user's
        // --num-warmups stands.
        if warmups > 0 {
            user.remove("--num-warmups");
        }
        // The user's percentile metrics are kept, with those the summary reads added.
        let metrics = user.value_of("--percentile-metrics").map(str::to_owned);
        user.remove("--percentile-metrics");
        let names_server = ["--base-url", "--host", "--port"]
            .iter()
            .any(|f| user.has(f));
        let names_output = user.has("--output-dir");
        let save = !user.has("--save-result");
        let mut argv = vec![exe.to_owned(), "run".to_owned()];
        argv.extend(user.args());
        if !names_server {
            argv.extend(["--base-url".to_owned(), base_url.to_owned()]);
        }
        if !names_output {
            argv.extend(["--output-dir".to_owned(), dir.display().to_string()]);
        }
        if warmups > 0 {
            argv.extend(["--num-warmups".to_owned(), warmups.to_string()]);
        }
        argv.extend(vllm_result_flags(dir, file, metrics.as_deref(), save));
        argv
    }
}

/// A word's flag name as vLLM reads it (`--result_dir=x` → `--result-dir`); other words as
/// they are.
fn dashed_name(word: &str) -> String {
    match word.strip_prefix("--") {
        Some(body) => format!(
            "--{}",
            body.split('=').next().unwrap_or(body).replace('_', "-")
        ),
        None => word.to_owned(),
    }
}

/// The value of a one-value flag in another program's words (under vLLM's spellings).
fn valued<'a>(words: &'a [String], flag: &str) -> Option<&'a str> {
    let i = words.iter().rposition(|w| dashed_name(w) == flag)?;
    match words[i].split_once('=') {
        Some((_, v)) => Some(v),
        None => words.get(i + 1).map(String::as_str),
    }
}

/// `words` without a one-value flag (under vLLM's spellings) and its value.
fn without_valued(words: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        if dashed_name(w) == flag {
            if !w.contains('=') {
                i += 1;
            }
            continue;
        }
        out.push(w.clone());
    }
    out
}

fn api_key_of(words: &[String], env: Option<String>) -> Option<String> {
    flag_value(words, &["--api-key"])
        .map(str::to_owned)
        .or(env)
        .filter(|k| !k.is_empty())
}

/// The metrics whose percentiles vLLM's sweep asks every run for (its summary and decision.md
/// read their p99).
const SWEEP_METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];

/// The flags vLLM's sweep adds to every benchmark run: the user's `--percentile-metrics`
/// (`given`) with the sweep's added, `--save-result` unless given (`save`), and where the
/// result goes.
fn vllm_result_flags(dir: &Path, file: &str, given: Option<&str>, save: bool) -> Vec<String> {
    let mut metrics: Vec<&str> = given
        .map(|g| {
            g.split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .collect()
        })
        .unwrap_or_default();
    for m in SWEEP_METRICS {
        if !metrics.contains(&m) {
            metrics.push(m);
        }
    }
    let mut flags = vec!["--percentile-metrics".to_owned(), metrics.join(",")];
    if save {
        flags.push("--save-result".to_owned());
    }
    flags.extend([
        "--result-dir".to_owned(),
        dir.display().to_string(),
        "--result-filename".to_owned(),
        file.to_owned(),
    ]);
    flags
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_api_key_is_the_flag_else_the_environment() {
        let env = Some("sk-env".to_owned());
        let with = argv("vllm bench serve --api-key sk-flag --model m");
        assert_eq!(api_key_of(&with, env.clone()).as_deref(), Some("sk-flag"));
        let eq = argv("servebench run --api-key=sk-eq");
        assert_eq!(api_key_of(&eq, None).as_deref(), Some("sk-eq"));
        let without = argv("vllm bench serve --model m");
        assert_eq!(api_key_of(&without, env).as_deref(), Some("sk-env"));
        assert_eq!(api_key_of(&without, Some(String::new())), None);
        assert_eq!(api_key_of(&without, None), None);
    }

    #[test]
    fn vllm_bench_serve_runs_as_servebench_run() {
        let b = BenchCmd::new(argv("vllm bench serve --model m --num-prompts 10"));
        assert_eq!(b.kind, BenchKind::Run);
        let a = b.argv(
            &b.words,
            "/bin/servebench",
            "http://127.0.0.1:9",
            Some(9),
            Path::new("/x/C/run=0.json"),
            2,
        );
        assert_eq!(
            a,
            argv(
                "/bin/servebench run --model m --num-prompts 10 --base-url http://127.0.0.1:9 \
                 --output-dir /x/C --num-warmups 2 --percentile-metrics ttft,tpot,itl,e2el \
                 --save-result --result-dir /x/C --result-filename run=0.json"
            )
        );
    }

    #[test]
    fn a_named_port_is_kept_and_the_placeholder_filled() {
        let b = BenchCmd::new(argv("servebench run --port {port}"));
        let a = b.argv(
            &b.words,
            "sb",
            "http://127.0.0.1:7",
            Some(7),
            Path::new("d/run=1.json"),
            0,
        );
        assert_eq!(&a[..4], &argv("sb run --port 7")[..]);
        assert!(!a.contains(&"--base-url".to_owned()));
    }

    #[test]
    fn a_frontier_gets_the_server_and_a_results_dir_before_its_run_flags() {
        let b = BenchCmd::new(argv(
            "servebench sweep --max-concurrency 1,4 -- --ignore-eos",
        ));
        assert_eq!(b.kind, BenchKind::Frontier);
        let a = b.argv(
            &b.words,
            "sb",
            "http://h:1",
            Some(1),
            Path::new("d/run=0.json"),
            0,
        );
        assert_eq!(
            a,
            argv("sb sweep --max-concurrency 1,4 --base-url http://h:1 --results-dir d/run=0 -- --ignore-eos")
        );
    }

    /// Issue 28: a bench command that already holds the result flags got them twice, and
    /// every run failed while --dry-run looked fine.
    #[test]
    fn the_users_result_flags_are_given_once_and_the_sweeps_file_wins() {
        let b = BenchCmd::new(argv(
            "vllm bench serve --model m --save-result --result_dir mine --result-file=x.json \
             --percentile-metrics ttft,e2el --num_prompts 4 --num-prompt 8 --num-warmups 1",
        ));
        assert_eq!(b.check_flags().unwrap().unwrap().lines().count(), 1);
        let a = b.argv(
            &b.words,
            "sb",
            "http://h:9",
            Some(9),
            Path::new("/x/C/run=0.json"),
            0,
        );
        assert_eq!(
            a,
            argv(
                "sb run --model m --save-result --num-prompts 8 --num-warmups 1 \
                 --base-url http://h:9 --output-dir /x/C \
                 --percentile-metrics ttft,e2el,tpot,itl \
                 --result-dir /x/C --result-filename run=0.json"
            )
        );
        // Sweep serve's own warm-ups replace the command's.
        let a = b.argv(&b.words, "sb", "u", None, Path::new("d/run=1.json"), 3);
        let warmups: Vec<_> = a.iter().filter(|w| *w == "--num-warmups").collect();
        assert_eq!(warmups.len(), 1);
        assert!(a.windows(2).any(|w| w == ["--num-warmups", "3"]), "{a:?}");
    }

    #[test]
    fn an_abbreviated_server_or_key_counts_as_given() {
        let b = BenchCmd::new(argv("vllm bench serve --base_url http://h:1 --api_k sk-1"));
        let a = b.argv(
            &b.words,
            "sb",
            "http://other:2",
            Some(2),
            Path::new("d/r.json"),
            0,
        );
        assert!(!a.contains(&"http://other:2".to_owned()), "{a:?}");
        assert_eq!(
            api_key_of(&b.run_flags(&b.words).args(), None).as_deref(),
            Some("sk-1")
        );
    }

    #[test]
    fn an_ambiguous_abbreviation_in_the_bench_command_is_an_error() {
        let b = BenchCmd::new(argv("vllm bench serve --random 8"));
        let e = b.check_flags().unwrap_err();
        assert!(e.contains("--random is ambiguous: --random-"), "{e}");
        // Another program's flags are not ours to judge.
        assert_eq!(
            BenchCmd::new(argv("python b.py --random 8")).check_flags(),
            Ok(None)
        );
    }

    #[test]
    fn other_commands_keep_their_result_flags_once() {
        let b = BenchCmd::new(argv(
            "python b.py --save_result --result-dir a --percentile-metrics=ttft",
        ));
        let a = b.argv(&b.words, "sb", "u", Some(5), Path::new("d/run=0.json"), 0);
        assert_eq!(
            a,
            argv(
                "python b.py --save_result --percentile-metrics ttft,tpot,itl,e2el \
                 --result-dir d --result-filename run=0.json"
            )
        );
    }

    #[test]
    fn other_commands_run_as_given_with_the_result_flags() {
        let b = BenchCmd::new(argv("python bench.py --port {port}"));
        assert_eq!(b.kind, BenchKind::External);
        let a = b.argv(&b.words, "sb", "u", Some(5), Path::new("d/run=0.json"), 3);
        assert_eq!(&a[..4], &argv("python bench.py --port 5")[..]);
        assert!(a.contains(&"--save-result".to_owned()));
    }
}
