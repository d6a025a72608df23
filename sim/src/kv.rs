//! Paged KV memory with a prefix cache: a radix tree of block runs with reference counts,
//! eviction of unreferenced leaves in least-recently-used order, and block accounting that never
//! exceeds capacity. A node names its blocks by a prompt they came from (hashes computed on demand),
//! so caching a long prompt costs no per-block work. With physical paging on (the CUDA engine), every
//! block also has a physical id, so sequences get real block tables and cached prefixes are reused in
//! place.
//! Pure bookkeeping: no time, no IO.

use serverbench_workloads::hash::mix2;
use serverbench_workloads::Blocks;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A bookkeeping invariant that does not hold (found by an `audit`): a bug, never an input error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuditError(pub String);

impl From<String> for AuditError {
    fn from(s: String) -> Self {
        AuditError(s)
    }
}

/// The root of the radix tree (holds no block).
pub const ROOT: u32 = 0;

/// A hasher for keys that are already well mixed.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Map = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

/// A prompt's engine blocks, named by hashes: engine block `i` (`engine_block_size` tokens) by the
/// workload block holding its last token (the workload's chain ids identify their whole prefix) and its
/// offset there. Cheap to clone (the chain is shared), so a cache node keeps one and computes its
/// blocks' hashes when a lookup compares them.
#[derive(Clone, Debug)]
pub struct PromptBlocks {
    chain: Blocks,
    workload_block_size: u32,
    engine_block_size: u32,
}

impl PromptBlocks {
    /// The engine blocks of a prompt whose workload blocks (`workload_block_size` tokens each) are `chain`.
    pub fn new(chain: Blocks, workload_block_size: u32, engine_block_size: u32) -> PromptBlocks {
        PromptBlocks {
            chain,
            workload_block_size,
            engine_block_size,
        }
    }

    /// Whole engine blocks the prompt's workload blocks cover.
    pub fn engine_blocks(&self) -> u32 {
        (self.chain.len() as u64 * self.workload_block_size as u64 / self.engine_block_size as u64)
            as u32
    }

    /// The hash of engine block `i`.
    #[inline]
    pub fn hash(&self, i: u32) -> u64 {
        let (wbs, ebs) = (
            self.workload_block_size as u64,
            self.engine_block_size as u64,
        );
        let end = (i as u64 + 1) * ebs;
        mix2(self.chain.as_slice()[((end - 1) / wbs) as usize], end % wbs)
    }
}

#[derive(Clone, Debug)]
struct Node {
    parent: u32,
    /// The prompt this node's blocks came from (`None` for the root and free nodes)...
    prompt: Option<PromptBlocks>,
    /// ...and where in it they are: engine blocks `first..first + len`.
    first: u32,
    len: u32,
    /// Physical block ids, one per block (empty unless paging is on).
    phys: Vec<u32>,
    refs: u32,
    children: u32,
    last_use: u64,
    /// Blocks from the root through this node's last block.
    end: u32,
    /// The last [`PrefixCache::repeated_path_blocks`] call that walked through this node.
    mark: u32,
}

/// The result of looking a prompt up in the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// Deepest node matched completely.
    pub node: u32,
    /// Blocks matched, counting from the lookup's start.
    pub blocks: u32,
    /// A node matched only in part: (node, blocks of it matched).
    pub partial: Option<(u32, u32)>,
    /// Matched blocks that are currently unreferenced (they stop being evictable once acquired).
    pub evictable: u64,
}

/// The radix tree of cached prompt blocks.
#[derive(Clone, Debug)]
pub struct PrefixCache {
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    children: Map,
    lru: BTreeSet<(u64, u32)>,
    cached: u64,
    evictable: u64,
    clock: u64,
    paged: bool,
    /// Physical blocks the cache let go of (evicted, or duplicates at insert), for the pool to take back.
    released: Vec<u32>,
    /// Calls of [`PrefixCache::repeated_path_blocks`] so far (the value nodes are marked with).
    walks: u32,
    /// Evict the most recently used unreferenced leaves first instead of the least recently used.
    pub newest_first: bool,
}

