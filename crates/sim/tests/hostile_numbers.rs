//! Every flag of `servebench sim` that takes a value, given generated hostile numbers (NaN,
//! infinities, negatives, zero, values past every integer width, absurdly large and small
//! floats): parsing and resolving the simulator's configuration ends in `Ok` or a clear `Err`,
//! never a panic (as `Duration::from_secs_f64` panics on NaN or 1e30).

use clap::{Args, Command};
use proptest::prelude::*;
use servebench_sim::args::SimArgs;

/// The long names of the flags that take a value.
fn valued_flags() -> Vec<String> {
    SimArgs::augment_args(Command::new("sim"))
        .get_arguments()
        .filter(|a| a.get_action().takes_values() && !a.is_positional())
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

/// Numbers chosen to break conversions, and random ones around them.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("-inf".to_owned()),
        Just("0".to_owned()),
        Just("-0".to_owned()),
        Just("-1".to_owned()),
        Just("1e30".to_owned()),
        Just("1e-300".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("4294967296".to_owned()),
        Just("9223372036854775807".to_owned()),
        any::<f64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_valued_flag_survives_hostile_numbers(
        which in any::<prop::sample::Index>(),
        value in hostile(),
    ) {
        let flags = valued_flags();
        prop_assume!(!flags.is_empty());
        let flag = &flags[which.index(flags.len())];
        // `=` so that a negative number is the value, not another flag.
        let spec = format!("llama-3.1-8b --gpu h100 --{flag}={value}");
        if let Ok(args) = SimArgs::parse_spec(&spec) {
            // Ok or a configuration error: both are answers; a panic fails the test.
            let _ = args.resolve();
        }
    }
}

#[test]
fn the_flags_are_found() {
    let flags = valued_flags();
    for f in [
        "max-num-seqs",
        "fault-stall-ms",
        "max-lag-ms",
        "header-timeout-secs",
        "port",
    ] {
        assert!(flags.iter().any(|x| x == f), "{f} in {flags:?}");
    }
}
