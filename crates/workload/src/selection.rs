//! Shuffling and oversampling shared by the file-backed datasets, following vLLM's
//! `BenchmarkDataset`: the data are shuffled with the seed, taken in order, and when
//! fewer usable entries than requested remain, random picks (with replacement) fill
//! the gap.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};

/// Shuffles `items` deterministically from `seed`.
pub(crate) fn shuffle<T>(items: &mut [T], seed: u64) {
    items.shuffle(&mut stream(seed, Purpose::Shuffle, 0));
}

/// Appends random copies of existing requests until there are `target`; copies get
/// the next ids. Does nothing when `requests` is empty or already long enough.
pub(crate) fn oversample(requests: &mut Vec<RequestSpec>, target: usize, seed: u64) {
    let have = requests.len();
    for (i, pick) in (have..target).zip(oversample_picks(have, target, seed)) {
        let pick = requests[pick].clone();
        requests.push(RequestSpec {
            id: i as u64,
            ..pick
        });
    }
}

/// The positions [`oversample`] copies, in order (empty when nothing is copied), so data
/// kept beside the requests can follow the same picks.
pub(crate) fn oversample_picks(have: usize, target: usize, seed: u64) -> Vec<usize> {
    if have == 0 || have >= target {
        return Vec::new();
    }
    let mut rng = stream(seed, Purpose::Oversample, 0);
    (have..target).map(|_| rng.random_range(0..have)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversample_fills_with_existing_prompts() {
        let mut reqs: Vec<RequestSpec> = (0..3)
            .map(|i| RequestSpec {
                images: Vec::new(),
                id: i,
                prompt: format!("p{i}"),
                prompt_tokens: 1,
                max_tokens: None,
                prefix_tokens: 0,
            })
            .collect();
        oversample(&mut reqs, 10, 0);
        assert_eq!(reqs.len(), 10);
        assert_eq!(
            reqs.iter().map(|r| r.id).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert!(reqs
            .iter()
            .all(|r| ["p0", "p1", "p2"].contains(&r.prompt.as_str())));
    }

    #[test]
    fn shuffle_is_seeded() {
        let mut a: Vec<u32> = (0..50).collect();
        let mut b = a.clone();
        let mut c = a.clone();
        shuffle(&mut a, 1);
        shuffle(&mut b, 1);
        shuffle(&mut c, 2);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, (0..50).collect::<Vec<_>>());
    }
}
