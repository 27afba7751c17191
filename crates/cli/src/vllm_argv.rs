//! vLLM's argument rules for the commands that stand in for `vllm bench serve|latency|
//! throughput`. vLLM parses them with argparse (`FlexibleArgumentParser`), so its users and
//! recipes write `--num_prompts`, `--num-prompt 100`, `--result-file=x` and repeat flags; clap
//! refuses all of that. One pass over the words, driven by clap's own definition of the
//! command, rewrites each flag to the long name clap knows, so clap still parses, validates
//! and reports everything else:
//!
//! - `--name=value` is split at the first `=` (the value is kept attached);
//! - `_` in a name is `-` (`--num_prompts` is `--num-prompts`);
//! - an exact name wins; otherwise a prefix of exactly one flag's names expands to it, and a
//!   prefix of several is an error naming them (argparse's `allow_abbrev`);
//! - a name that matches nothing is left as written, so clap's error quotes the user;
//! - values are never rewritten: the words a flag takes are passed over, and everything after
//!   a bare `--` is left alone;
//! - a flag that takes one value given twice keeps its last value (clap's
//!   `args_override_self`, set on these commands) and is reported once, as vLLM warns "Found
//!   duplicate keys"; a repeated switch is simply on.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use clap::ArgAction;

/// vLLM flags that only configure vLLM's own process (its engine, or how Hugging Face loads a
/// tokenizer's Python code): vLLM's command lines carry them, and a client has nothing to do
/// with them. Accepted so those command lines run, with one line on stderr saying they are
/// ignored.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EngineOnlyFlags {
    /// Accepted and ignored (vLLM's flag lets Hugging Face run a model's own tokenizer code;
    /// servebench reads tokenizer.json and runs no model code).
    #[arg(long, help_heading = "Ignored vLLM flags")]
    pub trust_remote_code: bool,
    /// Accepted and ignored (vLLM's flag picks its in-process engine's mode; servebench is a
    /// client of a server).
    #[arg(long, help_heading = "Ignored vLLM flags")]
    pub async_engine: bool,
}

impl EngineOnlyFlags {
    /// The line to print when any of these flags was given.
    pub fn notice(&self) -> Option<String> {
        let given: Vec<&str> = [
            (self.trust_remote_code, "--trust-remote-code"),
            (self.async_engine, "--async-engine"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if given.is_empty() {
            return None;
        }
        let what = if given.len() == 1 {
            "it configures"
        } else {
            "they configure"
        };
        Some(format!(
            "note: {} ignored: {what} vLLM's own engine process, which a client (servebench) does not run",
            given.join(" and ")
        ))
    }
}

/// vLLM's engine arguments spelled with one dash and several letters (argparse allows it;
/// clap's short flags are one letter).
const ENGINE_SHORT_ALIASES: &[(&str, &str)] = &[
    ("-tp", "tensor-parallel-size"),
    ("-pp", "pipeline-parallel-size"),
    ("-dp", "data-parallel-size"),
];

/// A prefix that names several flags (argparse refuses it the same way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    /// The flag as the user wrote it (`--random-in`).
    pub given: String,
    /// The long names it could mean, sorted.
    pub candidates: Vec<String>,
}

impl fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is ambiguous: {}",
            self.given,
            self.candidates.join(", ")
        )
    }
}

impl std::error::Error for Ambiguous {}

/// How many words after a flag are its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Values {
    min: usize,
    max: usize,
}

/// One flag of the command.
#[derive(Debug, Clone)]
struct Flag {
    /// `--` and the long name clap declares.
    long: String,
    values: Values,
    /// Set once: a second occurrence replaces the first (and is worth a warning). Switches and
    /// appending flags (`--header` twice is two headers) are not.
    single_value: bool,
}

/// The flags of one clap command, by every name they answer to. The default knows none: it
/// leaves every word as written.
#[derive(Debug, Clone, Default)]
pub struct FlagSpec {
    flags: Vec<Flag>,
    /// Every long name and alias (without `--`), to the flag it names.
    names: HashMap<String, usize>,
}

