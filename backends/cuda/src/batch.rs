//! Packing one scheduled step into the flat index arrays the kernels read: token ids, positions, KV
//! slots, prefill tiles, decode splits, block tables and the rows to sample. Host-only: unit-tested
//! without a GPU.

use serde::Serialize;
use std::ops::Range;

/// Units per prefill attention block (the kernel's `PU`): a unit is [`PREFILL_UNIT_QUERIES`] queries of
/// one query head, and a block's units share one KV head.
pub const PREFILL_BLOCK_UNITS: u32 = 8;
/// Queries per prefill attention unit (one warp's rows).
pub const PREFILL_UNIT_QUERIES: u32 = 16;
/// Keys per decode split (the kernel's `SPLIT`).
pub const DECODE_SPLIT: u32 = 256;

/// One sequence's part of a step.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    /// Caller's tag.
    pub tag: u64,
    /// First position computed.
    pub start: u32,
    /// Token ids at positions `start..start + tokens.len()`.
    pub tokens: &'a [u32],
    /// Physical KV blocks of the sequence, in position order (covering every position written).
    pub table: &'a [u32],
    /// Sample the next token from the last position's logits.
    pub emits: bool,
}

/// The batch features a step log records (the cost model's inputs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct StepFeatures {
    /// Prefill chunks: (tokens, tokens already cached before the chunk).
    pub prefill: Vec<(u32, u32)>,
    /// Decode sequences: context before the new token.
    pub decode: Vec<u32>,
    /// KV tokens the decode sequences read, counting each physical block once (distinct blocks × block
    /// size): below the sum of the contexts when sequences share prefix blocks. Logged for a cost model
    /// that charges shared blocks once; absent in logs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_kv_distinct: Option<u64>,
}

/// A step packed for upload: every index array lives in `data`, at the ranges below.
#[derive(Clone, Debug, Default)]
pub struct Packed {
    /// All index arrays, concatenated (one copy to the GPU).
    pub data: Vec<i32>,
    /// Tokens in the step.
    pub tokens: u32,
    /// Token ids.
    pub ids: Range<usize>,
    /// Positions.
    pub pos: Range<usize>,
    /// KV slot (physical block × block size + offset) of each token.
    pub slot: Range<usize>,
    /// Prefill sequences (more than one query).
    pub prefill_seqs: u32,
    /// Prefill attention tiles.
    pub tiles: u32,
    /// Per tile: prefill sequence index.
    pub tile_seq: Range<usize>,
    /// Per tile: first unit (unit `u` is queries 16 (u / group) .. +16 of the group's query head u % group,
    /// within the sequence's chunk).
    pub tile_u0: Range<usize>,
    /// Per prefill sequence: first batch token.
    pub pf_qstart: Range<usize>,
    /// Per prefill sequence: queries.
    pub pf_qlen: Range<usize>,
    /// Per prefill sequence: position of the first query.
    pub pf_pos0: Range<usize>,
    /// Prefill block tables, `prefill_seqs × pf_max_blocks`.
    pub pf_tables: Range<usize>,
    /// Row length of the prefill block tables.
    pub pf_max_blocks: u32,
    /// Decode sequences (exactly one query).
    pub decode_seqs: u32,
    /// Per decode sequence: batch token of its query.
    pub dc_qtok: Range<usize>,
    /// Per decode sequence: keys it attends to (its position + 1).
    pub dc_ctx: Range<usize>,
    /// Decode block tables, `decode_seqs × dc_max_blocks`.
    pub dc_tables: Range<usize>,
    /// Row length of the decode block tables.
    pub dc_max_blocks: u32,
    /// Splits of the longest decode context.
    pub dc_splits: u32,
    /// Batch tokens whose logits are sampled.
    pub sample_rows: Range<usize>,
    /// Tags of the sampled rows, in order.
    pub sample_tags: Vec<u64>,
    /// What the step computed, for the step log.
    pub features: StepFeatures,
}

fn push(data: &mut Vec<i32>, v: impl IntoIterator<Item = i32>) -> Range<usize> {
    let a = data.len();
    data.extend(v);
    a..data.len()
}

