//! Deterministic 64-bit mixing for block ids and seeds; never random, never platform-dependent.

/// The SplitMix64 finaliser: a bijective, well-spread mix of one `u64`.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes two values into one; order matters (`mix2(a, b) != mix2(b, a)` in general).
#[inline]
pub fn mix2(a: u64, b: u64) -> u64 {
    mix64(mix64(a) ^ b.rotate_left(29) ^ 0xD6E8_FEB8_6659_FD93)
}

/// Re-chains a list of block ids so that the id at position `i` identifies the whole prefix `0..=i`.
///
/// Imported traces do not promise that equal ids imply equal prefixes; after this pass they do,
/// which is what the engine's prefix cache relies on. `salt` separates id spaces (0 keeps them shared).
pub fn chain_ids(ids: &[u64], salt: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(ids.len());
    let mut prev = mix2(0x5EED_B10C_u64, salt);
    for &id in ids {
        prev = mix2(prev, id);
        out.push(prev);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaining_makes_ids_prefix_identifying() {
        let a = chain_ids(&[1, 2, 3], 0);
        let b = chain_ids(&[9, 2, 3], 0);
        let c = chain_ids(&[1, 2, 4], 0);
        assert_ne!(a[1], b[1], "same id after a different prefix must differ");
        assert_eq!(a[..2], c[..2]);
        assert_ne!(a[2], c[2]);
        assert_ne!(chain_ids(&[1], 7)[0], a[0], "salt separates id spaces");
    }
}
