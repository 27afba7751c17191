//! servebench tokenizer