fn table_rows(data: &mut Vec<i32>, tables: &[&[u32]], width: u32) -> Range<usize> {
    let a = data.len();
    for t in tables {
        data.extend(t.iter().map(|&b| b as i32));
        data.extend(std::iter::repeat(0).take(width as usize - t.len()));
    }
    a..data.len()
}

/// Physical blocks that appear in at least one of `tables` (a block shared by several sequences counts once).
fn distinct_blocks(tables: &[&[u32]]) -> u64 {
    let top = tables
        .iter()
        .flat_map(|t| t.iter())
        .max()
        .map_or(0, |&b| b as usize + 1);
    let mut seen = vec![false; top];
    let mut count = 0;
    for &b in tables.iter().flat_map(|t| t.iter()) {
        if !std::mem::replace(&mut seen[b as usize], true) {
            count += 1;
        }
    }
    count
}

/// Packs a step. Entries with one token use the decode kernel, longer ones the prefill kernel;
/// `query_group` is the model's query heads per KV head (the prefill tiles depend on it).
pub fn pack(entries: &[Entry], block_size: u32, query_group: u32) -> Packed {
    pack_padded(entries, block_size, query_group, None)
}

/// Decode contexts are padded to a multiple of this for the launch shape of decode-only steps, so that
/// a CUDA graph captured for one step serves the following steps of the same batch size.
pub const DECODE_BUCKET: u32 = 1024;