impl FlagSpec {
    /// The flags of `cmd` (built here, so clap's own `--help`/`--version` are among them, as
    /// argparse's `-h/--help` is).
    pub fn of(cmd: &clap::Command) -> FlagSpec {
        let mut cmd = cmd.clone();
        cmd.build();
        let mut spec = FlagSpec {
            flags: Vec::new(),
            names: HashMap::new(),
        };
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let range = arg.get_num_args();
            let takes = arg.get_action().takes_values();
            let values = match range {
                Some(r) if takes => Values {
                    min: r.min_values(),
                    max: r.max_values(),
                },
                None if takes => Values { min: 1, max: 1 },
                _ => Values { min: 0, max: 0 },
            };
            let single_value = matches!(arg.get_action(), ArgAction::Set) && values.max > 0;
            let i = spec.flags.len();
            spec.flags.push(Flag {
                long: format!("--{long}"),
                values,
                single_value,
            });
            spec.names.insert(long.to_owned(), i);
            for alias in arg.get_all_aliases().unwrap_or_default() {
                spec.names.insert(alias.to_owned(), i);
            }
        }
        spec
    }

    /// Also know `names` (`--flag`), vLLM flags servebench refuses: matched exactly and by
    /// prefix like the others, so `--use_beam_search` or `--use-beam` reaches the refusal that
    /// names them instead of clap's "unexpected argument". Their values are not known, so the
    /// words after them are read as flags and values alike (harmless: the run is refused).
    pub fn with_refused(mut self, names: &[&str]) -> FlagSpec {
        for n in names {
            let Some(name) = n.strip_prefix("--") else {
                continue;
            };
            if self.names.contains_key(name) {
                continue;
            }
            let i = self.flags.len();
            self.flags.push(Flag {
                long: (*n).to_owned(),
                values: Values { min: 0, max: 0 },
                single_value: false,
            });
            self.names.insert(name.to_owned(), i);
        }
        self
    }

    /// The flag `name` (without `--`) means: its exact spelling, its `-` spelling, else the
    /// one flag it is a prefix of. `Ok(None)`: no flag (left for clap to report).
    fn resolve(&self, name: &str) -> Result<Option<usize>, Ambiguous> {
        if let Some(&i) = self.names.get(name) {
            return Ok(Some(i));
        }
        let dashed = name.replace('_', "-");
        if let Some(&i) = self.names.get(&dashed) {
            return Ok(Some(i));
        }
        // `--` alone never gets here, and an empty prefix would match everything.
        if dashed.is_empty() {
            return Ok(None);
        }
        let found: BTreeSet<usize> = self
            .names
            .iter()
            .filter(|(n, _)| n.starts_with(&dashed))
            .map(|(_, &i)| i)
            .collect();
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.into_iter().next()),
            _ => {
                let mut candidates: Vec<String> =
                    found.iter().map(|&i| self.flags[i].long.clone()).collect();
                candidates.sort();
                Err(Ambiguous {
                    given: format!("--{name}"),
                    candidates,
                })
            }
        }
    }

    /// `args` (the words after the command's name) by vLLM's rules; see the module's doc.
    pub fn normalise<S: AsRef<str>>(&self, args: &[S]) -> Result<Normalised, Ambiguous> {
        let mut groups = Vec::with_capacity(args.len());
        let mut seen = BTreeSet::new();
        let mut duplicates = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let word = args[i].as_ref();
            i += 1;
            if word == "--" {
                // Positionals from here on: passed through word for word.
                let mut words = vec![word.to_owned()];
                words.extend(args[i..].iter().map(|a| a.as_ref().to_owned()));
                groups.push(Group { words, flag: None });
                break;
            }
            // vLLM's multi-letter single-dash aliases of engine arguments (`-tp 4`, `-pp=2`).
            let aliased;
            let word = match ENGINE_SHORT_ALIASES.iter().find_map(|(short, long)| {
                let rest = word.strip_prefix(short)?;
                (rest.is_empty() || rest.starts_with('='))
                    .then(|| format!("--{long}{rest}"))
                    .filter(|_| self.names.contains_key(*long))
            }) {
                Some(w) => {
                    aliased = w;
                    aliased.as_str()
                }
                None => word,
            };
            // Short flags, values of unknown flags, and positionals are not ours to touch.
            let Some(body) = word.strip_prefix("--") else {
                groups.push(Group::verbatim(word));
                continue;
            };
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let Some(f) = self.resolve(name)? else {
                groups.push(Group::verbatim(word));
                continue;
            };
            let flag = &self.flags[f];
            if flag.single_value && !seen.insert(f) && !duplicates.contains(&flag.long) {
                duplicates.push(flag.long.clone());
            }
            let mut words = vec![match value {
                Some(v) => format!("{}={v}", flag.long),
                None => flag.long.clone(),
            }];
            // The words this flag takes are its values and are not rewritten: the first `min`
            // whatever they look like (clap then judges a value that looks like a flag), more
            // up to `max` while they do not look like flags, as clap reads them.
            let mut taken = usize::from(value.is_some());
            while i < args.len() && taken < flag.values.max {
                let next = args[i].as_ref();
                if taken >= flag.values.min && next.starts_with('-') && next.len() > 1 {
                    break;
                }
                words.push(next.to_owned());
                i += 1;
                taken += 1;
            }
            groups.push(Group {
                words,
                flag: Some(f),
            });
        }
        Ok(Normalised {
            groups,
            duplicates,
            spec: self.clone(),
        })
    }
}

