//! The real client (`run_load` + `BackendClient`) against the scripted server on
//! `127.0.0.1:0`: timing against the server's own log, queueing behind the concurrency cap,
//! schedules, every failure kind, and the two-stage stop.
//!
//! Timing bounds are generous on purpose: the tests must hold on a loaded two-core machine in
//! a debug build. Each bound is documented where it is asserted.

#![allow(clippy::unwrap_used)]

mod common;
mod failures;
mod queueing;
mod schedule;
mod stopping;
mod timing;
