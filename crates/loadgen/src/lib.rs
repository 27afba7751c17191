//! servebench loadgen
