//! How a closed-loop replay repeats a finite trace: the same trees again (`same`), or new sessions shaped
//! like them (`fresh`: the content no other session has is re-salted on every pass). Pure; no IO.

use crate::generator::TreeSource;
use crate::hash::mix2;
use crate::import::Trace;
use crate::tree::{Blocks, Request, SessionTree};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Salt of the block ids of a repeated pass (mixed with the seed and the pass number).
const PASS_SALT: u64 = 0x7EE5_A1D5_0F2E_5000;

/// What a closed-loop replay does when it has used every tree of a trace (or when more lanes run than
/// the trace has trees).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceRepeat {
    /// Every pass after the first is a new set of sessions: each tree's block ids are re-salted, except
    /// the ids more than one agent of the file uses and those the trace declares the application's
    /// prefix (a Weka trace's `system_tokens` + `tool_tokens`), so a repeat hits
    /// the prefix cache exactly where a new session of the same application would. The seed rotates
    /// which tree each lane starts with.
    #[default]
    Fresh,
    /// The same trees, ids and all, again and again, for every seed: a repeat finds its whole prompt
    /// cached, as when the very same sessions are replayed twice.
    Same,
}

impl TraceRepeat {
    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            TraceRepeat::Fresh => "fresh",
            TraceRepeat::Same => "same",
        }
    }

    /// Parses `fresh` or `same`.
    pub fn parse(text: &str) -> Option<TraceRepeat> {
        match text {
            "fresh" => Some(TraceRepeat::Fresh),
            "same" => Some(TraceRepeat::Same),
            _ => None,
        }
    }
}

/// Block ids more than one agent of a trace uses (an agent is one tree's root or one of its
/// sub-agents), and those a tree declares the application's prefix (`SessionTree::app_prefix`):
/// content that different sessions share, kept when a pass is re-salted.
#[derive(Debug, Default)]
pub struct SharedIds {
    ids: std::collections::HashSet<u64>,
}

impl SharedIds {
    /// Counts, for every id, the distinct agents using it.
    pub fn of(trees: &[Arc<SessionTree>]) -> SharedIds {
        // id → (last agent that used it, whether a second agent has)
        let mut seen: HashMap<u64, (u64, bool)> = HashMap::new();
        let mut declared = Vec::new();
        for (t, tree) in trees.iter().enumerate() {
            declared.extend_from_slice(tree.app_prefix());
            for r in tree.requests() {
                let agent = ((t as u64) << 32) | r.agent as u64;
                for &id in r.blocks.as_slice() {
                    let e = seen.entry(id).or_insert((agent, false));
                    if e.0 != agent {
                        e.1 = true;
                    }
                }
            }
        }
        SharedIds {
            ids: seen
                .into_iter()
                .filter_map(|(id, (_, shared))| shared.then_some(id))
                .chain(declared)
                .collect(),
        }
    }

    /// Whether `id` is shared: used by more than one agent, or declared the application's prefix.
    pub fn contains(&self, id: u64) -> bool {
        self.ids.contains(&id)
    }

    /// How many ids are shared.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no id is shared.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A trace's trees as an endless stream of new sessions (`TraceRepeat::Fresh`) for one seed.
pub struct FreshRepeats {
    trace: Arc<Trace>,
    seed: u64,
    shared: Arc<OnceLock<SharedIds>>,
}

impl FreshRepeats {
    /// The stream of `seed`; `shared` is computed on first use and may be shared between seeds.
    pub fn new(trace: Arc<Trace>, seed: u64, shared: Arc<OnceLock<SharedIds>>) -> FreshRepeats {
        FreshRepeats {
            trace,
            seed,
            shared,
        }
    }

    fn shared(&self) -> &SharedIds {
        self.shared
            .get_or_init(|| SharedIds::of(self.trace.trees()))
    }
}

impl TreeSource for FreshRepeats {
    fn tree(&self, k: u64) -> Arc<SessionTree> {
        let trees = self.trace.trees();
        let n = trees.len() as u64;
        let position = k.wrapping_add(self.seed);
        let (pass, index) = (position / n, position % n);
        let tree = &trees[index as usize];
        if pass == 0 {
            return tree.clone();
        }
        let salt = mix2(mix2(PASS_SALT, self.seed), pass);
        Arc::new(resalted(tree, salt, self.shared()).with_session_id(tree.session_id + pass * n))
    }

    fn finite_len(&self) -> Option<u64> {
        self.trace.finite_len()
    }
}

/// A tree as a new instance behind its own cache-bust marker (AgentX's, one per tree and pass): every
/// block id mixed with the instance's salt except the tree's declared application prefix (the system
/// prompt that precedes the marker), so nothing else is shared with any other instance. Marked lazily:
/// a request's ids are mixed the first time it is asked for (a replay sends a small part of a long
/// session), each chain the requests of one agent share once.
pub struct Marked {
    tree: Arc<SessionTree>,
    salt: u64,
    keep: SharedIds,
    requests: Vec<OnceLock<Request>>,
    chains: std::sync::Mutex<HashMap<usize, Arc<[u64]>>>,
}

impl Marked {
    /// `tree` behind the marker `salt`.
    pub fn new(tree: Arc<SessionTree>, salt: u64) -> Marked {
        let keep = SharedIds {
            ids: tree.app_prefix().iter().copied().collect(),
        };
        let requests = (0..tree.len()).map(|_| OnceLock::new()).collect();
        Marked {
            tree,
            salt,
            keep,
            requests,
            chains: Default::default(),
        }
    }