impl Node {
    /// The hash of the node's `j`-th block.
    #[inline]
    fn hash(&self, j: u32) -> u64 {
        self.prompt
            .as_ref()
            .expect("a live node below the root")
            .hash(self.first + j)
    }
}

impl Default for PrefixCache {
    fn default() -> Self {
        PrefixCache {
            nodes: vec![Node {
                parent: ROOT,
                prompt: None,
                first: 0,
                len: 0,
                phys: Vec::new(),
                refs: 0,
                children: 0,
                last_use: 0,
                end: 0,
                mark: 0,
            }],
            free_nodes: Vec::new(),
            children: Map::default(),
            lru: BTreeSet::new(),
            cached: 0,
            evictable: 0,
            clock: 0,
            paged: false,
            released: Vec::new(),
            walks: 0,
            newest_first: false,
        }
    }
}

#[inline]
fn key(node: u32, hash: u64) -> u64 {
    mix2(node as u64, hash)
}

impl PrefixCache {
    /// Blocks held by the tree.
    pub fn cached_blocks(&self) -> u64 {
        self.cached
    }

    /// Blocks of the tree that no sequence references (they can be evicted).
    pub fn evictable_blocks(&self) -> u64 {
        self.evictable
    }

    /// Longest cached prefix of blocks `start..n` of `prompt` below `from` (which covers blocks
    /// `0..start`).
    pub fn lookup(&self, from: u32, start: u32, n: u32, prompt: &PromptBlocks) -> Match {
        let h = |i| prompt.hash(i);
        let mut m = Match {
            node: from,
            blocks: 0,
            partial: None,
            evictable: 0,
        };
        let mut pos = start;
        while pos < n {
            let first = h(pos);
            let Some(&child) = self.children.get(&key(m.node, first)) else {
                break;
            };
            let c = &self.nodes[child as usize];
            if c.hash(0) != first {
                break; // a key collision, not a match
            }
            let len = c.len;
            let avail = len.min(n - pos);
            let k = if h(pos + avail - 1) == c.hash(avail - 1) {
                avail
            } else {
                // Chained hashes: equality at i implies equality before i, so the match is a prefix.
                let (mut lo, mut hi) = (1u32, avail - 1); // h(pos+lo-1) matches; find the largest such lo
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if h(pos + mid - 1) == c.hash(mid - 1) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            };
            if c.refs == 0 {
                m.evictable += k as u64;
            }
            pos += k;
            m.blocks += k;
            if k < len {
                m.partial = Some((child, k));
                break;
            }
            m.node = child;
        }
        m
    }

    /// References the matched blocks for one more sequence (splitting a partly matched node) and
    /// returns the sequence's new deepest node. `stop` is the node the sequence already references.
    pub fn acquire(&mut self, m: &Match, stop: u32) -> u32 {
        let deepest = match m.partial {
            Some((node, k)) => self.split(node, k),
            None => m.node,
        };
        self.clock += 1;
        let mut n = deepest;
        while n != stop && n != ROOT {
            let node = &mut self.nodes[n as usize];
            if node.refs == 0 {
                self.evictable -= node.len as u64;
                if node.children == 0 {
                    self.lru.remove(&(node.last_use, n));
                }
            }
            node.refs += 1;
            node.last_use = self.clock;
            n = node.parent;
        }
        deepest
    }

    /// Drops one sequence's reference to the path from `deepest` up to the root.
    pub fn release(&mut self, deepest: u32) {
        self.clock += 1;
        let mut n = deepest;
        while n != ROOT {
            let node = &mut self.nodes[n as usize];
            debug_assert!(node.refs > 0, "release of an unreferenced node");
            node.refs -= 1;
            node.last_use = self.clock;
            if node.refs == 0 {
                self.evictable += node.len as u64;
                if node.children == 0 {
                    self.lru.insert((node.last_use, n));
                }
            }
            n = node.parent;
        }
    }

