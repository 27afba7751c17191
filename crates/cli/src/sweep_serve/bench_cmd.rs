//! The benchmark side of one run: `vllm bench serve …` (and `servebench run …`) run as our
//! own `servebench run` with the same flags, `servebench sweep …` as a frontier per server
//! combination, anything else as given; each pointed at the server and told where its result
//! goes.

use std::path::Path;

use crate::server_proc::port::{flag_value, PLACEHOLDER};

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
        api_key_of(&self.words, std::env::var("OPENAI_API_KEY").ok())
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
        let rest: Vec<String> = applied
            .iter()
            .skip(self.program_words)
            .map(|a| a.replace(PLACEHOLDER, &port_text))
            .collect();
        let names_server = flag_value(&rest, &["--base-url", "--host", "--port"]).is_some();
        let dir = out.parent().unwrap_or(Path::new("."));
        let file = out
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut argv = match self.kind {
            BenchKind::Run => vec![exe.to_owned(), "run".to_owned()],
            BenchKind::Frontier => vec![exe.to_owned(), "sweep".to_owned()],
            BenchKind::External => Vec::new(),
        };
        // The frontier's own flags end where `--` starts its run flags.
        let split = match self.kind {
            BenchKind::Frontier => rest.iter().position(|a| a == "--").unwrap_or(rest.len()),
            _ => rest.len(),
        };
        argv.extend(rest[..split].iter().cloned());
        match self.kind {
            BenchKind::Run => {
                if !names_server {
                    argv.extend(["--base-url".to_owned(), base_url.to_owned()]);
                }
                if flag_value(&rest, &["--output-dir"]).is_none() {
                    argv.extend(["--output-dir".to_owned(), dir.display().to_string()]);
                }
                if warmups > 0 {
                    argv.extend(["--num-warmups".to_owned(), warmups.to_string()]);
                }
                argv.extend(vllm_result_flags(dir, &file));
            }
            BenchKind::Frontier => {
                if !names_server {
                    argv.extend(["--base-url".to_owned(), base_url.to_owned()]);
                }
                let stem = file.trim_end_matches(".json");
                argv.extend([
                    "--results-dir".to_owned(),
                    dir.join(stem).display().to_string(),
                ]);
            }
            BenchKind::External => argv.extend(vllm_result_flags(dir, &file)),
        }
        argv.extend(rest[split..].iter().cloned());
        argv
    }
}

fn api_key_of(words: &[String], env: Option<String>) -> Option<String> {
    flag_value(words, &["--api-key"])
        .map(str::to_owned)
        .or(env)
        .filter(|k| !k.is_empty())
}

/// The flags vLLM's sweep adds to every benchmark run.
fn vllm_result_flags(dir: &Path, file: &str) -> Vec<String> {
    vec![
        "--percentile-metrics".to_owned(),
        "ttft,tpot,itl,e2el".to_owned(),
        "--save-result".to_owned(),
        "--result-dir".to_owned(),
        dir.display().to_string(),
        "--result-filename".to_owned(),
        file.to_owned(),
    ]
}

#[cfg(test)]
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

    #[test]
    fn other_commands_run_as_given_with_the_result_flags() {
        let b = BenchCmd::new(argv("python bench.py --port {port}"));
        assert_eq!(b.kind, BenchKind::External);
        let a = b.argv(&b.words, "sb", "u", Some(5), Path::new("d/run=0.json"), 3);
        assert_eq!(&a[..4], &argv("python bench.py --port 5")[..]);
        assert!(a.contains(&"--save-result".to_owned()));
    }
}
