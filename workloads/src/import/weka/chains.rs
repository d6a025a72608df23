//! Agent chains from prefix evidence, as AgentX's loader finds them (`weka_agent_chains.py`): a Weka
//! trace often records several agents' calls flattened into one list; a call extends the deepest chain
//! whose last prompt is a whole prefix of its own (same model, ended by then), and otherwise forks a
//! new chain; a fork that continues a chain whose longer state was never used again is spliced back
//! as the same agent's continuation (a compaction seam). Also the preamble rule: a leading throwaway
//! call that shares no prefix with the rest never founds the main chain. Pure; no IO.

use super::schema::Call;

/// Seconds of slack in "ended by then" and join comparisons (AgentX's epsilon).
pub const EPSILON_S: f64 = 1e-6;
/// A seam candidate starting this long after the tail ended...
const SEAM_MAX_GAP_S: f64 = 3600.0;
/// ...and keeping less than this share of the tail's blocks is a new agent, not a continuation.
const SEAM_MIN_OVERLAP: f64 = 0.5;
/// A leading call with at most this much output can be a title-generation preamble.
const PREAMBLE_MAX_OUTPUT: u64 = 64;

/// One call with its position in its `requests` list.
pub type Indexed<'a> = (usize, &'a Call);

/// The chains of a list of calls.
#[derive(Debug)]
pub struct Detection {
    /// Every chain's calls (positions in the input), in chain order; spliced chains are empty.
    pub chains: Vec<Vec<usize>>,
    /// The chain holding the earliest call.
    pub main: usize,
    /// The other live chains, ordered by their first call's `(t, position)`.
    pub workers: Vec<usize>,
}

/// Longest common prefix of two id lists.
pub fn lcp(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `(t, outer index)` order.
fn by_time(a: &Indexed<'_>, b: &Indexed<'_>) -> std::cmp::Ordering {
    a.1.t.total_cmp(&b.1.t).then(a.0.cmp(&b.0))
}

/// Splits off a leading preamble (at most one call): returns `(preamble, rest)`, `rest` in list order.
pub fn split_preamble<'a>(calls: &[Indexed<'a>]) -> (Vec<Indexed<'a>>, Vec<Indexed<'a>>) {
    if calls.len() < 2 {
        return (Vec::new(), calls.to_vec());
    }
    let mut ordered = calls.to_vec();
    ordered.sort_by(by_time);
    let first = ordered[0];
    if first.1.hash_ids.is_empty() {
        return (Vec::new(), calls.to_vec());
    }
    let rest = &ordered[1..];
    let shares_prefix = rest
        .iter()
        .filter(|o| !o.1.hash_ids.is_empty())
        .any(|o| lcp(&first.1.hash_ids, &o.1.hash_ids) > 0);
    if shares_prefix {
        return (Vec::new(), calls.to_vec());
    }
    if first.1.output > PREAMBLE_MAX_OUTPUT {
        let others: std::collections::HashSet<u64> = rest
            .iter()
            .flat_map(|o| o.1.hash_ids.iter().copied())
            .collect();
        if first.1.hash_ids.iter().any(|h| others.contains(h)) {
            return (Vec::new(), calls.to_vec());
        }
    }
    let mut rest = rest.to_vec();
    rest.sort_by_key(|c| c.0);
    (vec![first], rest)
}

#[derive(Clone, Debug)]
struct Fork {
    parent: Option<usize>,
    tail: Option<usize>,
    depth: usize,
    time: f64,
}

#[derive(Clone, Debug, Default)]
struct Chain {
    /// Positions (in the input list) of its calls.
    calls: Vec<usize>,
    fork: Option<Fork>,
    spliced: bool,
    /// Input position of the last call with hash ids.
    tail: Option<usize>,
}

struct Phase1<'a, 'c> {
    calls: &'a [Indexed<'c>],
    chains: Vec<Chain>,
    chain_of: Vec<usize>,
    forks_by_tail: std::collections::BTreeMap<usize, Vec<usize>>,
}