    /// Splits `node` after its first `k` blocks; returns the new head node (the old id keeps the tail,
    /// so the tail's children keep their keys).
    fn split(&mut self, node: u32, k: u32) -> u32 {
        let old = &mut self.nodes[node as usize];
        let (prompt, first) = (old.prompt.clone(), old.first);
        old.first += k;
        old.len -= k;
        let head_phys = if old.phys.is_empty() {
            Vec::new()
        } else {
            let tail = old.phys.split_off(k as usize);
            std::mem::replace(&mut old.phys, tail)
        };
        let (parent, refs, last_use, mark) = (old.parent, old.refs, old.last_use, old.mark);
        let end = old.end - old.len;
        let head = self.new_node(Node {
            parent,
            prompt,
            first,
            len: k,
            phys: head_phys,
            refs,
            children: 1,
            last_use,
            end,
            mark,
        });
        let first_of_head = self.nodes[head as usize].hash(0);
        let first_of_tail = self.nodes[node as usize].hash(0);
        self.children.insert(key(parent, first_of_head), head);
        self.children.insert(key(head, first_of_tail), node);
        self.nodes[node as usize].parent = head;
        head
    }

    fn new_node(&mut self, n: Node) -> u32 {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = n;
                id
            }
            None => {
                self.nodes.push(n);
                self.nodes.len() as u32 - 1
            }
        }
    }

    /// Adds blocks `start..n` of `prompt` below `parent` (which the caller references), reusing what
    /// another sequence cached meanwhile. Returns the new deepest node; the caller references all of it.
    /// With paging, `phys` holds the caller's physical blocks for `start..n`: those another sequence
    /// cached meanwhile are duplicates and are released, the rest move into the new node.
    pub fn insert(
        &mut self,
        parent: u32,
        start: u32,
        n: u32,
        prompt: &PromptBlocks,
        mut phys: Vec<u32>,
    ) -> u32 {
        let m = self.lookup(parent, start, n, prompt);
        let mut deepest = self.acquire(&m, parent);
        let pos = start + m.blocks;
        if self.paged {
            debug_assert_eq!(
                phys.len() as u32,
                n - start,
                "one physical block per inserted block"
            );
            self.released.extend(phys.drain(..m.blocks as usize));
        }
        if pos < n {
            self.clock += 1;
            let end = self.nodes[deepest as usize].end + (n - pos);
            let id = self.new_node(Node {
                parent: deepest,
                prompt: Some(prompt.clone()),
                first: pos,
                len: n - pos,
                phys,
                refs: 1,
                children: 0,
                last_use: self.clock,
                end,
                mark: 0,
            });
            self.children.insert(key(deepest, prompt.hash(pos)), id);
            if deepest != ROOT {
                let p = &mut self.nodes[deepest as usize];
                if p.refs == 0 && p.children == 0 {
                    self.lru.remove(&(p.last_use, deepest));
                }
                p.children += 1;
            }
            self.cached += (n - pos) as u64;
            deepest = id;
        }
        deepest
    }

    /// Starts `n` new walks' marks and returns the last of them: marks from earlier walks are all
    /// below the values returned (cleared when the count wraps around).
    fn new_walks(&mut self, n: u32) -> u32 {
        match self.walks.checked_add(n) {
            Some(w) => self.walks = w,
            None => {
                // the marks would wrap around: clear them so that no stale mark equals a new walk
                self.nodes.iter_mut().for_each(|node| node.mark = 0);
                self.walks = n;
            }
        }
        self.walks
    }

    /// Of the paths from each node of `deepest` up to the root, the blocks that an earlier path of the
    /// list covers too, summed: what the sequences referencing those nodes read more than once when a
    /// step reads all their prefixes. Walks each path only up to the first node an earlier one reached
    /// (all of that node's path was counted then), so a step costs the distinct nodes of its paths.
    pub fn repeated_path_blocks(&mut self, deepest: impl IntoIterator<Item = u32>) -> u64 {
        let walk = self.new_walks(1);
        let mut repeated = 0u64;
        for d in deepest {
            let mut n = d;
            while n != ROOT {
                let node = &mut self.nodes[n as usize];
                if node.mark == walk {
                    repeated += node.end as u64;
                    break;
                }
                node.mark = walk;
                n = node.parent;
            }
        }
        repeated
    }

    /// For each node that two or more of the paths from `deepest` up to the root pass through, calls
    /// `f(node, first block, end block, i)` once for each such path `i` (its index in `deepest`), the
    /// blocks counted from the root: which sequences of a step read the same cached blocks. Costs two
    /// walks of each path.
    pub fn shared_path_runs(&mut self, deepest: &[u32], mut f: impl FnMut(u32, u32, u32, u32)) {
        let more = self.new_walks(2);
        let once = more - 1;
        for &d in deepest {
            let mut n = d;
            while n != ROOT {
                let node = &mut self.nodes[n as usize];
                if node.mark == more {
                    break;
                }
                node.mark = if node.mark == once { more } else { once };
                n = node.parent;
            }
        }
        for (i, &d) in deepest.iter().enumerate() {
            let mut n = d;
            while n != ROOT {
                let node = &self.nodes[n as usize];
                if node.mark == more {
                    f(n, node.end - node.len, node.end, i as u32);
                }
                n = node.parent;
            }
        }
    }

    /// Appends the physical blocks of the path from the root down to `node`, in order (paging only).
    pub fn path_blocks(&self, node: u32, out: &mut Vec<u32>) {
        let start = out.len();
        let mut n = node;
        while n != ROOT {
            let node = &self.nodes[n as usize];
            out.extend(node.phys.iter().rev());
            n = node.parent;
        }
        out[start..].reverse();
    }

    /// Every physical block the cache holds (paging only).
    fn all_phys(&self) -> impl Iterator<Item = u32> + '_ {
        self.nodes.iter().flat_map(|n| n.phys.iter().copied())
    }

    /// Checks block counts, child counts, the LRU set and reference counts (one per holder path).
    pub fn audit(&self, holders: &[u32]) -> Result<(), AuditError> {
        let free: std::collections::HashSet<u32> = self.free_nodes.iter().copied().collect();
        let mut refs = vec![0u32; self.nodes.len()];
        for &h in holders {
            let mut n = h;
            while n != ROOT {
                refs[n as usize] += 1;
                n = self.nodes[n as usize].parent;
            }
        }
        let mut children = vec![0u32; self.nodes.len()];
        let (mut cached, mut evictable) = (0u64, 0u64);
        for (id, node) in self.nodes.iter().enumerate().skip(1) {
            if free.contains(&(id as u32)) {
                continue;
            }
            children[node.parent as usize] += 1;
            cached += node.len as u64;
            if node.refs == 0 {
                evictable += node.len as u64;
            }
            if node.refs != refs[id] {
                return Err(AuditError(format!(
                    "node {id} counts {} references, {} sequences hold it",
                    node.refs, refs[id]
                )));
            }
            if node.len == 0 {
                return Err(AuditError(format!("node {id} is empty")));
            }
            let parent_end = self.nodes[node.parent as usize].end;
            if node.end != parent_end + node.len {
                return Err(AuditError(format!(
                    "node {id} ends {} blocks from the root, its parent {} and it hold {}",
                    node.end, parent_end, node.len
                )));
            }
            if self.paged && node.phys.len() != node.len as usize {
                return Err(AuditError(format!(
                    "node {id} holds {} blocks but {} physical ids",
                    node.len,
                    node.phys.len()
                )));
            }
        }
        for (id, node) in self.nodes.iter().enumerate().skip(1) {
            if free.contains(&(id as u32)) {
                continue;
            }
            if node.children != children[id] {
                return Err(AuditError(format!(
                    "node {id} counts {} children, has {}",
                    node.children, children[id]
                )));
            }
            let leaf = node.refs == 0 && node.children == 0;
            if leaf != self.lru.contains(&(node.last_use, id as u32)) {
                return Err(AuditError(format!(
                    "node {id}: evictable leaf {leaf}, but the LRU set disagrees"
                )));
            }
        }
        if (cached, evictable) != (self.cached, self.evictable) {
            return Err(AuditError(format!("recount gives {cached} cached / {evictable} evictable blocks, counters say {} / {}", self.cached, self.evictable)));
        }
        Ok(())
    }

    /// Evicts up to `want` unreferenced blocks, least recently used leaves first (most recently used
    /// first with `newest_first`), from their tails. Returns the number freed.
    pub fn evict(&mut self, want: u64) -> u64 {
        let mut freed = 0;
        while freed < want {
            let next = if self.newest_first {
                self.lru.iter().next_back()
            } else {
                self.lru.iter().next()
            };
            let Some(&(lu, id)) = next else {
                break;
            };
            let node = &mut self.nodes[id as usize];
            let len = node.len as u64;
            let take = len.min(want - freed);
            freed += take;
            self.cached -= take;
            self.evictable -= take;
            if self.paged {
                let keep = node.phys.len() - take as usize;
                self.released.extend(node.phys.drain(keep..));
            }
            if take < len {
                node.len -= take as u32;
                node.end -= take as u32;
                continue;
            }
            self.lru.remove(&(lu, id));
            let (parent, first) = (node.parent, node.hash(0));
            node.prompt = None;
            node.len = 0;
            node.phys = Vec::new();
            self.children.remove(&key(parent, first));
            self.free_nodes.push(id);
            if parent != ROOT {
                let p = &mut self.nodes[parent as usize];
                p.children -= 1;
                if p.refs == 0 && p.children == 0 {
                    self.lru.insert((p.last_use, parent));
                }
            }
        }
        freed
    }
}

