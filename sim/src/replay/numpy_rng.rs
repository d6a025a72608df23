//! NumPy's `default_rng(seed).uniform(lo, hi)` bit for bit (a `SeedSequence` seeding a PCG64, one
//! double), and AgentX's per-lane seed (`sha256("{seed}:{trace}:{lane}")`, its first 8 bytes big-endian),
//! so that a lane starts at the very instant AgentX starts it. Pure.

use sha2::{Digest, Sha256};

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL: usize = 4;
/// PCG's default 128-bit multiplier.
const PCG_MULT: u128 = (2_549_297_995_355_413_924u128 << 64) | 4_865_540_595_714_422_341u128;

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

/// `SeedSequence(seed).generate_state(4, uint64)`.
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    // The entropy as 32-bit words, least significant first (0 is one word).
    let mut entropy = vec![seed as u32];
    if seed >> 32 != 0 {
        entropy.push((seed >> 32) as u32);
    }
    let mut pool = [0u32; POOL];
    let mut hc = INIT_A;
    for (i, p) in pool.iter_mut().enumerate() {
        *p = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hc);
    }
    for src in 0..POOL {
        for dst in 0..POOL {
            if src != dst {
                pool[dst] = mix(pool[dst], hashmix(pool[src], &mut hc));
            }
        }
    }
    let mut hb = INIT_B;
    let mut words = [0u32; 8];
    for (i, w) in words.iter_mut().enumerate() {
        let mut v = pool[i % POOL] ^ hb;
        hb = hb.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hb);
        *w = v ^ (v >> XSHIFT);
    }
    let mut out = [0u64; 4];
    for (i, o) in out.iter_mut().enumerate() {
        *o = words[2 * i] as u64 | (words[2 * i + 1] as u64) << 32;
    }
    out
}

/// NumPy's PCG64 (XSL-RR 128/64).
struct Pcg64 {
    state: u128,
    inc: u128,
}

impl Pcg64 {
    fn new(seed: u64) -> Pcg64 {
        let s = seed_sequence_state(seed);
        let initstate = (s[0] as u128) << 64 | s[1] as u128;
        let initseq = (s[2] as u128) << 64 | s[3] as u128;
        let mut p = Pcg64 {
            state: 0,
            inc: (initseq << 1) | 1,
        };
        p.step();
        p.state = p.state.wrapping_add(initstate);
        p.step();
        p
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        ((s >> 64) as u64 ^ s as u64).rotate_right((s >> 122) as u32)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// `numpy.random.default_rng(seed).uniform(lo, hi)`: the first draw.
pub fn uniform(seed: u64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * Pcg64::new(seed).next_f64()
}

/// AgentX's seed for one lane's start point: the first 8 bytes, big-endian, of
/// `sha256("{random_seed}:{trace_id}:{lane}")`.
pub fn lane_seed(random_seed: u64, trace_id: &str, lane: u32) -> u64 {
    let digest = Sha256::digest(format!("{random_seed}:{trace_id}:{lane}").as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by NumPy 2.4 (`default_rng(s).random()` three times, and `.uniform(1000, 5000)`).
    #[test]
    fn draws_equal_numpys() {
        let cases: [(u64, [f64; 3], f64); 5] = [
            (
                0,
                [0.6369616873214543, 0.2697867137638703, 0.04097352393619469],
                3547.846749285817,
            ),
            (
                1,
                [0.5118216247002567, 0.9504636963259353, 0.14415961271963373],
                3047.286498801027,
            ),
            (
                42,
                [0.7739560485559633, 0.4388784397520523, 0.8585979199113825],
                4095.8241942238533,
            ),
            (
                9_223_372_036_854_788_153,
                [0.4941863433683745, 0.5760172653236889, 0.04269575705039841],
                2976.745373473498,
            ),
            (
                u64::MAX,
                [0.6800266789616931, 0.8453117585624743, 0.007403081599260064],
                3720.1067158467727,
            ),
        ];
        for (seed, draws, u) in cases {
            let mut p = Pcg64::new(seed);
            for d in draws {
                assert_eq!(p.next_f64(), d, "seed {seed}");
            }
            assert_eq!(uniform(seed, 1000.0, 5000.0), u, "seed {seed}");
        }
    }

    #[test]
    fn lane_seeds_equal_agentxs() {
        // Python: int.from_bytes(sha256(b"42:trace_0291:0").digest()[:8], "big") and its uniform draw.
        let s = lane_seed(42, "trace_0291", 0);
        assert_eq!(s, 9_498_404_945_125_676_575);
        assert_eq!(uniform(s, 100.0, 300.0), 280.42176848211807);
    }
}
