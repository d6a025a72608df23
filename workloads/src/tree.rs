//! Session trees: the requests one application session makes, their dependencies and prompt structure.
//! A tree is validated when it is built; nothing here knows about servers or time passing.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// What a request is, within its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A turn of the root agent.
    RootTurn,
    /// A turn of a sub-agent spawned by the root (or by another sub-agent).
    SubagentTurn,
    /// A summarising request issued when the context would pass the compaction threshold.
    Compaction,
}

impl RequestKind {
    /// The kind of an ordinary turn of `agent`: the root's (agent 0) or a sub-agent's.
    pub fn turn_of(agent: u32) -> RequestKind {
        if agent == 0 {
            RequestKind::RootTurn
        } else {
            RequestKind::SubagentTurn
        }
    }

    /// A short lowercase label, as written in records and tables.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::RootTurn => "root_turn",
            RequestKind::SubagentTurn => "subagent_turn",
            RequestKind::Compaction => "compaction",
        }
    }
}

/// A prompt's chain of block ids: one id per full block, the id at `i` identifying the prefix `0..=i`.
///
/// Requests of one agent context share one backing chain, so a tree of long prompts costs little memory.
#[derive(Clone, Debug)]
pub struct Blocks {
    chain: Arc<[u64]>,
    len: u32,
}

impl Blocks {
    /// The first `len` ids of `chain`.
    ///
    /// # Panics
    /// If `len` exceeds the chain's length (a construction bug, not an input error).
    pub fn prefix_of(chain: Arc<[u64]>, len: usize) -> Blocks {
        assert!(
            len <= chain.len(),
            "block prefix {len} longer than chain {}",
            chain.len()
        );
        Blocks {
            chain,
            len: len as u32,
        }
    }

    /// A chain owning exactly these ids.
    pub fn from_vec(ids: Vec<u64>) -> Blocks {
        let len = ids.len();
        Blocks::prefix_of(ids.into(), len)
    }

    /// The ids.
    #[inline]
    pub fn as_slice(&self) -> &[u64] {
        &self.chain[..self.len as usize]
    }

    /// The whole chain these ids are a prefix of (requests of one agent context share it).
    pub fn backing(&self) -> &Arc<[u64]> {
        &self.chain
    }

    /// Number of full blocks.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the prompt has no full block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl PartialEq for Blocks {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Serialize for Blocks {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Blocks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<u64>::deserialize(d).map(Blocks::from_vec)
    }
}

/// One request of a session tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Index of this request inside its tree (requests are stored in a topological order).
    pub id: u32,
    /// Agent that issues it: 0 is the root agent, sub-agents count up from 1.
    pub agent: u32,
    /// Root turn, sub-agent turn or compaction.
    pub kind: RequestKind,
    /// Requests (by `id`, all smaller than this one's) that must complete before this one is sent.
    pub deps: Vec<u32>,
    /// Think time in nanoseconds: measured from the last dependency's completion to the send
    /// (end-to-start); for a request without dependencies, from the start of the tree.
    pub think_ns: u64,
    /// Prompt length in tokens (cached or not).
    pub input_tokens: u32,
    /// Output length in tokens that the request asks for.
    pub output_tokens: u32,
    /// True for requests of a sub-agent launched in the background: they gate no later request.
    pub background: bool,
    /// The root turn this request belongs to (a sub-agent's requests carry the turn that spawned them).
    pub turn: u32,
    /// Block ids of the prompt's full blocks.
    pub blocks: Blocks,
}

impl Request {
    /// Prompt tokens after the last full block.
    pub fn tail_tokens(&self, block_size: u32) -> u32 {
        self.input_tokens - self.blocks.len() as u32 * block_size
    }

    /// Whether prompt and output together pass `context_limit` tokens: such a request is never sent, by
    /// the simulator or by a real replay, and fails as a context overflow.
    #[inline]
    pub fn overflows(&self, context_limit: u32) -> bool {
        self.input_tokens as u64 + self.output_tokens as u64 > context_limit as u64
    }
}