/// KV blocks of one engine replica: a fixed pool shared by sequences' private blocks and the prefix cache.
#[derive(Clone, Debug)]
pub struct KvManager {
    total: u64,
    private: u64,
    /// Free physical block ids (paging only).
    free_phys: Vec<u32>,
    /// The prefix cache.
    pub cache: PrefixCache,
}

impl KvManager {
    /// A pool of `total` blocks.
    pub fn new(total: u64) -> KvManager {
        KvManager {
            total,
            private: 0,
            free_phys: Vec::new(),
            cache: PrefixCache::default(),
        }
    }

    /// A pool of `total` blocks with physical ids `0..total` (for an engine that stores real KV).
    pub fn paged(total: u64) -> KvManager {
        let mut kv = KvManager::new(total);
        assert!(total <= u32::MAX as u64, "physical block ids are 32-bit");
        kv.free_phys = (0..total as u32).rev().collect();
        kv.cache.paged = true;
        kv
    }

    /// True when blocks have physical ids.
    pub fn is_paged(&self) -> bool {
        self.cache.paged
    }

    /// Takes the physical ids of `n` blocks that [`KvManager::allocate`] already counted (paging only).
    pub fn take_phys(&mut self, n: u32, out: &mut Vec<u32>) {
        if !self.cache.paged {
            return;
        }
        self.reclaim();
        let at = self.free_phys.len() - n as usize;
        out.extend(self.free_phys.drain(at..).rev());
    }

