//! servebench wire
