//! The CLI's integration tests, one test binary (one link instead of twelve): a module per
//! command or concern, and `common` for what they all need.

mod common;

mod browser_report;
mod compare_cli;
mod decide_record;
mod diagnose_rules;
mod fault_matrix;
mod kill_nine;
mod matrix_cli;
mod predict_plan;
mod real_engine;
mod report_cli;
mod run_cli;
mod sim_cli;
mod sim_itl_client;
mod sweep_cli;