    /// Gives physical ids back to the pool (paging only; counts change through [`KvManager::free_private`]).
    pub fn return_phys(&mut self, blocks: impl IntoIterator<Item = u32>) {
        if self.cache.paged {
            self.free_phys.extend(blocks);
        }
    }

    fn reclaim(&mut self) {
        self.free_phys.append(&mut self.cache.released);
    }

    /// Capacity in blocks.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Blocks held by no one and by no cache entry.
    pub fn free(&self) -> u64 {
        self.total - self.private - self.cache.cached_blocks()
    }

    /// Blocks an allocation could get now (free plus evictable).
    pub fn available(&self) -> u64 {
        self.free() + self.cache.evictable_blocks()
    }

    /// Blocks in use by running sequences (private, or cached and referenced).
    pub fn used(&self) -> u64 {
        self.private + self.cache.cached_blocks() - self.cache.evictable_blocks()
    }

    /// Checks the counters against a recount: `private` blocks held by sequences, and the deepest
    /// cache node of each sequence that references one.
    pub fn audit(&self, private: u64, holders: &[u32]) -> Result<(), AuditError> {
        if self.cache.paged {
            let free = (self.free_phys.len() + self.cache.released.len()) as u64;
            if free != self.free() {
                return Err(AuditError(format!(
                    "{free} physical blocks are free, the counters say {}",
                    self.free()
                )));
            }
        }
        if private != self.private {
            return Err(AuditError(format!(
                "sequences hold {private} private blocks, the pool counts {}",
                self.private
            )));
        }
        self.cache.audit(holders)?;
        if self.private + self.cache.cached_blocks() > self.total {
            return Err(AuditError(format!(
                "{} private + {} cached blocks exceed the capacity of {}",
                self.private,
                self.cache.cached_blocks(),
                self.total
            )));
        }
        Ok(())
    }

