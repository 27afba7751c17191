//! One constructor for the requests the file and synthetic datasets build, so a field added
//! to [`RequestSpec`] is filled in one place for all of them.

use crate::request::RequestSpec;

/// A request with a fixed output length; `prefix_tokens` leading tokens are meant to be
/// shared with other requests.
pub(crate) fn request(
    id: usize,
    prompt: String,
    prompt_tokens: u64,
    max_tokens: u64,
    prefix_tokens: u64,
) -> RequestSpec {
    RequestSpec {
        images: Vec::new(),
        id: id as u64,
        prompt,
        prompt_tokens,
        max_tokens: Some(max_tokens),
        prefix_tokens,
    }
}

/// Gives requests the ids `0..n` in their current order (after a shuffle).
pub(crate) fn renumber(requests: &mut [RequestSpec]) {
    for (i, r) in requests.iter_mut().enumerate() {
        r.id = i as u64;
    }
}
