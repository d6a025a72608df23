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
    }
}
