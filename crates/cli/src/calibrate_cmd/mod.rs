//! `servebench sim calibrate`.
pub mod fit;