/// A flag with its values, or a word that is not one of the command's flags.
#[derive(Debug, Clone)]
struct Group {
    words: Vec<String>,
    flag: Option<usize>,
}

impl Group {
    fn verbatim(word: &str) -> Group {
        Group {
            words: vec![word.to_owned()],
            flag: None,
        }
    }
}

/// Words after the pass: every known flag under its long name, with the values it took.
#[derive(Debug, Clone)]
pub struct Normalised {
    groups: Vec<Group>,
    /// Flags (long names, in order of first repetition) that take one value and were given
    /// more than once: the last value is used.
    pub duplicates: Vec<String>,
    spec: FlagSpec,
}

impl Normalised {
    /// The words to hand to clap.
    pub fn args(&self) -> Vec<String> {
        self.groups.iter().flat_map(|g| g.words.clone()).collect()
    }

    /// vLLM's one-line warning for repeated flags, if any.
    pub fn duplicate_warning(&self) -> Option<String> {
        if self.duplicates.is_empty() {
            return None;
        }
        Some(format!(
            "warning: found duplicate flags {}: the last value of each is used (as vLLM's \"Found duplicate keys\")",
            self.duplicates.join(", ")
        ))
    }

    fn long_of(&self, g: &Group) -> Option<&str> {
        g.flag.map(|f| self.spec.flags[f].long.as_str())
    }

    /// Whether the flag `long` (`--name`, as clap declares it) is given.
    pub fn has(&self, long: &str) -> bool {
        self.groups.iter().any(|g| self.long_of(g) == Some(long))
    }

    /// The last value given to `long`.
    pub fn value_of(&self, long: &str) -> Option<&str> {
        self.groups
            .iter()
            .rev()
            .find(|g| self.long_of(g) == Some(long))
            .and_then(|g| {
                let first = g.words.first()?;
                match first.split_once('=') {
                    Some((_, v)) => Some(v),
                    None => g.words.get(1).map(String::as_str),
                }
            })
    }

    /// Takes `long` out, with its values, wherever it is given; whether it was.
    pub fn remove(&mut self, long: &str) -> bool {
        let before = self.groups.len();
        let spec = &self.spec;
        self.groups
            .retain(|g| g.flag.map(|f| spec.flags[f].long.as_str()) != Some(long));
        self.groups.len() != before
    }