/// Why a tree is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The tree has no request.
    #[error("the tree has no request")]
    Empty,
    /// Block size zero.
    #[error("block_size must be positive")]
    ZeroBlockSize,
    /// A request's `id` is not its position.
    #[error("requests[{index}].id: is {id}, expected {index} (ids are positions)")]
    IdNotPosition {
        /// Position in the list.
        index: usize,
        /// The id found.
        id: u32,
    },
    /// A dependency that is not an earlier request of the tree.
    #[error("requests[{index}].deps: {dep} is not an earlier request of the tree")]
    BadDependency {
        /// Position of the request.
        index: usize,
        /// The offending dependency.
        dep: u32,
    },
    /// More full blocks than the prompt has tokens for.
    #[error("requests[{index}].blocks: {blocks} blocks of {block_size} tokens exceed input_tokens {input}")]
    ChainTooLong {
        /// Position of the request.
        index: usize,
        /// Blocks given.
        blocks: usize,
        /// Tokens per block.
        block_size: u32,
        /// Prompt length.
        input: u32,
    },
    /// A request that asks for no output.
    #[error("requests[{index}].output_tokens: must be at least 1")]
    NoOutput {
        /// Position of the request.
        index: usize,
    },
    /// A request with an empty prompt (no server accepts one: the rule is the same for the
    /// simulator, `serve` and every importer).
    #[error("requests[{index}].input_tokens: must be at least 1")]
    NoInput {
        /// Position of the request.
        index: usize,
    },
    /// Recorded arrival times that are not one per request.
    #[error("arrivals_ns: {given} times for {requests} requests (one per request)")]
    ArrivalsLength {
        /// Times given.
        given: usize,
        /// Requests in the tree.
        requests: usize,
    },
}

/// One application session: a DAG of requests, validated on construction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionTree {
    /// Identifies the session independently of the lane that replays it.
    pub session_id: u64,
    /// Tokens per block of the `blocks` chains.
    pub block_size: u32,
    requests: Vec<Request>,
    /// When each request arrived in the recorded trace, nanoseconds on the trace's own clock (one per
    /// request, by id); only traces of arrivals (Mooncake, Bailian, the `requests` format) have them.
    /// `--arrivals trace` replays them; a closed-loop replay ignores them.
    #[serde(skip_serializing_if = "Option::is_none")]
    arrivals_ns: Option<Vec<u64>>,
    /// Block ids the trace declares to be the application's own prefix (an agent's system prompt
    /// and tools, the same in every session of it): a fresh repeat of the tree keeps them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    app_prefix: Vec<u64>,
    /// The recorded clock and stream structure, for trees read from timed traces (the AgentX
    /// protocol follows it; [`SessionTree::derived_recording`] stands in for trees without one).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_recorded"
    )]
    recorded: Option<Arc<crate::recorded::Recorded>>,
}

impl SessionTree {
    /// A recording for a tree that has none: each request starts its think time after the latest of
    /// its dependencies started (service takes no recorded time), each agent is a stream in a scope of
    /// its own, spawned by the request its first request depends on and joined by the request that
    /// depends on its last; no barriers. `trace_id` names it.
    pub fn derived_recording(&self, trace_id: String) -> crate::recorded::Recorded {
        let tree = self;
        let reqs = tree.requests();
        let mut start_ns = vec![0i64; reqs.len()];
        for r in reqs {
            let after = r
                .deps
                .iter()
                .map(|&d| start_ns[d as usize])
                .max()
                .unwrap_or(0);
            start_ns[r.id as usize] = after.saturating_add(r.think_ns.min(i64::MAX as u64) as i64);
        }
        let agents = tree.agents();
        let mut first: Vec<Option<u32>> = vec![None; agents];
        let mut last: Vec<Option<u32>> = vec![None; agents];
        for r in reqs {
            first[r.agent as usize].get_or_insert(r.id);
            last[r.agent as usize] = Some(r.id);
        }
        let mut streams = Vec::with_capacity(agents);
        let mut branches: Vec<(u32, Option<u32>)> = Vec::new();
        for a in 0..agents {
            let name = if a == 0 {
                trace_id.clone()
            } else {
                format!("{trace_id}::sa:{a}")
            };
            let spawn = (a > 0)
                .then(|| {
                    let f = first[a]?;
                    let deps = &reqs[f as usize].deps;
                    // A sub-agent waiting for nothing started with the session: its first call.
                    let parent = if deps.is_empty() {
                        0
                    } else {
                        deps.iter()
                            .copied()
                            .find(|&d| reqs[d as usize].agent != a as u32)?
                    };
                    let l = last[a]?;
                    let join = reqs
                        .iter()
                        .find(|r| r.agent != a as u32 && r.deps.contains(&l) && !r.background)
                        .map(|r| r.id);
                    let key = (parent, join);
                    let branch = match branches.iter().position(|&b| b == key) {
                        Some(b) => b,
                        None => {
                            branches.push(key);
                            branches.len() - 1
                        }
                    } as u32;
                    Some(crate::recorded::Spawn {
                        parent,
                        join,
                        branch,
                        branch_start_ns: start_ns[f as usize],
                    })
                })
                .flatten();
            streams.push(crate::recorded::Stream {
                name,
                scope: a as u32,
                spawn,
            });
        }
        // A branch starts when its earliest stream's first request does.
        for b in 0..branches.len() as u32 {
            let start = streams
                .iter()
                .filter_map(|s| s.spawn.filter(|sp| sp.branch == b))
                .map(|sp| sp.branch_start_ns)
                .min()
                .unwrap_or(0);
            for s in streams.iter_mut() {
                if let Some(sp) = s.spawn.as_mut().filter(|sp| sp.branch == b) {
                    sp.branch_start_ns = start;
                }
            }
        }
        crate::recorded::Recorded {
            trace_id,
            start_ns,
            api_ns: vec![None; reqs.len()],
            streams,
            barriers: vec![Vec::new(); reqs.len()],
        }
    }

