//! servebench report
