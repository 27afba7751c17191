//! servebench cli