    /// Checks that every physical id is in exactly one place: a sequence's table, the cache, or the
    /// free list (paging only).
    pub fn audit_phys(&self, tables: &[&[u32]]) -> Result<(), AuditError> {
        let mut seen = vec![false; self.total as usize];
        let free = self.free_phys.iter().chain(&self.cache.released).copied();
        let all = tables
            .iter()
            .flat_map(|t| t.iter().copied())
            .chain(self.cache.all_phys())
            .chain(free);
        let mut count = 0u64;
        for b in all {
            let slot = seen.get_mut(b as usize).ok_or_else(|| {
                format!("physical block {b} is outside the pool of {}", self.total)
            })?;
            if *slot {
                return Err(AuditError(format!("physical block {b} is held twice")));
            }
            *slot = true;
            count += 1;
        }
        if count != self.total {
            return Err(AuditError(format!(
                "{count} physical blocks accounted for, the pool has {}",
                self.total
            )));
        }
        Ok(())
    }

    /// Takes `n` private blocks, evicting cached ones if needed; false (and nothing changes) if they do not fit.
    pub fn allocate(&mut self, n: u64) -> bool {
        if n > self.available() {
            return false;
        }
        let free = self.free();
        if free < n {
            self.cache.evict(n - free);
        }
        self.private += n;
        true
    }

    /// Gives back `n` private blocks.
    pub fn free_private(&mut self, n: u64) {
        debug_assert!(n <= self.private);
        self.private -= n;
    }