    /// The tree as it was (unmarked): its structure, and what a real replay renders (whose marker is
    /// text in the prompt).
    pub fn tree(&self) -> &Arc<SessionTree> {
        &self.tree
    }

    /// Request `id` with its block ids marked.
    pub fn request(&self, id: u32) -> &Request {
        self.requests[id as usize].get_or_init(|| {
            let r = &self.tree.requests()[id as usize];
            let chain = r.blocks.backing();
            let key = chain.as_ptr() as usize;
            let mut chains = self.chains.lock().expect("the marker's chain cache");
            let new = chains
                .entry(key)
                .or_insert_with(|| salt_ids(chain, self.salt, &self.keep).into())
                .clone();
            Request {
                blocks: Blocks::prefix_of(new, r.blocks.len()),
                ..r.clone()
            }
        })
    }
}

/// `tree` with every block id not in `keep` mixed with `salt`. Requests that shared one chain share
/// the new one, so the copy costs what the original does.
fn resalted(tree: &SessionTree, salt: u64, keep: &SharedIds) -> SessionTree {
    let mut chains: HashMap<*const u64, Arc<[u64]>> = HashMap::new();
    let requests: Vec<Request> = tree
        .requests()
        .iter()
        .map(|r| {
            let ids = r.blocks.as_slice();
            let chain = r.blocks.backing();
            let new = chains
                .entry(chain.as_ptr())
                .or_insert_with(|| salt_ids(chain, salt, keep).into());
            let blocks = Blocks::prefix_of(new.clone(), ids.len());
            Request {
                blocks,
                ..r.clone()
            }
        })
        .collect();
    let copy = SessionTree::new(tree.session_id, tree.block_size, requests)
        .expect("re-salting keeps a valid tree valid")
        .with_app_prefix(tree.app_prefix().to_vec())
        .with_recorded(tree.recorded().cloned());
    match tree.arrivals_ns() {
        Some(a) => copy
            .with_arrivals(a.to_vec())
            .expect("one arrival per request, as before"),
        None => copy,
    }
}

fn salt_ids(ids: &[u64], salt: u64, keep: &SharedIds) -> Vec<u64> {
    ids.iter()
        .map(|&id| {
            if keep.contains(id) {
                id
            } else {
                mix2(salt, id)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::RequestKind;

    fn request(id: u32, agent: u32, deps: Vec<u32>, ids: Vec<u64>) -> Request {
        Request {
            id,
            agent,
            kind: RequestKind::turn_of(agent),
            deps,
            think_ns: 0,
            input_tokens: ids.len() as u32 * 4,
            output_tokens: 1,
            background: false,
            turn: 0,
            blocks: Blocks::from_vec(ids),
        }
    }

    /// Two trees: both roots start with the system prefix [1, 2]; tree 0's sub-agent and root share
    /// nothing else; id 9 is used by one agent only (twice).
    fn trace() -> Arc<Trace> {
        let a = SessionTree::new(
            0,
            4,
            vec![
                request(0, 0, vec![], vec![1, 2, 9]),
                request(1, 1, vec![0], vec![5, 6]),
                request(2, 0, vec![1], vec![1, 2, 9, 10]),
            ],
        )
        .unwrap();
        let b = SessionTree::new(1, 4, vec![request(0, 0, vec![], vec![1, 2, 7])]).unwrap();
        Arc::new(Trace::new(vec![a, b]).unwrap())
    }

    #[test]
    fn ids_of_more_than_one_agent_are_shared() {
        let shared = SharedIds::of(trace().trees());
        assert!(shared.contains(1) && shared.contains(2));
        for id in [5, 6, 7, 9, 10] {
            assert!(!shared.contains(id), "{id} is one agent's");
        }
        assert_eq!(shared.len(), 2);
    }

    #[test]
    fn the_first_pass_is_the_file_and_later_passes_keep_only_shared_ids() {
        let t = trace();
        let s = FreshRepeats::new(t.clone(), 0, Default::default());
        assert_eq!(*s.tree(0), *t.trees()[0]);
        assert_eq!(*s.tree(1), *t.trees()[1]);
        let again = s.tree(2);
        let first = &t.trees()[0];
        assert_eq!(again.session_id, 2);
        for (r, o) in again.requests().iter().zip(first.requests()) {
            assert_eq!(r.input_tokens, o.input_tokens);
            assert_eq!(r.deps, o.deps);
            for (&x, &y) in r.blocks.as_slice().iter().zip(o.blocks.as_slice()) {
                assert_eq!(x == y, y == 1 || y == 2, "id {y} became {x}");
            }
        }
        // The root's turns still share their prefix inside the pass.
        let root = &again.requests();
        assert_eq!(root[0].blocks.as_slice(), &root[2].blocks.as_slice()[..3]);
        // Another pass, another salt.
        assert_ne!(
            s.tree(4).requests()[0].blocks.as_slice(),
            again.requests()[0].blocks.as_slice()
        );
    }

    #[test]
    fn the_seed_rotates_the_start_and_the_salt() {
        let t = trace();
        let shared = Arc::new(OnceLock::new());
        let s0 = FreshRepeats::new(t.clone(), 0, shared.clone());
        let s1 = FreshRepeats::new(t.clone(), 1, shared);
        assert_eq!(*s1.tree(0), *t.trees()[1]);
        assert_eq!(s1.tree(1).requests().len(), 3, "then tree 0, re-salted");
        assert_ne!(*s1.tree(1), *s0.tree(0));
        assert_eq!(*s1.tree(7), *s1.tree(7), "the same k, the same tree");
    }
}
