//! A sequence inside one replica: the request as the engine sees it, its progress and its KV holdings,
//! named by a [`SeqId`]. Plain data; the scheduler parts of the replica change it.

use crate::kv::PromptBlocks;
use serverbench_workloads::{Blocks, RequestKind};

/// A sequence's slot in its replica (valid from [`crate::Replica::submit`] until the next submit after
/// it finished: slots are reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub(crate) u32);

impl SeqId {
    /// The slot number (for logs and tests).
    pub fn index(self) -> u32 {
        self.0
    }

    #[inline]
    pub(crate) fn at(self) -> usize {
        self.0 as usize
    }
}

/// A request handed to the engine.
#[derive(Clone, Debug)]
pub struct SeqInput {
    /// The caller's tag (returned in events).
    pub tag: u64,
    /// Prompt block chain.
    pub blocks: Blocks,
    /// Tokens per workload block.
    pub workload_block_size: u32,
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens to generate.
    pub output: u32,
    /// Request kind (speculative acceptance may depend on it).
    pub kind: RequestKind,
}

/// What a step did to a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqEvent {
    /// The sequence was scheduled for the first time in this step (its first prefill chunk ran; only
    /// when the replica reports tokens: [`crate::ReplicaOptions::report_tokens`]).
    Admitted {
        /// Caller's tag.
        tag: u64,
    },
    /// The first output token came out at the end of this step.
    FirstToken {
        /// Caller's tag.
        tag: u64,
    },
    /// Output tokens came out at the end of this step (only when the replica reports tokens:
    /// [`crate::ReplicaOptions::report_tokens`]).
    Emitted {
        /// Caller's tag.
        tag: u64,
        /// Tokens emitted by this step.
        count: u32,
    },
    /// The last output token came out; the sequence left the engine.
    Finished {
        /// Caller's tag.
        tag: u64,
        /// The sequence (its progress stays readable until the next submit).
        seq: SeqId,
    },
}

/// A sequence's progress, as the caller may read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqProgress {
    /// Output tokens emitted so far.
    pub generated: u32,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times the sequence was preempted.
    pub preemptions: u32,
    /// Longest gap between two consecutive output tokens, ns (0 before the second token).
    pub max_itl_ns: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Seq {
    pub(crate) tag: u64,
    pub(crate) prompt: PromptBlocks,
    /// Engine blocks of the prompt that can be cached (whole blocks).
    pub(crate) hashable: u32,
    pub(crate) input: u32,
    pub(crate) output: u32,
    /// Tokens whose KV is computed.
    pub(crate) computed: u32,
    pub(crate) generated: u32,
    /// Deepest prefix-cache node this sequence holds a reference on (`ROOT` for none).
    pub(crate) kv_node: u32,
    /// Blocks it shares through the prefix cache...
    pub(crate) shared: u32,
    /// ...and blocks of its own.
    pub(crate) private: u32,
    /// Its prompt blocks went into the prefix cache (or never will).
    pub(crate) inserted: bool,
    pub(crate) admitted: bool,
    pub(crate) progress: SeqProgress,
    pub(crate) done: bool,
    pub(crate) kind: RequestKind,
    /// Keys this request's speculative acceptance draws (a hash of the replica's seed and the tag).
    pub(crate) draw_key: u64,
    /// Tokens whose KV sits in host memory after a swap-out (0 when not swapped).
    pub(crate) swapped: u32,
    /// Physical ids of the private blocks, in order (paging only).
    pub(crate) table: Vec<u32>,
    /// When its last output token came out, ns (engine time).
    pub(crate) last_token_ns: u64,
}

impl Seq {
    /// Tokens the sequence knows: its prompt and the output so far.
    #[inline]
    pub(crate) fn known(&self) -> u32 {
        self.input + self.generated
    }

    /// Tokens still to compute before its next output token.
    #[inline]
    pub(crate) fn remaining(&self) -> u32 {
        self.known() - self.computed
    }

    /// True when its next step is a decode: one token after the last output token.
    #[inline]
    pub(crate) fn is_decoding(&self) -> bool {
        self.generated > 0 && self.remaining() == 1
    }

    /// Whether a step entry of `n` tokens after `start` is a decode (its last output token's KV), not a
    /// prefill chunk.
    #[inline]
    pub(crate) fn is_decode_entry(&self, n: u32, start: u32) -> bool {
        n == 1 && self.generated > 0 && start + 1 == self.known()
    }

    /// Output tokens it still wants.
    #[inline]
    pub(crate) fn output_left(&self) -> u32 {
        self.output - self.generated
    }
}

/// One scheduled entry of the step being built: `tokens` positions of `seq` from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scheduled {
    pub(crate) seq: SeqId,
    pub(crate) tokens: u32,
    pub(crate) start: u32,
}