    /// Validates and builds a tree: ids are positions, dependencies point to earlier requests
    /// (so the graph is a DAG), block chains fit the prompts, every request asks for output.
    pub fn new(
        session_id: u64,
        block_size: u32,
        requests: Vec<Request>,
    ) -> Result<Self, TreeError> {
        if requests.is_empty() {
            return Err(TreeError::Empty);
        }
        if block_size == 0 {
            return Err(TreeError::ZeroBlockSize);
        }
        for (index, r) in requests.iter().enumerate() {
            if r.id as usize != index {
                return Err(TreeError::IdNotPosition { index, id: r.id });
            }
            if let Some(&dep) = r.deps.iter().find(|&&d| d as usize >= index) {
                return Err(TreeError::BadDependency { index, dep });
            }
            if r.blocks.len() as u64 * block_size as u64 > r.input_tokens as u64 {
                return Err(TreeError::ChainTooLong {
                    index,
                    blocks: r.blocks.len(),
                    block_size,
                    input: r.input_tokens,
                });
            }
            if r.output_tokens == 0 {
                return Err(TreeError::NoOutput { index });
            }
            if r.input_tokens == 0 {
                return Err(TreeError::NoInput { index });
            }
        }
        Ok(SessionTree {
            session_id,
            block_size,
            requests,
            arrivals_ns: None,
            app_prefix: Vec::new(),
            recorded: None,
        })
    }

    /// The same tree with its recorded clock (one entry per request and per agent).
    ///
    /// # Panics
    /// If the recording's lengths do not match the tree (a construction bug, not an input error).
    pub fn with_recorded(mut self, recorded: Option<Arc<crate::recorded::Recorded>>) -> Self {
        if let Some(r) = &recorded {
            assert_eq!(
                r.start_ns.len(),
                self.requests.len(),
                "one start per request"
            );
            assert_eq!(r.streams.len(), self.agents(), "one stream per agent");
        }
        self.recorded = recorded;
        self
    }

    /// The recorded clock, for trees read from timed traces.
    pub fn recorded(&self) -> Option<&Arc<crate::recorded::Recorded>> {
        self.recorded.as_ref()
    }

    /// The same tree with recorded arrival times, one per request (by id).
    pub fn with_arrivals(mut self, arrivals_ns: Vec<u64>) -> Result<Self, TreeError> {
        if arrivals_ns.len() != self.requests.len() {
            return Err(TreeError::ArrivalsLength {
                given: arrivals_ns.len(),
                requests: self.requests.len(),
            });
        }
        self.arrivals_ns = Some(arrivals_ns);
        Ok(self)
    }

    /// The same tree with these block ids declared the application's prefix (ids the tree does not
    /// use are kept too: they name content other sessions hold).
    pub fn with_app_prefix(mut self, mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        self.app_prefix = ids;
        self
    }

    /// Block ids declared the application's prefix (sorted), empty if the trace declared none.
    pub fn app_prefix(&self) -> &[u64] {
        &self.app_prefix
    }