/// Like [`pack`]; a decode-only step's table stride and split count are those of its longest context
/// rounded up to [`DECODE_BUCKET`] tokens (never past `max_context`), so the launch shape changes only
/// every 1,024 tokens of context. The kernels read each sequence's real context from the step's data.
pub fn pack_padded(
    entries: &[Entry],
    block_size: u32,
    query_group: u32,
    max_context: Option<u32>,
) -> Packed {
    let mut p = Packed::default();
    let (mut ids, mut pos, mut slot) = (Vec::new(), Vec::new(), Vec::new());
    let mut pf: Vec<(i32, i32, i32, &[u32])> = Vec::new();
    let mut dc: Vec<(i32, i32, &[u32])> = Vec::new();
    let mut rows = Vec::new();
    for e in entries {
        let q0 = ids.len() as i32;
        let n = e.tokens.len() as u32;
        let blocks = (e.start + n).div_ceil(block_size) as usize;
        assert!(
            e.table.len() >= blocks,
            "the block table covers the step's positions"
        );
        for (k, &t) in e.tokens.iter().enumerate() {
            let at = e.start + k as u32;
            ids.push(t as i32);
            pos.push(at as i32);
            slot.push((e.table[(at / block_size) as usize] * block_size + at % block_size) as i32);
        }
        let table = &e.table[..blocks];
        if n == 1 {
            dc.push((q0, (e.start + 1) as i32, table));
            p.features.decode.push(e.start);
        } else {
            pf.push((q0, n as i32, e.start as i32, table));
            p.features.prefill.push((n, e.start));
        }
        if e.emits {
            rows.push(q0 + n as i32 - 1);
            p.sample_tags.push(e.tag);
        }
    }
    p.tokens = ids.len() as u32;
    let d = &mut p.data;
    p.ids = push(d, ids);
    p.pos = push(d, pos);
    p.slot = push(d, slot);
    p.prefill_seqs = pf.len() as u32;
    let (mut tseq, mut tu0) = (Vec::new(), Vec::new());
    for (i, &(_, n, _, _)) in pf.iter().enumerate() {
        let units = (n as u32).div_ceil(PREFILL_UNIT_QUERIES) * query_group;
        for u in (0..units).step_by(PREFILL_BLOCK_UNITS as usize) {
            tseq.push(i as i32);
            tu0.push(u as i32);
        }
    }
    p.tiles = tseq.len() as u32;
    p.tile_seq = push(d, tseq);
    p.tile_u0 = push(d, tu0);
    p.pf_qstart = push(d, pf.iter().map(|x| x.0));
    p.pf_qlen = push(d, pf.iter().map(|x| x.1));
    p.pf_pos0 = push(d, pf.iter().map(|x| x.2));
    p.pf_max_blocks = pf.iter().map(|x| x.3.len() as u32).max().unwrap_or(0);
    let tables: Vec<&[u32]> = pf.iter().map(|x| x.3).collect();
    p.pf_tables = table_rows(d, &tables, p.pf_max_blocks);
    p.decode_seqs = dc.len() as u32;
    p.dc_qtok = push(d, dc.iter().map(|x| x.0));
    p.dc_ctx = push(d, dc.iter().map(|x| x.1));
    p.dc_max_blocks = dc.iter().map(|x| x.2.len() as u32).max().unwrap_or(0);
    let mut max_ctx = dc.iter().map(|x| x.1 as u32).max().unwrap_or(0);
    if let (Some(cap), true, false) = (max_context, pf.is_empty(), dc.is_empty()) {
        let cap = cap.div_ceil(DECODE_SPLIT) * DECODE_SPLIT;
        max_ctx = (max_ctx.div_ceil(DECODE_BUCKET) * DECODE_BUCKET)
            .min(cap)
            .max(max_ctx);
        p.dc_max_blocks = p.dc_max_blocks.max(max_ctx.div_ceil(block_size));
    }
    p.dc_splits = max_ctx.div_ceil(DECODE_SPLIT);
    let tables: Vec<&[u32]> = dc.iter().map(|x| x.2).collect();
    if !tables.is_empty() {
        p.features.decode_kv_distinct = Some(distinct_blocks(&tables) * block_size as u64);
    }
    p.dc_tables = table_rows(d, &tables, p.dc_max_blocks);
    p.sample_rows = push(d, rows);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_step_packs_slots_tiles_and_tables() {
        let prompt: Vec<u32> = (100..230).collect();
        let entries = [
            // A 130-token prefill chunk after 20 cached tokens, in blocks 7, 3, 9, ...
            Entry {
                tag: 1,
                start: 20,
                tokens: &prompt,
                table: &[7, 3, 9, 4, 5, 6, 8, 10, 11, 12],
                emits: true,
            },
            // A decode at position 33 (blocks 2, 0, 1): its slot is block 1 × 16 + 1 = 17.
            Entry {
                tag: 2,
                start: 33,
                tokens: &[5],
                table: &[2, 0, 1],
                emits: true,
            },
            // A chunk that does not finish its prompt samples nothing.
            Entry {
                tag: 3,
                start: 0,
                tokens: &prompt[..64],
                table: &[13, 14, 15, 16],
                emits: false,
            },
        ];
        let p = pack(&entries, 16, 4);
        assert_eq!(p.tokens, 130 + 1 + 64);
        let d = &p.data;
        assert_eq!(d[p.pos.clone()][0], 20);
        // Position 20 is offset 4 of logical block 1 -> physical block 3.
        assert_eq!(d[p.slot.clone()][0], 3 * 16 + 4);
        assert_eq!(d[p.slot.clone()][130], 17);
        assert_eq!((p.prefill_seqs, p.decode_seqs), (2, 1));
        // 130 queries, 4 heads per KV head -> 9 groups of 16 x 4 = 36 units -> 5 tiles of 8 units;
        // 64 queries -> 16 units -> 2 tiles.
        assert_eq!(&d[p.tile_seq.clone()], &[0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(&d[p.tile_u0.clone()], &[0, 8, 16, 24, 32, 0, 8]);
        assert_eq!(p.tiles, 7);
        assert_eq!(&d[p.pf_qstart.clone()], &[0, 131]);
        assert_eq!(p.pf_max_blocks, 10);
        assert_eq!(&d[p.pf_tables.clone()][10..14], &[13, 14, 15, 16]);
        assert_eq!(d[p.pf_tables.clone()][14], 0, "short rows are padded");
        assert_eq!(&d[p.dc_ctx.clone()], &[34]);
        assert_eq!(p.dc_splits, 1);
        assert_eq!(&d[p.sample_rows.clone()], &[129, 130]);
        assert_eq!(p.sample_tags, vec![1, 2]);
        assert_eq!(p.features.prefill, vec![(130, 20), (64, 0)]);
        assert_eq!(p.features.decode, vec![33]);
        assert_eq!(p.features.decode_kv_distinct, Some(3 * 16));
    }

    #[test]
    fn prefill_tiles_cover_every_unit_when_the_group_does_not_divide_the_warps() {
        // Qwen3-14B's shape: 5 query heads per KV head. 40 queries -> 3 groups of 16 x 5 = 15 units.
        let prompt: Vec<u32> = (0..40).collect();
        let table: Vec<u32> = (0..3).collect();
        let entries = [Entry {
            tag: 0,
            start: 0,
            tokens: &prompt,
            table: &table,
            emits: true,
        }];
        let p = pack(&entries, 16, 5);
        assert_eq!(&p.data[p.tile_u0.clone()], &[0, 8]);
        assert_eq!(p.tiles, 2);
    }

    #[test]
    #[should_panic(expected = "covers")]
    fn a_table_too_short_for_the_step_is_refused() {
        pack(
            &[Entry {
                tag: 0,
                start: 15,
                tokens: &[1, 2],
                table: &[0],
                emits: true,
            }],
            16,
            4,
        );
    }

    #[test]
    fn decode_only_steps_pad_their_launch_shape_to_a_bucket() {
        let tables: Vec<Vec<u32>> = vec![(0..70).collect(), (100..110).collect()];
        let toks = [vec![5u32], vec![6u32]];
        let entries: Vec<Entry> = [(1100u32, 0usize), (150, 1)]
            .iter()
            .map(|&(start, i)| Entry {
                tag: i as u64,
                start,
                tokens: &toks[i],
                table: &tables[i],
                emits: true,
            })
            .collect();
        let plain = pack(&entries, 16, 4);
        assert_eq!((plain.dc_max_blocks, plain.dc_splits), (69, 5));
        let padded = pack_padded(&entries, 16, 4, Some(40_960));
        // 1,101 tokens → a 2,048-token bucket: 128 blocks of 16, 8 splits of 256.
        assert_eq!((padded.dc_max_blocks, padded.dc_splits), (128, 8));
        assert_eq!(padded.dc_tables.len(), 2 * 128);
        // Never past the engine's context.
        let near = pack_padded(&entries, 16, 4, Some(1200));
        assert_eq!(near.dc_splits, 5);
        // Steps with prefill keep their exact shape.
        let pf_toks = vec![1u32; 20];
        let mut mixed = entries.clone();
        mixed.push(Entry {
            tag: 9,
            start: 0,
            tokens: &pf_toks,
            table: &tables[1],
            emits: true,
        });
        assert_eq!(pack_padded(&mixed, 16, 4, Some(40_960)).dc_splits, 5);
    }

    /// Decode sequences that share prefix blocks read them once: the distinct count is below the sum of
    /// the contexts, and a step without decodes records none.
    #[test]
    fn shared_prefix_blocks_count_once_in_the_distinct_kv_feature() {
        let prompt = [1u32];
        let entries = [
            // Two sub-agents over the same 3-block prefix (blocks 5, 6, 7), each with a private tail.
            Entry {
                tag: 1,
                start: 60,
                tokens: &prompt,
                table: &[5, 6, 7, 8],
                emits: true,
            },
            Entry {
                tag: 2,
                start: 50,
                tokens: &prompt,
                table: &[5, 6, 7, 9],
                emits: true,
            },
        ];
        let p = pack(&entries, 16, 4);
        assert_eq!(p.features.decode, vec![60, 50]);
        assert_eq!(p.features.decode_kv_distinct, Some(5 * 16));
        let chunk: Vec<u32> = (0..20).collect();
        let prefill_only = [Entry {
            tag: 3,
            start: 0,
            tokens: &chunk,
            table: &[1, 2],
            emits: false,
        }];
        assert_eq!(pack(&prefill_only, 16, 4).features.decode_kv_distinct, None);
    }
}
