//! A stable 64-bit hash (FNV-1a) for configuration keys and report ids: stored in the
//! database and written into exports, so it must never change with a compiler or a crate
//! version (the standard library's hasher may).

/// FNV-1a over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 16 lower-case hex digits of [`fnv1a64`].
pub fn hex64(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64(bytes))
}

/// 32 hex digits: two FNV-1a hashes (of the bytes, and of the bytes with a salt), for ids
/// that look like the llm-d examples' (MD5-sized).
pub fn hex128(bytes: &[u8]) -> String {
    let mut salted = b"servebench:".to_vec();
    salted.extend_from_slice(bytes);
    format!("{:016x}{:016x}", fnv1a64(bytes), fnv1a64(&salted))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published FNV-1a test vectors: the hash is FNV-1a, and stays it.
    #[test]
    fn known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(hex64(b"a"), "af63dc4c8601ec8c");
        assert_eq!(hex128(b"a").len(), 32);
    }
}