impl Phase1<'_, '_> {
    fn call(&self, pos: usize) -> &Call {
        self.calls[pos].1
    }

    fn append(&mut self, chain: usize, pos: usize) {
        self.chains[chain].calls.push(pos);
        self.chain_of[pos] = chain;
        if !self.call(pos).hash_ids.is_empty() {
            self.chains[chain].tail = Some(pos);
        }
    }

    fn classify(&mut self, pos: usize) {
        let c = self.call(pos);
        if c.hash_ids.is_empty() {
            // No prefix evidence: kept on the main chain, invisible to tails and forks.
            if self.chains.is_empty() {
                self.chains.push(Chain::default());
            }
            self.chains[0].calls.push(pos);
            self.chain_of[pos] = 0;
            return;
        }
        if self.chains.is_empty() {
            self.chains.push(Chain::default());
            self.append(0, pos);
            return;
        }
        if let Some(target) = self.extension_target(pos) {
            self.append(target, pos);
            return;
        }
        let (parent, depth) = self.deepest_lcp(pos);
        if parent.is_none() && self.chains.iter().all(|ch| ch.tail.is_none()) {
            self.append(0, pos);
            return;
        }
        let tail = parent.and_then(|p| self.chains[p].tail);
        let new = self.chains.len();
        self.chains.push(Chain {
            fork: Some(Fork {
                parent,
                tail,
                depth,
                time: c.t,
            }),
            ..Chain::default()
        });
        self.append(new, pos);
        if let (Some(t), true) = (tail, depth > 0) {
            self.forks_by_tail.entry(t).or_default().push(new);
        }
    }

    /// The chain whose last prompt is a whole prefix of this call's, same model, ended by its start;
    /// the deepest wins, then the lowest index.
    fn extension_target(&self, pos: usize) -> Option<usize> {
        let c = self.call(pos);
        let mut best: Option<(usize, usize)> = None;
        for (i, ch) in self.chains.iter().enumerate() {
            let Some(tail) = ch.tail.map(|t| self.call(t)) else {
                continue;
            };
            let tl = tail.hash_ids.len();
            if tl > c.hash_ids.len() || best.is_some_and(|(_, l)| tl <= l) {
                continue;
            }
            if tail.model != c.model || tail.end() > c.t + EPSILON_S {
                continue;
            }
            if c.hash_ids[..tl] == tail.hash_ids[..] {
                best = Some((i, tl));
            }
        }
        best.map(|(i, _)| i)
    }

    /// The chain whose tail shares the longest prefix with this call (ties: the longer tail, then the
    /// lowest index); `(None, 0)` when none shares any.
    fn deepest_lcp(&self, pos: usize) -> (Option<usize>, usize) {
        let h = &self.call(pos).hash_ids;
        let mut best: (Option<usize>, (usize, usize)) = (None, (0, 0));
        for (i, ch) in self.chains.iter().enumerate() {
            let Some(tail) = ch.tail.map(|t| self.call(t)) else {
                continue;
            };
            let d = lcp(&tail.hash_ids, h);
            if d == 0 {
                continue;
            }
            let key = (d, tail.hash_ids.len());
            if key > best.1 {
                best = (Some(i), key);
            }
        }
        (best.0, best.1 .0)
    }

    fn last_hash_call(&self, chain: usize) -> Option<usize> {
        self.chains[chain]
            .calls
            .iter()
            .rev()
            .copied()
            .find(|&p| !self.call(p).hash_ids.is_empty())
    }

