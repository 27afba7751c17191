//! servebench workload