    /// Recorded arrival times, one per request, if the trace had them.
    pub fn arrivals_ns(&self) -> Option<&[u64]> {
        self.arrivals_ns.as_deref()
    }

    /// The earliest recorded arrival of the tree, if the trace had arrival times.
    pub fn first_arrival_ns(&self) -> Option<u64> {
        self.arrivals_ns
            .as_ref()
            .and_then(|a| a.iter().min().copied())
    }

    /// The requests, in a topological order.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// The longest context any request reaches: its prompt plus its output (at least one token), as
    /// AgentX's `--max-context-length` measures a trace.
    pub fn peak_context(&self) -> u64 {
        self.requests
            .iter()
            .map(|r| r.input_tokens as u64 + r.output_tokens.max(1) as u64)
            .max()
            .unwrap_or(0)
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Always false: a valid tree has at least one request.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Distinct agents (root plus sub-agents).
    pub fn agents(&self) -> usize {
        self.requests
            .iter()
            .map(|r| r.agent)
            .max()
            .map_or(0, |m| m as usize + 1)
    }

    /// Number of root turns (the highest turn index plus one).
    pub fn root_turns(&self) -> u32 {
        self.requests
            .iter()
            .filter(|r| r.kind == RequestKind::RootTurn)
            .count() as u32
    }

    /// Same tree under another session id (a fresh repeat of a finite trace takes one).
    pub fn with_session_id(mut self, session_id: u64) -> Self {
        self.session_id = session_id;
        self
    }
}

fn serialize_recorded<S: Serializer>(
    r: &Option<Arc<crate::recorded::Recorded>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    r.as_deref().serialize(s)
}

impl<'de> Deserialize<'de> for SessionTree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            session_id: u64,
            block_size: u32,
            requests: Vec<Request>,
            #[serde(default)]
            arrivals_ns: Option<Vec<u64>>,
            #[serde(default)]
            app_prefix: Vec<u64>,
            #[serde(default)]
            recorded: Option<crate::recorded::Recorded>,
        }
        let raw = Raw::deserialize(d)?;
        let mut tree = SessionTree::new(raw.session_id, raw.block_size, raw.requests)
            .map_err(serde::de::Error::custom)?
            .with_app_prefix(raw.app_prefix);
        if let Some(r) = raw.recorded {
            r.check(tree.len(), tree.agents())
                .map_err(serde::de::Error::custom)?;
            tree = tree.with_recorded(Some(Arc::new(r)));
        }
        match raw.arrivals_ns {
            Some(a) => tree.with_arrivals(a).map_err(serde::de::Error::custom),
            None => Ok(tree),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u32, deps: Vec<u32>, blocks: usize, input: u32) -> Request {
        Request {
            id,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps,
            think_ns: 0,
            blocks: Blocks::from_vec((0..blocks as u64).collect()),
            input_tokens: input,
            output_tokens: 1,
            background: false,
            turn: id,
        }
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Vec<Request>, Option<TreeError>)> = vec![
            (vec![req(0, vec![], 2, 128), req(1, vec![0], 3, 200)], None),
            (vec![], Some(TreeError::Empty)),
            (
                vec![req(1, vec![], 0, 1)],
                Some(TreeError::IdNotPosition { index: 0, id: 1 }),
            ),
            (
                vec![req(0, vec![0], 0, 1)],
                Some(TreeError::BadDependency { index: 0, dep: 0 }),
            ),
            (
                vec![req(0, vec![], 0, 1), req(1, vec![5], 0, 1)],
                Some(TreeError::BadDependency { index: 1, dep: 5 }),
            ),
            (
                vec![req(0, vec![], 0, 0)],
                Some(TreeError::NoInput { index: 0 }),
            ),
            (
                vec![req(0, vec![], 3, 191)],
                Some(TreeError::ChainTooLong {
                    index: 0,
                    blocks: 3,
                    block_size: 64,
                    input: 191,
                }),
            ),
        ];
        for (requests, want) in cases {
            assert_eq!(SessionTree::new(1, 64, requests).err(), want);
        }
    }

    #[test]
    fn tail_tokens_are_what_the_blocks_leave() {
        let r = req(0, vec![], 2, 130);
        assert_eq!(r.tail_tokens(64), 2);
    }
}