    /// Among the forks of a dead tail, the one that continues it: deepest, then earliest, then lowest.
    fn elect(&self, registered: &[usize], tail_pos: usize) -> Option<usize> {
        let tail = self.call(tail_pos);
        let t_end = tail.end();
        let tail_blocks = tail.hash_ids.len();
        let blocked = |ci: usize, f: &Fork| {
            if tail_blocks == 0 {
                return false;
            }
            let gap = self.call(self.chains[ci].calls[0]).t - t_end;
            let overlap = f.depth as f64 / tail_blocks as f64;
            gap > SEAM_MAX_GAP_S && overlap < SEAM_MIN_OVERLAP
        };
        registered
            .iter()
            .copied()
            .filter(|&ci| {
                let ch = &self.chains[ci];
                let Some(f) = &ch.fork else { return false };
                let first = self.call(ch.calls[0]);
                f.depth > 0
                    && t_end <= first.t + EPSILON_S
                    && first.model == tail.model
                    && !blocked(ci, f)
            })
            .max_by(|&a, &b| {
                let (fa, fb) = (
                    self.chains[a].fork.as_ref().expect("filtered"),
                    self.chains[b].fork.as_ref().expect("filtered"),
                );
                fa.depth
                    .cmp(&fb.depth)
                    .then(fb.time.total_cmp(&fa.time))
                    .then(b.cmp(&a))
            })
    }
}

