//! The CLI's integration tests, one test binary (one link instead of twelve): a module per
//! command or concern, and `common` for what they all need.

mod common;

mod answer_checks;
mod browser_report;
mod calibrate;
mod compare_cli;
mod compare_clocks;
mod datasets_cli;
mod decide_fleet;
mod decide_record;
mod decision_run_flags;
mod diagnose_rules;
mod fault_matrix;
mod fleet;
mod gpu_telemetry;
mod help_text;
mod k8s_job;
mod kill_nine;
mod latency_cli;
mod lora;
mod matrix_cli;
mod multi_turn;
mod overload_honesty;
mod pooling;
mod predict_plan;
mod prefix_hit;
mod random_mm;
mod readme_examples;
mod real_engine;
mod realtime_priority;
mod reasoning_streams;
mod report_cli;
mod run_cli;
mod shard_merge;
mod sim_cli;
mod sim_fidelity;
mod sweep_cli;
mod sweep_search;
mod sweep_serve;
mod throughput_cli;
mod timed_trace;
mod tls;
mod trace_cli;
mod trust;
mod vllm_parity;
