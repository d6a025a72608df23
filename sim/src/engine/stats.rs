//! What a replica counts while it runs: totals for the summary and, when asked, one sample per step
//! for timelines.

/// One step's sample, for timelines.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct StepSample {
    /// Replica that ran the step.
    pub replica: u32,
    /// Step start, ns.
    pub start_ns: u64,
    /// Step length, ns.
    pub step_ns: u64,
    /// Sequences running after scheduling.
    pub running: u32,
    /// Sequences waiting after scheduling.
    pub waiting: u32,
    /// Prefill tokens in the step.
    pub prefill_tokens: u32,
    /// Decode sequences in the step.
    pub decode_seqs: u32,
    /// Fraction of KV blocks in use.
    pub kv_occupancy: f64,
}

/// Running totals of a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Steps run.
    pub steps: u64,
    /// Busy time, ns.
    pub busy_ns: u64,
    /// ∫ occupancy dt over steps, in block-fraction × ns.
    pub occupancy_integral: f64,
    /// Highest occupancy seen.
    pub occupancy_max: f64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prompt tokens that were looked up at first admission.
    pub lookup_tokens: u64,
    /// Of those, tokens served from the cache.
    pub hit_tokens: u64,
    /// Speculative verify steps, counted per sequence.
    pub spec_verifies: u64,
    /// Tokens those verify steps emitted.
    pub spec_tokens: u64,
    /// Preemptions that swapped KV to host memory.
    pub swaps: u64,
    /// Steps that compiled a fused-MoE kernel variant ([`Replica::compile_ns`]).
    ///
    /// [`Replica::compile_ns`]: crate::engine::Replica::compile_ns
    pub kernel_compiles: u64,
}

impl EngineStats {
    /// Adds another replica's totals (the maximum occupancy is the larger).
    pub fn add(&mut self, o: &EngineStats) {
        self.steps += o.steps;
        self.busy_ns += o.busy_ns;
        self.occupancy_integral += o.occupancy_integral;
        self.occupancy_max = self.occupancy_max.max(o.occupancy_max);
        self.preemptions += o.preemptions;
        self.lookup_tokens += o.lookup_tokens;
        self.hit_tokens += o.hit_tokens;
        self.spec_verifies += o.spec_verifies;
        self.spec_tokens += o.spec_tokens;
        self.swaps += o.swaps;
        self.kernel_compiles += o.kernel_compiles;
    }
}

/// Sub-buckets per power of two: values are kept to within 1/128 (0.8 %) of themselves.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values above this (about 4.9 hours in ns) are counted at it.
const MAX_VALUE: u64 = (1 << 44) - 1;

/// A distribution of intervals in ns (the gaps between a request's consecutive output tokens) in
/// logarithmic buckets: fixed memory, exact count, mean and maximum, quantiles to within 0.8 %.
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalHistogram {
    counts: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

/// Buckets of values up to [`MAX_VALUE`].
const BUCKETS: usize = (44 - SUB_BITS as usize + 1) * SUB as usize;

impl Default for IntervalHistogram {
    fn default() -> IntervalHistogram {
        IntervalHistogram {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

#[inline]
fn bucket(v: u64) -> usize {
    let v = v.min(MAX_VALUE);
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    ((msb - SUB_BITS + 1) as u64 * SUB + ((v >> (msb - SUB_BITS)) & (SUB - 1))) as usize
}

/// The middle of bucket `i`.
fn bucket_value(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let (octave, sub) = (i / SUB - 1, i % SUB);
    let width = 1u64 << octave;
    ((SUB + sub) << octave) + width / 2
}

impl IntervalHistogram {
    /// Counts `n` intervals of `ns` each (the sum saturates after 584 years of intervals).
    #[inline]
    pub fn add_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.counts[bucket(ns)] += n;
        self.count += n;
        self.sum = self.sum.saturating_add(ns.saturating_mul(n));
        self.max = self.max.max(ns);
    }

    /// Counts one interval.
    #[inline]
    pub fn add(&mut self, ns: u64) {
        self.add_n(ns, 1);
    }

    /// Adds another histogram's intervals.
    pub fn merge(&mut self, o: &IntervalHistogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.count += o.count;
        self.sum = self.sum.saturating_add(o.sum);
        self.max = self.max.max(o.max);
    }

    /// Intervals counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The interval at rank ⌊q (n − 1)⌋ of the sorted intervals (its bucket's middle, never above the
    /// largest), ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = (q.clamp(0.0, 1.0) * (self.count - 1) as f64).floor() as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return bucket_value(i).min(self.max);
            }
        }
        self.max
    }

    /// Count, mean, p50, p90, p99 and maximum, in seconds.
    pub fn quantiles_s(&self) -> serverbench_workloads::Quantiles {
        if self.count == 0 {
            return Default::default();
        }
        serverbench_workloads::Quantiles {
            count: self.count as usize,
            mean: self.sum as f64 / self.count as f64 / 1e9,
            p50: self.quantile_ns(0.5) as f64 / 1e9,
            p90: self.quantile_ns(0.9) as f64 / 1e9,
            p99: self.quantile_ns(0.99) as f64 / 1e9,
            max: self.max as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value lands in a bucket whose middle is within 0.8 % of it; buckets are in value order.
    #[test]
    fn buckets_keep_values_to_within_a_percent() {
        let mut last = 0;
        for v in 0..20_000u64 {
            let b = bucket(v);
            assert!(b >= last, "bucket order at {v}");
            last = b;
        }
        for v in (0..20_000u64).chain((0..440).map(|i| (1u64 << (i / 10)) + i)) {
            let v = v.min(MAX_VALUE);
            let mid = bucket_value(bucket(v));
            assert!(
                mid.abs_diff(v) as f64 <= v as f64 / 128.0 + 0.5,
                "{v} → {mid}"
            );
        }
    }

    /// Quantiles of a known sample: exact count, mean and maximum; quantiles within 1 %.
    #[test]
    fn quantiles_of_a_known_sample() {
        let mut h = IntervalHistogram::default();
        for v in 1..=1000u64 {
            h.add(v * 1_000_000);
        }
        let mut other = IntervalHistogram::default();
        other.add_n(2_000_000_000, 10);
        h.merge(&other);
        let q = h.quantiles_s();
        assert_eq!(q.count, 1010);
        assert!((q.mean - (500.5e6 * 1000.0 + 2e10) / 1010.0 / 1e9).abs() < 1e-12);
        assert_eq!(q.max, 2.0);
        let within = |got: f64, want: f64| (got - want).abs() <= want * 0.01;
        assert!(within(q.p50, 0.505), "{}", q.p50);
        assert!(within(q.p90, 0.909), "{}", q.p90);
        assert!(q.p99 >= 0.99 && q.p99 <= 2.0, "{}", q.p99);
        assert_eq!(IntervalHistogram::default().quantiles_s().count, 0);
    }
}