    /// Converts `n` private blocks into cache blocks (the cache already counted them when they were inserted).
    pub fn private_became_cached(&mut self, n: u64) {
        self.private -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 12-block prompt (one engine block per workload block) whose first 4 blocks every `prefix`
    /// shares.
    fn chain(prefix: u64) -> PromptBlocks {
        let ids: Vec<u64> = (0..12)
            .map(|i| {
                if i < 4 {
                    1000 + i
                } else {
                    prefix * 1_000_000 + i
                }
            })
            .collect();
        PromptBlocks::new(Blocks::from_vec(ids), 16, 16)
    }

    #[test]
    fn a_shared_prefix_is_found_split_and_reused() {
        let mut c = PrefixCache::default();
        let a = chain(1);
        let n1 = c.insert(ROOT, 0, 10, &a, Vec::new());
        assert_eq!(c.cached_blocks(), 10);
        let b = chain(2);
        let m = c.lookup(ROOT, 0, 8, &b);
        assert_eq!((m.blocks, m.partial.map(|p| p.1)), (4, Some(4)));
        assert_eq!(m.evictable, 0, "the first sequence still references them");
        let d = c.acquire(&m, ROOT);
        let n2 = c.insert(d, 4, 8, &b, Vec::new());
        assert_eq!(c.cached_blocks(), 14);
        c.release(n1);
        assert_eq!(
            c.evictable_blocks(),
            6,
            "only the first sequence's own tail is unreferenced"
        );
        c.release(n2);
        assert_eq!(c.evictable_blocks(), 14);
        assert_eq!(c.evict(3), 3);
        assert_eq!(c.evict(100), 11);
        assert_eq!((c.cached_blocks(), c.evictable_blocks()), (0, 0));
    }

    /// A cache holding chain a (`a_len` blocks) and chain b (`b_len`), which share their first 4 blocks:
    /// the cache, a's and b's deepest nodes, and the node that ends the shared part.
    fn two_chains(a_len: u32, b_len: u32) -> (PrefixCache, u32, u32, u32) {
        let mut c = PrefixCache::default();
        let (a, b) = (chain(1), chain(2));
        let na = c.insert(ROOT, 0, a_len, &a, Vec::new());
        let m = c.lookup(ROOT, 0, b_len, &b);
        let shared = c.acquire(&m, ROOT); // splits a's node after the shared 4 blocks
        let nb = c.insert(shared, 4, b_len, &b, Vec::new());
        (c, na, nb, shared)
    }

    #[test]
    fn eviction_takes_the_least_recently_used_leaf_first() {
        let (a, b) = (chain(1), chain(2));
        let (mut c, na, nb, _) = two_chains(6, 6);
        c.release(na);
        c.release(nb); // b's tail is used more recently
        c.evict(2);
        assert_eq!(c.lookup(ROOT, 0, 6, &a).blocks, 4, "a's tail went first");
        assert_eq!(c.lookup(ROOT, 0, 6, &b).blocks, 6);
    }

    #[test]
    fn repeated_path_blocks_count_shared_prefixes_once_per_extra_reader() {
        let (mut c, na, nb, d) = two_chains(10, 8);
        c.audit(&[na, nb]).unwrap();
        // a: 10 blocks, b: 8; they share 4, which the second reader repeats.
        assert_eq!(c.repeated_path_blocks([na, nb]), 4);
        assert_eq!(c.repeated_path_blocks([nb, na]), 4);
        assert_eq!(c.repeated_path_blocks([na]), 0);
        // a third reader of b's whole path repeats all 8 of its blocks; the same node twice repeats it all.
        assert_eq!(c.repeated_path_blocks([na, nb, nb]), 12);
        assert_eq!(c.repeated_path_blocks([d, nb]), 4);
        // eviction shortens a leaf; the path lengths follow.
        c.release(na);
        assert_eq!(c.evict(2), 2);
        c.audit(&[nb]).unwrap();
    }

    #[test]
    fn shared_path_runs_name_each_shared_node_once_per_reader() {
        let (mut c, na, nb, d) = two_chains(10, 8);
        let runs = |c: &mut PrefixCache, paths: &[u32]| {
            let mut out = Vec::new();
            c.shared_path_runs(paths, |node, from, to, i| out.push((node, from, to, i)));
            out.sort_unstable();
            out
        };
        // a: 10 blocks, b: 8, sharing their first 4 (one node): that node, once for each reader.
        let shared = runs(&mut c, &[na, nb]);
        assert_eq!(shared.len(), 2);
        assert!(shared.iter().all(|&(_, from, to, _)| (from, to) == (0, 4)));
        assert_eq!(shared.iter().map(|r| r.3).collect::<Vec<_>>(), [0, 1]);
        assert!(runs(&mut c, &[na]).is_empty());
        // the same path twice shares all of it; the blocks listed sum to what repeated_path_blocks counts.
        let twice = runs(&mut c, &[nb, na, nb]);
        let per_reader: u32 = twice.iter().filter(|r| r.3 == 1).map(|r| r.2 - r.1).sum();
        assert_eq!(per_reader, 4);
        let b_blocks: u32 = twice.iter().filter(|r| r.3 == 0).map(|r| r.2 - r.1).sum();
        assert_eq!(b_blocks, 8);
        assert_eq!(c.repeated_path_blocks([nb, na, nb]), 12);
        assert_eq!(runs(&mut c, &[d, nb]).len(), 2);
    }

    #[test]
    fn engine_hashes_map_workload_blocks_onto_engine_blocks() {
        let engine_hash = |chain: &[u64], wbs, ebs, i| {
            PromptBlocks::new(Blocks::from_vec(chain.to_vec()), wbs, ebs).hash(i)
        };
        let chain = [11u64, 22, 33];
        // 64-token workload blocks, 16-token engine blocks: 4 engine blocks per workload block.
        let hs: Vec<u64> = (0..12).map(|i| engine_hash(&chain, 64, 16, i)).collect();
        assert_eq!(
            hs.iter().collect::<std::collections::HashSet<_>>().len(),
            12
        );
        let other = [11u64, 22, 99];
        assert_eq!(engine_hash(&other, 64, 16, 7), hs[7]);
        assert_ne!(engine_hash(&other, 64, 16, 8), hs[8]);
        // 16-token workload blocks, 32-token engine blocks: each engine block ends on an odd workload block.
        assert_eq!(engine_hash(&[1, 2, 3, 4], 16, 32, 1), mix2(4, 0));
    }

    #[test]
    fn allocation_never_exceeds_capacity() {
        let mut kv = KvManager::new(10);
        assert!(kv.allocate(7));
        assert!(!kv.allocate(4));
        assert_eq!(kv.used(), 7);
        kv.free_private(7);
        assert!(kv.allocate(10));
    }
}
