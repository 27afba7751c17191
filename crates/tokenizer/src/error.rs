//! Errors raised while locating or loading a tokenizer.

use std::path::PathBuf;

/// Why a tokenizer could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The tokenizer file exists (or was named) but could not be read.
    #[error("cannot read tokenizer file {}: {source}", path.display())]
    Io {
        /// The file that was read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid Hugging Face `tokenizer.json`.
    #[error("invalid tokenizer file {}: {message}", path.display())]
    Parse {
        /// The file that was parsed.
        path: PathBuf,
        /// What the parser reported.
        message: String,
    },
    /// Nothing matching the spec was found; `tried` lists every location looked at.
    #[error("tokenizer `{spec}` not found (tried: {})", join_tried(tried))]
    NotFound {
        /// The spec as given by the user.
        spec: String,
        /// Every path or source that was tried, in order.
        tried: Vec<String>,
    },
    /// The model failed to encode a text.
    #[error("tokenizer {name} cannot encode the text: {message}")]
    Encode {
        /// The tokenizer's name.
        name: String,
        /// What the model reported.
        message: String,
    },
    /// The tokenizer loaded but cannot be used (for example it has an empty vocabulary).
    #[error("unusable tokenizer {name}: {message}")]
    Unusable {
        /// The tokenizer's name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
}

fn join_tried(tried: &[String]) -> String {
    if tried.is_empty() {
        "nothing".to_owned()
    } else {
        tried.join(", ")
    }
}