/// Partitions calls into agent chains (AgentX's `detect_agent_chains`, the same rules).
pub fn detect(calls: &[Indexed<'_>]) -> Detection {
    if calls.is_empty() {
        return Detection {
            chains: Vec::new(),
            main: 0,
            workers: Vec::new(),
        };
    }
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by(|&a, &b| by_time(&calls[a], &calls[b]));
    let mut p = Phase1 {
        calls,
        chains: Vec::new(),
        chain_of: vec![0; calls.len()],
        forks_by_tail: Default::default(),
    };
    for &pos in &order {
        p.classify(pos);
    }
    resolve_seams(&mut p);
    let main = p.chain_of[order[0]];
    let mut workers: Vec<usize> = (0..p.chains.len())
        .filter(|&i| !p.chains[i].spliced && i != main)
        .collect();
    workers.sort_by(|&a, &b| by_time(&calls[p.chains[a].calls[0]], &calls[p.chains[b].calls[0]]));
    Detection {
        chains: p
            .chains
            .into_iter()
            .map(|c| if c.spliced { Vec::new() } else { c.calls })
            .collect(),
        main,
        workers,
    }
}

/// Phase 2: splices seam continuations onto tails whose longer state was never extended.
fn resolve_seams(p: &mut Phase1<'_, '_>) {
    // Outer positions to visit, smallest first (a min-heap of tail positions).
    let mut keys: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = p
        .forks_by_tail
        .keys()
        .map(|&k| std::cmp::Reverse(k))
        .collect();
    let mut processed = std::collections::HashSet::new();
    while let Some(std::cmp::Reverse(tail_pos)) = keys.pop() {
        if !processed.insert(tail_pos) {
            continue;
        }
        let owner = p.chain_of[tail_pos];
        if p.last_hash_call(owner) != Some(tail_pos) {
            continue; // the longer state was extended: every fork is a new agent
        }
        let registered: Vec<usize> = p.forks_by_tail[&tail_pos]
            .iter()
            .copied()
            .filter(|&ci| !p.chains[ci].spliced)
            .collect();
        let Some(elected) = p.elect(&registered, tail_pos) else {
            continue;
        };
        let moved = std::mem::take(&mut p.chains[elected].calls);
        for &pos in &moved {
            p.chain_of[pos] = owner;
        }
        p.chains[owner].calls.extend_from_slice(&moved);
        p.chains[elected].calls = moved;
        p.chains[elected].spliced = true;
        let Some(new_tail) = p.last_hash_call(owner) else {
            continue;
        };
        if rekey(p, &registered, elected, owner, new_tail) {
            processed.remove(&new_tail);
            keys.push(std::cmp::Reverse(new_tail));
        }
    }
}

/// Forks of a consumed tail that were not elected are measured against the merged chain's new tail.
fn rekey(
    p: &mut Phase1<'_, '_>,
    registered: &[usize],
    elected: usize,
    owner: usize,
    new_tail: usize,
) -> bool {
    let tail_hash = p.call(new_tail).hash_ids.clone();
    let mut rekeyed = false;
    for &ci in registered {
        if ci == elected || p.chains[ci].spliced || p.chains[ci].fork.is_none() {
            continue;
        }
        let d = lcp(&tail_hash, &p.call(p.chains[ci].calls[0]).hash_ids);
        if d == 0 {
            continue;
        }
        let f = p.chains[ci].fork.as_mut().expect("checked");
        f.tail = Some(new_tail);
        f.depth = d;
        f.parent = Some(owner);
        p.forks_by_tail.entry(new_tail).or_default().push(ci);
        rekeyed = true;
    }
    rekeyed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(t: f64, api: f64, ids: &[u64]) -> Call {
        Call {
            path: String::new(),
            t,
            model: "m".into(),
            input: 64 * ids.len() as u64 + 10,
            output: 100,
            hash_ids: ids.to_vec(),
            api_time: Some(api),
        }
    }

    fn chains_of(calls: &[Call]) -> (Vec<Vec<usize>>, usize) {
        let indexed: Vec<Indexed<'_>> = calls.iter().enumerate().collect();
        let d = detect(&indexed);
        let mut live = vec![d.chains[d.main].clone()];
        live.extend(d.workers.iter().map(|&w| d.chains[w].clone()));
        (live, d.workers.len())
    }

    #[test]
    fn a_growing_conversation_is_one_chain() {
        let calls = [
            call(0.0, 1.0, &[1, 2]),
            call(5.0, 1.0, &[1, 2, 3]),
            call(9.0, 1.0, &[1, 2, 3, 4]),
        ];
        assert_eq!(chains_of(&calls), (vec![vec![0, 1, 2]], 0));
    }

    #[test]
    fn a_parallel_fork_is_a_second_agent_and_a_compaction_is_a_seam() {
        // Two agents fork from [1,2] at once; the main one later compacts to [1,9] and continues.
        let calls = [
            call(0.0, 1.0, &[1, 2]),
            call(2.0, 5.0, &[1, 2, 3]),    // main continues
            call(2.5, 5.0, &[1, 2, 7]),    // worker forks (overlaps the main one)
            call(8.0, 1.0, &[1, 2, 3, 4]), // main
            call(8.5, 1.0, &[1, 2, 7, 8]), // worker
        ];
        let (chains, workers) = chains_of(&calls);
        assert_eq!(workers, 1);
        assert_eq!(chains, vec![vec![0, 1, 3], vec![2, 4]]);
        // A compaction: the prompt shrinks to a shared prefix and nobody goes back to the long one.
        let calls = [
            call(0.0, 1.0, &[1, 2, 3]),
            call(5.0, 1.0, &[1, 2, 3, 4]),
            call(9.0, 1.0, &[1, 5]),
            call(12.0, 1.0, &[1, 5, 6]),
        ];
        assert_eq!(chains_of(&calls), (vec![vec![0, 1, 2, 3]], 0));
    }

    #[test]
    fn a_disjoint_title_call_does_not_found_the_main_chain() {
        let calls = [
            call(0.0, 0.5, &[50]),
            call(1.0, 1.0, &[1, 2]),
            call(4.0, 1.0, &[1, 2, 3]),
        ];
        let indexed: Vec<Indexed<'_>> = calls.iter().enumerate().collect();
        let (pre, rest) = split_preamble(&indexed);
        assert_eq!(pre.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0]);
        assert_eq!(rest.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2]);
        // A long leader that reuses blocks further on is no preamble.
        let mut long = call(0.0, 0.5, &[50, 2]);
        long.output = 1000;
        let calls = [long, call(1.0, 1.0, &[1, 2]), call(4.0, 1.0, &[1, 2, 3])];
        let indexed: Vec<Indexed<'_>> = calls.iter().enumerate().collect();
        assert!(split_preamble(&indexed).0.is_empty());
    }
}
