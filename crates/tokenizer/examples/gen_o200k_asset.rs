//! Writes `crates/tokenizer/assets/o200k_base.bin`, the built-in tokenizer's vocabulary,
//! from tiktoken-rs's copy of OpenAI's `o200k_base`:
//!
//! ```sh
//! cargo run -p servebench-tokenizer --example gen_o200k_asset [OUTPUT]
//! ```
//!
//! The format: the magic `o200kv1\n`, the number of tokens as a little-endian `u32`,
//! then each ordinary token in rank order (0..199_998) as its length (one byte) and its
//! bytes. The test `o200k::tests::asset_matches_tiktoken_rank_by_rank` checks the
//! committed file against tiktoken-rs byte for byte.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

const MAGIC: &[u8; 8] = b"o200kv1\n";
const ORDINARY: u32 = 199_998;

fn main() {
    let out = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/o200k_base.bin"),
        PathBuf::from,
    );
    let bpe = tiktoken_rs::o200k_base_singleton();
    let mut asset = Vec::with_capacity(1_700_000);
    asset.extend_from_slice(MAGIC);
    asset.extend_from_slice(&ORDINARY.to_le_bytes());
    for rank in 0..ORDINARY {
        let bytes = bpe.decode_bytes(&[rank]).unwrap();
        let len = u8::try_from(bytes.len()).unwrap();
        assert!(len > 0, "rank {rank} is empty");
        asset.push(len);
        asset.extend_from_slice(&bytes);
    }
    // The ranks are dense: the next one is no ordinary token.
    assert!(bpe.decode_bytes(&[ORDINARY]).is_err());
    std::fs::write(&out, &asset).unwrap();
    println!("wrote {} ({} bytes)", out.display(), asset.len());
}