    /// Earlier occurrences of a flag that takes one value dropped: the words clap reads the
    /// same way, without the repetition (a command built for another process says each flag
    /// once).
    pub fn keep_last(mut self) -> Normalised {
        let mut later = BTreeSet::new();
        let mut kept = Vec::with_capacity(self.groups.len());
        for g in self.groups.into_iter().rev() {
            let repeated = match g.flag {
                Some(f) if self.spec.flags[f].single_value => !later.insert(f),
                _ => false,
            };
            if !repeated {
                kept.push(g);
            }
        }
        kept.reverse();
        self.groups = kept;
        self.duplicates.clear();
        self
    }
}

/// The flags of `servebench <name>` (`run`, `latency`, `throughput`), from the clap
/// definition of the binary.
pub fn spec_of_subcommand(name: &str) -> Option<FlagSpec> {
    let cli = <crate::Cli as clap::CommandFactory>::command();
    cli.find_subcommand(name).map(FlagSpec::of)
}

/// The flags of `servebench run`, with the vLLM flags it refuses (so that their refusal, not
/// an abbreviation, is what the user sees).
pub fn run_spec() -> FlagSpec {
    let refused: Vec<&str> = crate::run::args::UNSUPPORTED_VLLM_FLAGS
        .iter()
        .map(|(f, _)| *f)
        .collect();
    spec_of_subcommand("run")
        .unwrap_or_default()
        .with_refused(&refused)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    /// A command with the shapes that matter: one-value flags, a switch, a repeatable flag, a
    /// several-values flag and an alias.
    fn spec() -> FlagSpec {
        let cmd = Command::new("t")
            .args_override_self(true)
            .arg(Arg::new("random_input_len").long("random-input-len"))
            .arg(Arg::new("random_output_len").long("random-output-len"))
            .arg(Arg::new("random_range_ratio").long("random-range-ratio"))
            .arg(Arg::new("num_prompts").long("num-prompts"))
            .arg(Arg::new("result_filename").long("result-filename"))
            .arg(Arg::new("result_dir").long("result-dir"))
            .arg(Arg::new("label").long("label").alias("tag"))
            .arg(
                Arg::new("save_result")
                    .long("save-result")
                    .action(ArgAction::SetTrue),
            )
            .arg(Arg::new("header").long("header").action(ArgAction::Append))
            .arg(Arg::new("slo").long("slo").num_args(1..))
            .arg(Arg::new("rest").num_args(0..).last(true));
        FlagSpec::of(&cmd).with_refused(&["--use-beam-search"])
    }

    fn norm(words: &str) -> Result<Normalised, Ambiguous> {
        let w: Vec<&str> = words.split_whitespace().collect();
        spec().normalise(&w)
    }

    fn args(words: &str) -> String {
        norm(words).unwrap().args().join(" ")
    }

    #[test]
    fn underscores_are_dashes_in_names() {
        assert_eq!(
            args("--num_prompts 4 --save_result --random_input_len=8"),
            "--num-prompts 4 --save-result --random-input-len=8"
        );
    }

    #[test]
    fn a_unique_prefix_expands_to_its_flag() {
        assert_eq!(
            args("--random-input 2048 --random-output 1024 --num-prompt 100 --result-file=x"),
            "--random-input-len 2048 --random-output-len 1024 --num-prompts 100 --result-filename=x"
        );
        // An alias counts as its flag's name: a prefix of both is one flag.
        assert_eq!(args("--ta x --lab y"), "--label x --label y");
        // Refused vLLM flags are known, so the refusal sees them.
        assert_eq!(args("--use_beam"), "--use-beam-search");
    }

    #[test]
    fn an_exact_name_wins_over_a_longer_one() {
        let cmd = Command::new("t")
            .arg(Arg::new("seed").long("seed"))
            .arg(Arg::new("seed_offset").long("seed-offset"));
        let w = FlagSpec::of(&cmd).normalise(&["--seed", "1"]).unwrap();
        assert_eq!(w.args(), ["--seed", "1"]);
    }

    #[test]
    fn an_ambiguous_prefix_names_the_candidates() {
        let e = norm("--random 8").unwrap_err();
        assert_eq!(e.given, "--random");
        assert_eq!(
            e.to_string(),
            "--random is ambiguous: --random-input-len, --random-output-len, --random-range-ratio"
        );
        let e = norm("--result_=x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--result_ is ambiguous: --result-dir, --result-filename"
        );
    }

    #[test]
    fn equals_values_stay_attached_and_unknown_flags_stay_as_written() {
        assert_eq!(
            args("--label=a=b --bogus_flag=1 -x"),
            "--label=a=b --bogus_flag=1 -x"
        );
    }

    #[test]
    fn a_repeated_one_value_flag_is_reported_once_and_a_switch_not_at_all() {
        let n = norm("--num-prompts 1 --num_prompts 2 --num-prompt=3 --save-result --save-result --header a --header b")
            .unwrap();
        assert_eq!(n.duplicates, ["--num-prompts"]);
        let warning = n.duplicate_warning().unwrap();
        assert_eq!(warning.lines().count(), 1);
        assert!(warning.contains("--num-prompts"), "{warning}");
        assert!(norm("--save-result --save_result --header a --header b")
            .unwrap()
            .duplicate_warning()
            .is_none());
    }

    #[test]
    fn a_repeated_flag_keeps_its_last_value_in_clap() {
        let cmd = Command::new("t")
            .args_override_self(true)
            .arg(Arg::new("num_prompts").long("num-prompts"))
            .arg(
                Arg::new("save_result")
                    .long("save-result")
                    .action(ArgAction::SetTrue),
            );
        let n = FlagSpec::of(&cmd)
            .normalise(&[
                "--num_prompts",
                "1",
                "--save-result",
                "--num-prompt=7",
                "--save_result",
            ])
            .unwrap();
        let m = cmd
            .try_get_matches_from(["t"].into_iter().map(String::from).chain(n.args()))
            .unwrap();
        assert_eq!(m.get_one::<String>("num_prompts").unwrap(), "7");
        assert!(m.get_flag("save_result"));
        // What a built command holds: each flag once, the last value.
        assert_eq!(
            n.keep_last().args(),
            ["--save-result", "--num-prompts=7", "--save-result"]
        );
    }

    #[test]
    fn values_are_never_rewritten() {
        // A value that looks like a flag, or has underscores, is the flag's value.
        assert_eq!(
            args("--label --num_prompts --result-dir my_dir --slo ttft_a tpot_b --num_prompts 2"),
            "--label --num_prompts --result-dir my_dir --slo ttft_a tpot_b --num-prompts 2"
        );
        assert_eq!(args("--label -5"), "--label -5");
    }

    #[test]
    fn words_after_a_bare_double_dash_pass_through() {
        assert_eq!(
            args("--num_prompts 2 -- --num_prompts --random 1"),
            "--num-prompts 2 -- --num_prompts --random 1"
        );
    }

    #[test]
    fn flags_are_found_and_taken_out_by_their_long_name() {
        let mut n = norm("--result_dir a --save-result --result-file=b --label x").unwrap();
        assert!(n.has("--save-result"));
        assert_eq!(n.value_of("--result-dir"), Some("a"));
        assert_eq!(n.value_of("--result-filename"), Some("b"));
        assert!(n.remove("--result-dir"));
        assert!(n.remove("--result-filename"));
        assert!(!n.remove("--num-prompts"));
        assert_eq!(n.args(), ["--save-result", "--label", "x"]);
    }

    #[test]
    fn the_run_commands_flags_come_from_clap() {
        let run = spec_of_subcommand("run").unwrap();
        let n = run
            .normalise(&[
                "--random-input",
                "8",
                "--num-prompt",
                "4",
                "--trust_remote_code",
            ])
            .unwrap();
        assert_eq!(
            n.args(),
            [
                "--random-input-len",
                "8",
                "--num-prompts",
                "4",
                "--trust-remote-code"
            ]
        );
        assert!(spec_of_subcommand("latency").is_some());
        assert!(spec_of_subcommand("throughput").is_some());
    }
}
