//! Operator tables — measured per-kernel latencies (GEMMs, prefill and decode attention, all-reduce)
//! — read into classified rows, the profile's efficiencies fitted per operator class, and each class's
//! error on rows held out of the fit. Pure: table text in, numbers out; it never reads files or knows
//! of sessions.
//!
//! Two table layouts are read: NVIDIA aiconfigurator's operator database (`op_name`, `device`,
//! `latency` in ms; its fused mixture-of-experts layers too) and LLMServingSim's per-layer profile (`layer,tokens,time_us` and
//! `prefill_chunk,kv_prefill,n_decode,kv_decode,time_us`, a Llama-3.1-8B layer in µs).

use crate::model::HardwareSpec;
use crate::padding::tile_rows;
use crate::profile::{ExpertTile, Profile, StepTime};
use serverbench_config::InputError;
use std::collections::BTreeMap;

/// Bytes a memory-bound row must move to be fitted: smaller working sets sit in an Ada GPU's 96 MB L2
/// and read far above the memory's bandwidth.
pub const MIN_MEMORY_BYTES: f64 = 128.0 * 1024.0 * 1024.0;
/// Int4 weights are half the bytes: a row is fitted from the L2's size on.
pub const MIN_INT4_BYTES: f64 = 96.0 * 1024.0 * 1024.0;
/// Tokens from which a GEMM is compute-bound.
pub const MIN_COMPUTE_TOKENS: u64 = 1024;
/// Tokens up to which a GEMM streams its weights.
pub const MAX_MEMORY_TOKENS: u64 = 16;
/// New tokens per sequence from which a prefill-attention chunk fills the GPU (shorter chunks over a
/// long prefix sweep it at a rate set by the prefix, a term these tables do not fit).
pub const MIN_PREFILL_CHUNK: u64 = 1024;
/// Rows an expert multiplies from which a fused-MoE layer is bound by its GEMMs (past the ridge of the
/// Hopper and Blackwell parts: 206 FLOPs a byte on an H200, 281 on a B200; near it on an L40S's 419).
pub const MIN_MOE_COMPUTE_ROWS: u64 = 256;
/// Rows an expert multiplies up to which a fused-MoE layer that reads every expert is bound by those reads.
pub const MAX_MOE_MEMORY_ROWS: u64 = 4;
/// All-reduce messages from which the link's bandwidth, not its latency, sets the time.
pub const MIN_ALLREDUCE_BYTES: f64 = 16.0 * 1024.0 * 1024.0;

/// Element type of a GEMM's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmDtype {
    /// bf16 weights and activations.
    Bf16,
    /// fp8 weights and activations.
    Fp8,
    /// int4 weights, bf16 activations (weight-only).
    Int4,
}

/// What a row measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// `C[m×n] = A[m×k] · B[k×n]`.
    Gemm {
        /// Tokens.
        m: u64,
        /// Output features.
        n: u64,
        /// Input features.
        k: u64,
        /// Weight type.
        dtype: GemmDtype,
    },
    /// Causal prefill attention of one layer: `batch` chunks of `chunk` new tokens over `prefix` cached ones.
    Prefill {
        /// Sequences.
        batch: u64,
        /// New tokens per sequence.
        chunk: u64,
        /// Cached tokens per sequence.
        prefix: u64,
        /// Query heads.
        q_heads: u64,
        /// KV heads.
        kv_heads: u64,
        /// Head dimension.
        head_dim: u64,
    },
    /// Decode attention of one layer: `batch` sequences reading `context` cached tokens each.
    Decode {
        /// Sequences.
        batch: u64,
        /// Tokens each reads.
        context: u64,
        /// KV heads.
        kv_heads: u64,
        /// Head dimension.
        head_dim: u64,
        /// Bytes per KV element.
        kv_bytes: u64,
    },
    /// One fused mixture-of-experts layer on one GPU (aiconfigurator's `moe` rows: routing, both expert
    /// GEMMs, the activation and the weighted sum; the router's own projection not included) over
    /// `tokens` tokens, each routed to `topk` of `experts` experts of `hidden × inter` gate, up and down
    /// projections, balanced: every expert gets `tokens · topk / experts` rows.
    Moe {
        /// Tokens.
        tokens: u64,
        /// Hidden size.
        hidden: u64,
        /// One expert's intermediate size.
        inter: u64,
        /// Experts per token.
        topk: u64,
        /// Experts.
        experts: u64,
    },
    /// An all-reduce of `bytes` over `gpus`.
    AllReduce {
        /// GPUs.
        gpus: u64,
        /// Message bytes.
        bytes: u64,
    },
}

/// The product of a row's counts, in floating point: each count may be as large as a table allows
/// (2⁴⁰), and their integer product would overflow.
fn product(counts: &[u64]) -> f64 {
    counts.iter().map(|&c| c as f64).product()
}

impl Op {
    /// The work a row does in the unit its class is fitted in: FLOPs (compute classes) or bytes.
    fn flops(&self) -> f64 {
        match *self {
            Op::Gemm { m, n, k, .. } => 2.0 * product(&[m, n, k]),
            Op::Prefill {
                batch,
                chunk,
                prefix,
                q_heads,
                head_dim,
                ..
            } => {
                let pairs = product(&[chunk, prefix]) + chunk as f64 * (chunk as f64 + 1.0) / 2.0;
                4.0 * product(&[q_heads, head_dim, batch]) * pairs
            }
            Op::Moe {
                tokens,
                hidden,
                inter,
                topk,
                ..
            } => 6.0 * product(&[tokens, topk, hidden, inter]),
            _ => 0.0,
        }
    }

    /// A fused-MoE row's rows per expert (balanced routing), rounded up; 0 for other operators.
    fn moe_rows_per_expert(&self) -> u64 {
        match *self {
            Op::Moe {
                tokens,
                topk,
                experts,
                ..
            } => {
                // at most `tokens`, as topk ≤ experts; the product itself may pass 2⁶⁴
                ((tokens as u128 * topk as u128).div_ceil(experts.max(1) as u128)) as u64
            }
            _ => 0,
        }
    }

    fn bytes(&self) -> f64 {
        match *self {
            Op::Gemm { n, k, dtype, .. } => match dtype {
                GemmDtype::Bf16 => 2.0 * product(&[n, k]),
                GemmDtype::Fp8 => product(&[n, k]),
                // half a byte per weight and a bf16 scale per 128 weights
                GemmDtype::Int4 => product(&[n, k]) / 2.0 + 2.0 * product(&[n, k]) / 128.0,
            },
            Op::Decode {
                batch,
                context,
                kv_heads,
                head_dim,
                kv_bytes,
            } => 2.0 * product(&[batch, context, kv_heads, head_dim, kv_bytes]),
            Op::AllReduce { gpus, bytes } => 2.0 * (gpus - 1) as f64 / gpus as f64 * bytes as f64,
            // the cached prefix read and the chunk's KV written, bf16
            Op::Prefill {
                batch,
                chunk,
                prefix,
                kv_heads,
                head_dim,
                ..
            } => 4.0 * product(&[batch, prefix.saturating_add(chunk), kv_heads, head_dim]),
            // the bf16 weights of every expert a token chose (balanced: the first tokens · topk)
            Op::Moe {
                tokens,
                hidden,
                inter,
                topk,
                experts,
            } => 6.0 * product(&[experts.min(tokens.saturating_mul(topk)), hidden, inter]),
        }
    }
}

/// The operator classes a fit distinguishes; each sets one profile field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpClass {
    /// bf16 GEMMs of at least [`MIN_COMPUTE_TOKENS`] tokens → `gemm_efficiency` (of the GPU's bf16 peak).
    GemmCompute,
    /// bf16 GEMMs of at most [`MAX_MEMORY_TOKENS`] tokens streaming ≥ [`MIN_MEMORY_BYTES`] of weights →
    /// `memory_efficiency`.
    GemmMemory,
    /// fp8 GEMMs, compute-bound → `fp8_compute_speedup` (over the bf16 fit).
    Fp8Compute,
    /// int4 weight-only GEMMs streaming ≥ [`MIN_INT4_BYTES`] → `int4_bandwidth_efficiency` (relative to
    /// `memory_efficiency`).
    Int4Memory,
    /// int4 weight-only GEMMs, compute-bound → `int4_compute_penalty` (over the bf16 fit).
    Int4Compute,
    /// bf16 decode attention reading ≥ [`MIN_MEMORY_BYTES`] of KV → `kv_efficiency`.
    DecodeAttention,
    /// Causal prefill attention of chunks of at least [`MIN_PREFILL_CHUNK`] tokens → `attention_efficiency`
    /// (its KV traffic, the cached prefix read and the chunk written, priced at the same GPU's decode
    /// attention fit, as the cost model prices it).
    PrefillAttention,
    /// All-reduce of ≥ [`MIN_ALLREDUCE_BYTES`] → `allreduce_efficiency` (of the link's bandwidth).
    AllReduce,
    /// Fused-MoE layers of at least [`MIN_MOE_COMPUTE_ROWS`] rows an expert → `expert_gemm_efficiency`
    /// (of the GPU's bf16 peak, on the rows the kernel multiplies: each expert's padded to the base
    /// profile's `expert_tile_rows`).
    MoeCompute,
    /// Fused-MoE layers that read every expert, of at most [`MAX_MOE_MEMORY_ROWS`] rows an expert and
    /// ≥ [`MIN_MEMORY_BYTES`] of weights → `expert_memory_efficiency` (the whole layer's time: its
    /// routing and launch tail are counted as reading time).
    MoeMemory,
}

impl OpClass {
    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            OpClass::GemmCompute => "gemm (compute)",
            OpClass::GemmMemory => "gemm (weights)",
            OpClass::Fp8Compute => "fp8 gemm (compute)",
            OpClass::Int4Memory => "int4 gemm (weights)",
            OpClass::Int4Compute => "int4 gemm (compute)",
            OpClass::PrefillAttention => "prefill attention",
            OpClass::DecodeAttention => "decode attention",
            OpClass::AllReduce => "all-reduce",
            OpClass::MoeCompute => "fused moe (compute)",
            OpClass::MoeMemory => "fused moe (weights)",
        }
    }

    /// Whether the class is fitted as a ratio to the bf16 GEMM of the same shape (fp8, int4), which
    /// carries between GPUs, rather than as a fraction of one GPU's peak.
    pub fn is_ratio(self) -> bool {
        matches!(
            self,
            OpClass::Fp8Compute | OpClass::Int4Compute | OpClass::Int4Memory
        )
    }

    /// Whether the class is set by tensor throughput (which does not carry between GPUs of one die at
    /// different tensor rates) rather than by bandwidth.
    pub fn compute_bound(self) -> bool {
        matches!(
            self,
            OpClass::GemmCompute
                | OpClass::Fp8Compute
                | OpClass::Int4Compute
                | OpClass::PrefillAttention
                | OpClass::MoeCompute
        )
    }
}

/// One measured row.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRow {
    /// The table it came from.
    pub file: String,
    /// Its 1-based line.
    pub line: usize,
    /// The hardware preset of the GPU it was measured on.
    pub gpu: String,
    /// What it measured.
    pub op: Op,
    /// Measured time, seconds.
    pub seconds: f64,
    /// Kept out of the fit to measure its error (the deployed models' shapes; see [`held_out`]).
    pub held_out: bool,
}

impl OpRow {
    /// The class the row is fitted in, if any (rows between regimes or inside L2 are not).
    pub fn class(&self) -> Option<OpClass> {
        match self.op {
            Op::Gemm { m, dtype, .. } => match dtype {
                _ if m >= MIN_COMPUTE_TOKENS => Some(match dtype {
                    GemmDtype::Bf16 => OpClass::GemmCompute,
                    GemmDtype::Fp8 => OpClass::Fp8Compute,
                    GemmDtype::Int4 => OpClass::Int4Compute,
                }),
                GemmDtype::Bf16
                    if m <= MAX_MEMORY_TOKENS && self.op.bytes() >= MIN_MEMORY_BYTES =>
                {
                    Some(OpClass::GemmMemory)
                }
                GemmDtype::Int4 if m <= MAX_MEMORY_TOKENS && self.op.bytes() >= MIN_INT4_BYTES => {
                    Some(OpClass::Int4Memory)
                }
                _ => None,
            },
            Op::Prefill { chunk, .. } if chunk >= MIN_PREFILL_CHUNK => {
                Some(OpClass::PrefillAttention)
            }
            Op::Decode { kv_bytes: 2, .. } if self.op.bytes() >= MIN_MEMORY_BYTES => {
                Some(OpClass::DecodeAttention)
            }
            Op::AllReduce { gpus: 2, .. } if self.op.bytes() >= MIN_ALLREDUCE_BYTES => {
                Some(OpClass::AllReduce)
            }
            Op::Moe { .. } if self.op.moe_rows_per_expert() >= MIN_MOE_COMPUTE_ROWS => {
                Some(OpClass::MoeCompute)
            }
            Op::Moe {
                tokens,
                topk,
                experts,
                ..
            } if tokens as u128 * topk as u128 >= experts as u128
                && self.op.moe_rows_per_expert() <= MAX_MOE_MEMORY_ROWS
                && self.op.bytes() >= MIN_MEMORY_BYTES =>
            {
                Some(OpClass::MoeMemory)
            }
            _ => None,
        }
    }
}

/// The rows held out of the fit, by a fixed rule per table: the exact layer shapes of the deployed
/// Qwen3.5 9B where a table has them — GEMMs with k = 4096 (its hidden size), decode attention with 4
/// KV heads (its full-attention layers') — and, in tables without them, a part of the grid the fit
/// must extrapolate to: prefill attention with 64 query heads (L40S) or over a cached prefix of 4,096
/// tokens or more (4090), the 4090's `down_proj` and its decode batches of 64 or more, every other
/// all-reduce size, and fused-MoE layers whose token count is not a power of two.
pub fn held_out(op: &Op, layer: Option<&str>) -> bool {
    match (*op, layer) {
        (Op::Gemm { .. }, Some(layer)) => layer == "down_proj",
        (Op::Gemm { k, .. }, None) => k == 4096,
        (Op::Prefill { q_heads, .. }, None) => q_heads == 64,
        (Op::Prefill { prefix, .. }, Some(_)) => prefix >= 4096,
        (Op::Decode { kv_heads, .. }, None) => kv_heads == 4,
        (Op::Decode { batch, .. }, Some(_)) => batch >= 64,
        (Op::AllReduce { bytes, .. }, _) => bytes.trailing_zeros() % 2 == 1,
        (Op::Moe { tokens, .. }, _) => !tokens.is_power_of_two(),
    }
}

/// A table's columns by name, for error messages naming the column.
struct Columns<'a> {
    file: &'a str,
    names: Vec<String>,
}

impl Columns<'_> {
    fn index(&self, name: &str) -> Result<usize, InputError> {
        self.names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| InputError::new(self.file, 1, name, "missing column"))
    }

    fn text<'r>(
        &self,
        rec: &'r csv::StringRecord,
        line: usize,
        name: &str,
    ) -> Result<&'r str, InputError> {
        let i = self.index(name)?;
        rec.get(i)
            .ok_or_else(|| InputError::new(self.file, line, name, "missing value"))
    }

    fn number(&self, rec: &csv::StringRecord, line: usize, name: &str) -> Result<f64, InputError> {
        let t = self.text(rec, line, name)?;
        match t.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(InputError::new(
                self.file,
                line,
                name,
                format!("expected a non-negative number, got {t:?}"),
            )),
        }
    }

    fn count(&self, rec: &csv::StringRecord, line: usize, name: &str) -> Result<u64, InputError> {
        let x = self.number(rec, line, name)?;
        if x.fract() != 0.0 || x > (1u64 << 40) as f64 {
            return Err(InputError::new(
                self.file,
                line,
                name,
                format!("expected a whole count, got {x}"),
            ));
        }
        Ok(x as u64)
    }
}

/// Llama-3.1-8B's projections (n, k), the model of LLMServingSim's 4090 tables.
fn llama_projection(layer: &str) -> Option<(u64, u64)> {
    match layer {
        "qkv_proj" => Some((6144, 4096)),
        "o_proj" => Some((4096, 4096)),
        "gate_up_proj" => Some((28672, 4096)),
        "down_proj" => Some((4096, 14336)),
        _ => None,
    }
}

/// The hardware preset name of an aiconfigurator `device` (`NVIDIA L40S` → `l40s`).
pub fn gpu_of_device(device: &str) -> String {
    device
        .trim()
        .trim_start_matches("NVIDIA ")
        .trim_start_matches("GeForce ")
        .to_lowercase()
        .replace(' ', "")
}

/// What reading one table gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableRead {
    /// Rows of a known operator.
    pub rows: Vec<OpRow>,
    /// Rows of operators no profile term prices (norms, activations, GDN layers, gathers), by name.
    pub skipped: BTreeMap<String, usize>,
}

/// Reads one table. `file` names it in errors (and, for LLMServingSim tables, its leading `4090_`
/// names the GPU: `rtx4090`); a malformed row is an error naming the file, line and column.
pub fn read_op_table(file: &str, text: &str) -> Result<TableRead, InputError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| InputError::new(file, 1, "", format!("unreadable header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect::<Vec<_>>();
    let cols = Columns {
        file,
        names: headers,
    };
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    let serving_sim_gpu = base
        .split('_')
        .next()
        .filter(|p| p.chars().all(|c| c.is_ascii_digit()))
        .map(|p| format!("rtx{p}"));
    let mut out = TableRead::default();
    for (i, rec) in reader.records().enumerate() {
        let line = i + 2;
        let rec =
            rec.map_err(|e| InputError::new(file, line, "", format!("malformed row: {e}")))?;
        let parsed = match &serving_sim_gpu {
            Some(gpu) => serving_sim_row(&cols, &rec, line, gpu)?,
            None => aiconfigurator_row(&cols, &rec, line)?,
        };
        match parsed {
            Parsed::Row(gpu, op, seconds, layer) => out.rows.push(OpRow {
                file: file.to_string(),
                line,
                gpu,
                held_out: held_out(&op, layer.as_deref()),
                op,
                seconds,
            }),
            Parsed::Skipped(what) => *out.skipped.entry(what).or_insert(0) += 1,
        }
    }
    Ok(out)
}

enum Parsed {
    Row(String, Op, f64, Option<String>),
    Skipped(String),
}

fn positive_seconds(
    cols: &Columns<'_>,
    rec: &csv::StringRecord,
    line: usize,
    name: &str,
    unit_s: f64,
) -> Result<f64, InputError> {
    let t = cols.number(rec, line, name)?;
    if t <= 0.0 {
        return Err(InputError::new(cols.file, line, name, "must be positive"));
    }
    Ok(t * unit_s)
}

fn aiconfigurator_row(
    cols: &Columns<'_>,
    rec: &csv::StringRecord,
    line: usize,
) -> Result<Parsed, InputError> {
    let op_name = cols.text(rec, line, "op_name")?.trim().to_string();
    let gpu = gpu_of_device(cols.text(rec, line, "device")?);
    let seconds = positive_seconds(cols, rec, line, "latency", 1e-3)?;
    let op = match op_name.as_str() {
        "gemm" => {
            let dtype = match cols.text(rec, line, "gemm_dtype")?.trim() {
                "bfloat16" | "float16" => GemmDtype::Bf16,
                "fp8" => GemmDtype::Fp8,
                "int4_wo" => GemmDtype::Int4,
                other => return Ok(Parsed::Skipped(format!("gemm {other}"))),
            };
            Op::Gemm {
                m: cols.count(rec, line, "m")?,
                n: cols.count(rec, line, "n")?,
                k: cols.count(rec, line, "k")?,
                dtype,
            }
        }
        "context_attention" => {
            if cols.text(rec, line, "kv_cache_dtype")?.trim() != "bfloat16" {
                return Ok(Parsed::Skipped("context_attention fp8 KV".into()));
            }
            Op::Prefill {
                batch: cols.count(rec, line, "batch_size")?,
                chunk: cols.count(rec, line, "isl")?,
                prefix: 0,
                q_heads: cols.count(rec, line, "num_heads")?,
                kv_heads: cols.count(rec, line, "num_key_value_heads")?,
                head_dim: cols.count(rec, line, "head_dim")?,
            }
        }
        "generation_attention" => {
            let kv_bytes = match cols.text(rec, line, "kv_cache_dtype")?.trim() {
                "bfloat16" | "float16" => 2,
                "fp8" | "int8" => 1,
                other => return Ok(Parsed::Skipped(format!("generation_attention {other} KV"))),
            };
            Op::Decode {
                batch: cols.count(rec, line, "batch_size")?,
                // `step` tokens are cached; the new token attends to them and to itself
                context: cols.count(rec, line, "step")? + 1,
                kv_heads: cols.count(rec, line, "num_key_value_heads")?,
                head_dim: cols.count(rec, line, "head_dim")?,
                kv_bytes,
            }
        }
        "all_reduce" => {
            let dtype = ["allreduce_dtype", "nccl_dtype"]
                .iter()
                .find_map(|c| cols.index(c).ok().and_then(|i| rec.get(i)))
                .unwrap_or("")
                .trim();
            let width = match dtype {
                "bfloat16" | "half" | "float16" => 2,
                other => return Ok(Parsed::Skipped(format!("all_reduce {other}"))),
            };
            if cols
                .index("backend")
                .ok()
                .and_then(|i| rec.get(i))
                .is_some_and(|b| b.contains("eager"))
            {
                return Ok(Parsed::Skipped(
                    "all_reduce eager (outside CUDA graphs)".into(),
                ));
            }
            Op::AllReduce {
                gpus: cols.count(rec, line, "num_gpus")?.max(1),
                bytes: cols.count(rec, line, "message_size")? * width,
            }
        }
        "moe" => match moe_row(cols, rec, line)? {
            Ok(op) => op,
            Err(skipped) => return Ok(Parsed::Skipped(skipped)),
        },
        other => return Ok(Parsed::Skipped(other.to_string())),
    };
    Ok(Parsed::Row(gpu, op, seconds, None))
}

/// An aiconfigurator `moe` row: one GPU's whole layer (no tensor or expert parallelism), bf16, balanced
/// routing; others are skipped, named (`Err`).
fn moe_row(
    cols: &Columns<'_>,
    rec: &csv::StringRecord,
    line: usize,
) -> Result<Result<Op, String>, InputError> {
    let dtype = cols.text(rec, line, "moe_dtype")?.trim();
    if !matches!(dtype, "bfloat16" | "float16") {
        return Ok(Err(format!("moe {dtype}")));
    }
    if cols.count(rec, line, "moe_tp_size")? != 1 || cols.count(rec, line, "moe_ep_size")? != 1 {
        return Ok(Err("moe over several GPUs".into()));
    }
    let routing = cols.text(rec, line, "distribution")?.trim();
    if !matches!(routing, "balanced" | "uniform") {
        return Ok(Err(format!("moe {routing} routing")));
    }
    let (tokens, topk, experts) = (
        cols.count(rec, line, "num_tokens")?,
        cols.count(rec, line, "topk")?,
        cols.count(rec, line, "num_experts")?,
    );
    if tokens == 0 || experts == 0 || topk == 0 || topk > experts {
        return Err(InputError::new(
            cols.file,
            line,
            "topk",
            format!("{tokens} tokens, top-{topk} of {experts} experts: need positive counts and topk at most the experts"),
        ));
    }
    Ok(Ok(Op::Moe {
        tokens,
        hidden: cols.count(rec, line, "hidden_size")?,
        inter: cols.count(rec, line, "inter_size")?,
        topk,
        experts,
    }))
}

fn serving_sim_row(
    cols: &Columns<'_>,
    rec: &csv::StringRecord,
    line: usize,
    gpu: &str,
) -> Result<Parsed, InputError> {
    let seconds = positive_seconds(cols, rec, line, "time_us", 1e-6)?;
    if cols.index("layer").is_ok() {
        let layer = cols.text(rec, line, "layer")?.trim().to_string();
        let Some((n, k)) = llama_projection(&layer) else {
            return Ok(Parsed::Skipped(layer));
        };
        let tokens = match cols.index("tokens") {
            Ok(_) => cols.count(rec, line, "tokens")?,
            Err(_) => return Ok(Parsed::Skipped(layer)),
        };
        let op = Op::Gemm {
            m: tokens,
            n,
            k,
            dtype: GemmDtype::Bf16,
        };
        return Ok(Parsed::Row(gpu.to_string(), op, seconds, Some(layer)));
    }
    let chunk = cols.count(rec, line, "prefill_chunk")?;
    let prefix = cols.count(rec, line, "kv_prefill")?;
    let decodes = cols.count(rec, line, "n_decode")?;
    let context = cols.count(rec, line, "kv_decode")?;
    let op = match (chunk, decodes) {
        (0, 0) => return Ok(Parsed::Skipped("empty attention".into())),
        (_, 0) => Op::Prefill {
            batch: 1,
            chunk,
            prefix,
            q_heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
        (0, _) => Op::Decode {
            batch: decodes,
            context,
            kv_heads: 8,
            head_dim: 128,
            kv_bytes: 2,
        },
        _ => return Ok(Parsed::Skipped("mixed prefill and decode attention".into())),
    };
    Ok(Parsed::Row(
        gpu.to_string(),
        op,
        seconds,
        Some("attention".into()),
    ))
}

/// One class's fit on one GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassFit {
    /// The class.
    pub class: OpClass,
    /// The GPU its rows were measured on.
    pub gpu: String,
    /// The fitted value: an efficiency (a fraction of the GPU's peak), or for the fp8 and int4 classes
    /// a ratio to the bf16 GEMM of the same shape; the median over the fitted rows.
    pub value: f64,
    /// Rows fitted.
    pub fitted: usize,
    /// Rows held out.
    pub held_out: usize,
    /// Median of `predicted / measured − 1` over the held-out rows.
    pub held_out_median_error: Option<f64>,
    /// Median of its absolute value.
    pub held_out_median_ape: Option<f64>,
    /// Median absolute error over the fitted rows.
    pub fitted_median_ape: f64,
}

/// Median of a non-empty slice.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The ideal time of a row at 100 % of the GPU's peak: compute for compute-bound classes, bytes for the rest.
fn ideal_s(row: &OpRow, class: OpClass, hw: &HardwareSpec) -> f64 {
    match class {
        c if c.compute_bound() => row.op.flops() / hw.bf16_flops,
        OpClass::AllReduce => row.op.bytes() / hw.link_bandwidth,
        _ => row.op.bytes() / hw.memory_bandwidth,
    }
}

/// A balanced fused-MoE row's FLOPs on the rows its kernel multiplies: every expert's rows padded to
/// the tile `tiles` gives its token count.
fn padded_moe_flops(op: &Op, tiles: &[ExpertTile]) -> f64 {
    let Op::Moe {
        tokens,
        hidden,
        inter,
        experts,
        ..
    } = *op
    else {
        return op.flops();
    };
    let rows = op.moe_rows_per_expert();
    let padded = match tile_rows(tiles, tokens as f64) {
        Some(b) => rows.div_ceil(b as u64).saturating_mul(b as u64),
        None => rows,
    };
    6.0 * product(&[experts, padded, hidden, inter])
}

/// Fits every class on every GPU that has rows of it; `hardware` looks up a GPU's preset. Ratio
/// classes (fp8 and int4) are fitted against the bf16 GEMM of the same shape in the same table; the
/// fused-MoE compute class on the rows the kernel multiplies, each expert's padded to `tiles` (empty:
/// the routed rows).
pub fn fit_ops(
    rows: &[OpRow],
    hardware: &dyn Fn(&str) -> Option<HardwareSpec>,
    tiles: &[ExpertTile],
) -> Result<Vec<ClassFit>, String> {
    let mut groups: BTreeMap<(OpClass, String), Vec<&OpRow>> = BTreeMap::new();
    for r in rows {
        if let Some(c) = r.class() {
            groups.entry((c, r.gpu.clone())).or_default().push(r);
        }
    }
    let mut bf16: std::collections::HashMap<(&str, u64, u64, u64), f64> = Default::default();
    for r in rows {
        if let Op::Gemm {
            m,
            n,
            k,
            dtype: GemmDtype::Bf16,
        } = r.op
        {
            bf16.insert((r.file.as_str(), m, n, k), r.seconds);
        }
    }
    let mut fits: Vec<ClassFit> = Vec::new();
    for ((class, gpu), members) in &groups {
        let hw = hardware(gpu).ok_or_else(|| {
            format!(
                "{}: rows measured on {gpu:?}, which has no hardware preset (add presets/hardware/{gpu}.yaml)",
                members[0].file
            )
        })?;
        // Base classes: time = ideal / efficiency. Ratio classes against the bf16 GEMM of the same
        // shape in the same table (same framework, same run): fp8: time = bf16 time / speedup; int4
        // compute: time = bf16 time × penalty; int4 weights: time = bf16 time × (int4 bytes / bf16
        // bytes) / relative efficiency.
        let twin = |r: &OpRow| -> Option<f64> {
            match r.op {
                Op::Gemm { m, n, k, .. } => bf16.get(&(r.file.as_str(), m, n, k)).copied(),
                _ => None,
            }
        };
        let kv_s = |r: &OpRow| -> Option<f64> {
            fits.iter()
                .find(|f| f.class == OpClass::DecodeAttention && &f.gpu == gpu)
                .map(|f| r.op.bytes() / (hw.memory_bandwidth * f.value))
        };
        // Prefill attention: the compute part, after the KV traffic priced at the decode fit.
        let measured = |r: &OpRow| -> Option<f64> {
            match class {
                OpClass::PrefillAttention => kv_s(r).map(|kv| r.seconds - kv).filter(|&t| t > 0.0),
                _ => Some(r.seconds),
            }
        };
        let predict_unit = |r: &OpRow| -> Option<f64> {
            match class {
                OpClass::Fp8Compute | OpClass::Int4Compute => twin(r),
                OpClass::Int4Memory => {
                    let Op::Gemm { n, k, .. } = r.op else {
                        return None;
                    };
                    twin(r).map(|t| t * r.op.bytes() / (2.0 * product(&[n, k])))
                }
                OpClass::MoeCompute => Some(padded_moe_flops(&r.op, tiles) / hw.bf16_flops),
                _ => Some(ideal_s(r, *class, &hw)),
            }
        };
        // The value is such that predicted = unit / value, except int4's penalty: unit × value.
        let multiplies = *class == OpClass::Int4Compute;
        // The median over the fitted rows of each row's own value (robust to the odd row).
        let mut train: Vec<f64> = members
            .iter()
            .filter(|r| !r.held_out)
            .filter_map(|r| {
                let (u, t) = (predict_unit(r)?, measured(r)?);
                Some(if multiplies { t / u } else { u / t })
            })
            .collect();
        if train.is_empty() {
            continue;
        }
        let value = median(&mut train);
        let predict = |r: &OpRow| -> Option<f64> {
            let unit = predict_unit(r)?;
            let extra = match class {
                OpClass::PrefillAttention => kv_s(r)?,
                _ => 0.0,
            };
            Some(
                extra
                    + if multiplies {
                        unit * value
                    } else {
                        unit / value
                    },
            )
        };
        let errors = |held: bool| -> Vec<f64> {
            members
                .iter()
                .filter(|r| r.held_out == held)
                .filter_map(|r| predict(r).map(|p| p / r.seconds - 1.0))
                .collect()
        };
        let mut held = errors(true);
        let mut fitted_abs: Vec<f64> = errors(false).iter().map(|e| e.abs()).collect();
        let mut held_abs: Vec<f64> = held.iter().map(|e| e.abs()).collect();
        fits.push(ClassFit {
            class: *class,
            gpu: gpu.clone(),
            value,
            fitted: fitted_abs.len(),
            held_out: held.len(),
            held_out_median_error: (!held.is_empty()).then(|| median(&mut held)),
            held_out_median_ape: (!held_abs.is_empty()).then(|| median(&mut held_abs)),
            fitted_median_ape: median(&mut fitted_abs),
        });
    }
    Ok(fits)
}

impl OpsSources {
    /// The GPU whose rows set `class`: the compute GPU for compute-bound efficiencies, the memory GPU
    /// for the rest (ratios first; they may come from any GPU that has them).
    pub fn gpu_for(&self, class: OpClass) -> &str {
        if class.compute_bound() && !class.is_ratio() {
            &self.compute_gpu
        } else {
            &self.memory_gpu
        }
    }
}

/// A profile field and the class fit that set it.
pub type UsedFit = (&'static str, ClassFit);

/// Which GPU's rows set the compute-bound and the bandwidth-bound fields.
#[derive(Clone, Debug, PartialEq)]
pub struct OpsSources {
    /// GPU whose compute-bound efficiencies (a fraction of its own peak) carry to the target.
    pub compute_gpu: String,
    /// GPU whose bandwidth efficiencies carry to the target.
    pub memory_gpu: String,
}

/// `base` with every field the fits cover replaced: compute-bound classes from `sources.compute_gpu`,
/// bandwidth-bound ones from `sources.memory_gpu`, ratio classes from whichever GPU has them (the
/// memory GPU first). Kernels are timed one by one, so the step composes them as a kernel sum. Returns
/// the profile and, per field, the fit it came from.
pub fn profile_from_ops(
    base: &Profile,
    fits: &[ClassFit],
    sources: &OpsSources,
) -> Result<(Profile, Vec<UsedFit>), String> {
    let pick = |class: OpClass| -> Option<ClassFit> {
        let gpu = sources.gpu_for(class);
        fits.iter()
            .find(|f| f.class == class && f.gpu == gpu)
            .or_else(|| {
                class
                    .is_ratio()
                    .then(|| fits.iter().find(|f| f.class == class))
                    .flatten()
            })
            .cloned()
    };
    let mut p = base.clone();
    let mut used = Vec::new();
    let mut set = |field: &'static str, class: OpClass, slot: &mut f64| -> Result<(), String> {
        let f = pick(class).ok_or_else(|| {
            format!(
                "no {} rows measured on {} to fit {field}",
                class.label(),
                sources.gpu_for(class)
            )
        })?;
        *slot = f.value;
        used.push((field, f));
        Ok(())
    };
    set(
        "gemm_efficiency",
        OpClass::GemmCompute,
        &mut p.gemm_efficiency,
    )?;
    set(
        "attention_efficiency",
        OpClass::PrefillAttention,
        &mut p.attention_efficiency,
    )?;
    set(
        "memory_efficiency",
        OpClass::GemmMemory,
        &mut p.memory_efficiency,
    )?;
    let mut kv = p.kv_efficiency.unwrap_or(p.memory_efficiency);
    set("kv_efficiency", OpClass::DecodeAttention, &mut kv)?;
    p.kv_efficiency = Some(kv);
    for (field, class, slot) in [
        (
            "fp8_compute_speedup",
            OpClass::Fp8Compute,
            &mut p.fp8_compute_speedup,
        ),
        (
            "int4_compute_penalty",
            OpClass::Int4Compute,
            &mut p.int4_compute_penalty,
        ),
        (
            "int4_bandwidth_efficiency",
            OpClass::Int4Memory,
            &mut p.int4_bandwidth_efficiency,
        ),
        (
            "allreduce_efficiency",
            OpClass::AllReduce,
            &mut p.allreduce_efficiency,
        ),
    ] {
        // Optional: a table set without these keeps the base's values.
        if let Some(f) = pick(class) {
            *slot = f.value;
            used.push((field, f));
        }
    }
    // Optional too: a mixture of experts' own kernel, where the tables time it.
    for (field, class) in [
        ("expert_gemm_efficiency", OpClass::MoeCompute),
        ("expert_memory_efficiency", OpClass::MoeMemory),
    ] {
        if let Some(f) = pick(class) {
            match class {
                OpClass::MoeCompute => p.expert_gemm_efficiency = Some(f.value),
                _ => p.expert_memory_efficiency = Some(f.value),
            }
            used.push((field, f));
        }
    }
    p.step_time = StepTime::KernelSum;
    p.gemm_half_tokens = 0.0;
    p.single_row_memory_efficiency = None;
    p.shared_kv_efficiency = None;
    p.fitted = true;
    Ok((p, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l40s() -> HardwareSpec {
        HardwareSpec::preset("l40s").unwrap()
    }

    const GEMM: &str = "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency";
    const DECODE: &str = "framework,version,device,op_name,kernel_source,batch_size,isl,num_heads,num_key_value_heads,head_dim,beam_width,attn_dtype,kv_cache_dtype,step,window_size,latency";

    /// Tables whose every latency follows known efficiencies: GEMMs at 0.8 of peak compute or 0.7 of
    /// peak bandwidth (whichever is slower), decode attention at 0.6, prefill attention at 0.5 with its
    /// KV at 0.6, all-reduce at 0.9 of the link.
    fn synthetic() -> Vec<(String, String)> {
        let hw = l40s();
        let mut gemm = format!("{GEMM}\n");
        for &m in &[1u64, 4, 16, 64, 1024, 4096, 8192] {
            for &(n, k) in &[
                (16384u64, 12288u64),
                (12288, 12288),
                (4096, 4096),
                (16384, 4096),
                (16384, 5120),
            ] {
                let t = (2.0 * (m * n * k) as f64 / (hw.bf16_flops * 0.8))
                    .max(2.0 * (n * k) as f64 / (hw.memory_bandwidth * 0.7));
                gemm += &format!("X,1,NVIDIA L40S,gemm,k,bfloat16,{m},{n},{k},{}\n", t * 1e3);
                gemm += &format!("X,1,NVIDIA L40S,gemm,k,fp8,{m},{n},{k},{}\n", t * 1e3 / 1.5);
            }
        }
        let mut decode = format!("{DECODE}\n");
        let mut prefill = format!("{DECODE}\n").replace("generation", "context");
        for &b in &[1u64, 16, 64, 256] {
            for &s in &[1023u64, 8191, 32767] {
                for &kv in &[4u64, 8] {
                    let bytes = (b * (s + 1) * 2 * kv * 128 * 2) as f64;
                    let t = bytes / (hw.memory_bandwidth * 0.6);
                    decode += &format!("X,1,NVIDIA L40S,generation_attention,k,{b},1,32,{kv},128,1,bfloat16,bfloat16,{s},0,{}\n", t * 1e3);
                }
            }
            for &isl in &[1024u64, 4096, 16384] {
                for &h in &[32u64, 64] {
                    let flops = 4.0 * (h * 128) as f64 * b as f64 * (isl * (isl + 1)) as f64 / 2.0;
                    let kv = (b * isl * 2 * 8 * 128 * 2) as f64;
                    let t = flops / (hw.bf16_flops * 0.5) + kv / (hw.memory_bandwidth * 0.6);
                    prefill += &format!("X,1,NVIDIA L40S,context_attention,k,{b},{isl},{h},8,128,1,bfloat16,bfloat16,0,0,{}\n", t * 1e3);
                }
            }
        }
        let mut comm = String::from("framework,version,device,op_name,kernel_source,allreduce_dtype,num_gpus,message_size,latency,backend\n");
        for e in 20..28 {
            let bytes = (1u64 << e) * 2;
            let t = bytes as f64 / (hw.link_bandwidth * 0.9);
            comm += &format!(
                "X,1,NVIDIA L40S,all_reduce,k,bfloat16,2,{},{},graph\n",
                1u64 << e,
                t * 1e3
            );
        }
        vec![
            ("gemm.csv".into(), gemm),
            ("decode.csv".into(), decode),
            ("prefill.csv".into(), prefill),
            ("comm.csv".into(), comm),
        ]
    }

    #[test]
    fn the_fit_recovers_the_efficiencies_a_synthetic_table_was_made_with() {
        let mut rows = Vec::new();
        for (file, text) in synthetic() {
            rows.extend(read_op_table(&file, &text).unwrap().rows);
        }
        let fits = fit_ops(&rows, &|g| HardwareSpec::preset(g), &[]).unwrap();
        let value = |c: OpClass| fits.iter().find(|f| f.class == c).unwrap().value;
        for (class, want) in [
            (OpClass::GemmCompute, 0.8),
            (OpClass::GemmMemory, 0.7),
            (OpClass::Fp8Compute, 1.5),
            (OpClass::DecodeAttention, 0.6),
            (OpClass::PrefillAttention, 0.5),
            (OpClass::AllReduce, 0.9),
        ] {
            let got = value(class);
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{}: {got}, made with {want}",
                class.label()
            );
        }
        for f in &fits {
            assert!(f.held_out > 0, "{} has held-out rows", f.class.label());
            assert!(f.held_out_median_ape.unwrap() < 1e-6, "{}", f.class.label());
        }
        let sources = OpsSources {
            compute_gpu: "l40s".into(),
            memory_gpu: "l40s".into(),
        };
        let base = Profile::preset("l40-datasheet").unwrap();
        let (p, used) = profile_from_ops(&base, &fits, &sources).unwrap();
        assert!(
            (p.gemm_efficiency - 0.8).abs() < 1e-6 && (p.kv_efficiency.unwrap() - 0.6).abs() < 1e-6
        );
        assert_eq!(p.step_time, StepTime::KernelSum);
        assert_eq!(
            p.int4_bandwidth_efficiency, base.int4_bandwidth_efficiency,
            "no int4 rows: kept"
        );
        assert_eq!(used.len(), 6, "four base fields, fp8 and all-reduce");
        p.check().unwrap();
    }

    #[test]
    fn held_out_rows_are_the_deployed_shapes() {
        let (_, text) = &synthetic()[0];
        let t = read_op_table("gemm.csv", text).unwrap();
        assert!(t
            .rows
            .iter()
            .all(|r| r.held_out == matches!(r.op, Op::Gemm { k: 4096, .. })));
        let (_, text) = &synthetic()[1];
        let t = read_op_table("decode.csv", text).unwrap();
        assert!(t
            .rows
            .iter()
            .all(|r| r.held_out == matches!(r.op, Op::Decode { kv_heads: 4, .. })));
    }

    #[test]
    fn a_malformed_row_names_its_file_line_and_column() {
        let cases = [
            (format!("{GEMM}\nX,1,NVIDIA L40S,gemm,k,bfloat16,8,16,16,0.1\nX,1,NVIDIA L40S,gemm,k,bfloat16,8,16,16,fast\n"), 3, "latency"),
            (format!("{GEMM}\nX,1,NVIDIA L40S,gemm,k,bfloat16,8.5,16,16,0.1\n"), 2, "m"),
            (format!("{GEMM}\nX,1,NVIDIA L40S,gemm,k,bfloat16,8,16,16,0\n"), 2, "latency"),
            (format!("{GEMM}\nX,1,NVIDIA L40S,gemm,k,bfloat16,8,16\n"), 2, ""),
            ("framework,device,op_name,latency\nX,NVIDIA L40S,gemm,0.1\n".to_string(), 1, "gemm_dtype"),
            ("layer,tokens,time_us\nqkv_proj,-3,5\n".to_string(), 2, "tokens"),
        ];
        for (text, line, column) in cases {
            let name = if column == "tokens" {
                "4090_dense.csv"
            } else {
                "t.csv"
            };
            let e = read_op_table(name, &text).unwrap_err();
            assert_eq!(
                (e.file.as_str(), e.line, e.field.as_str()),
                (name, line, column),
                "{e}"
            );
        }
    }

    #[test]
    fn rows_of_an_unknown_gpu_are_an_error_naming_it() {
        let text = format!("{GEMM}\nX,1,NVIDIA B300,gemm,k,bfloat16,4096,4096,4096,1.0\n");
        let rows = read_op_table("t.csv", &text).unwrap().rows;
        let e = fit_ops(&rows, &|g| HardwareSpec::preset(g), &[]).unwrap_err();
        assert!(
            e.contains("\"b300\"") && e.contains("presets/hardware"),
            "{e}"
        );
    }

    const MOE: &str = "framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,inter_size,topk,num_experts,moe_tp_size,moe_ep_size,distribution,latency";

    /// A fused-MoE table of the Qwen3-30B-A3B shape on an H200 made from known terms: every expert read
    /// at 80 % of the bandwidth while few rows each, the padded rows' GEMMs at 50 % of the bf16 peak (the
    /// tile 16 rows up to 128 tokens, then 128), the larger of the two.
    fn moe_table(tiles: &[ExpertTile]) -> String {
        let h = HardwareSpec::preset("h200").unwrap();
        let mut t = format!("{MOE}\n");
        for tokens in [
            16u64, 32, 48, 64, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384,
        ] {
            let rows = tokens * 8 / 128;
            let b = tile_rows(tiles, tokens as f64).unwrap() as u64;
            let gemm =
                6.0 * (128 * rows.div_ceil(b) * b) as f64 * 2048.0 * 768.0 / (h.bf16_flops * 0.5);
            let reads = 128.0 * 3.0 * 2048.0 * 768.0 * 2.0 / (h.memory_bandwidth * 0.8);
            let ms = gemm.max(reads) * 1e3;
            for (routing, tp) in [("balanced", 1), ("power_law_1.01", 1), ("balanced", 2)] {
                t += &format!("VLLM,0.24.0,NVIDIA H200,moe,triton,bfloat16,{tokens},2048,768,8,128,{tp},1,{routing},{ms}\n");
            }
        }
        t
    }

    fn h200_tiles() -> Vec<ExpertTile> {
        [(1, 16), (128, 16), (256, 32), (512, 64), (1024, 128)]
            .into_iter()
            .map(|(tokens, rows)| ExpertTile {
                tokens,
                rows,
                kernel: None,
            })
            .collect()
    }

    /// Balanced one-GPU bf16 rows are read (power-law routing and several GPUs are skipped, named), fall
    /// in the compute class from 256 rows an expert and the weights class up to 4, and the fit recovers
    /// both efficiencies when it pads the rows as the kernel does: without the tiles the held-out 5,120
    /// and 7,168 tokens (320 and 448 rows an expert, padded to 384 and 512) are priced 17 and 13 % short.
    #[test]
    fn fused_moe_rows_fit_the_experts_efficiencies_on_padded_rows() {
        let tiles = h200_tiles();
        let t = read_op_table("moe.csv", &moe_table(&tiles)).unwrap();
        assert_eq!(t.rows.len(), 14);
        assert_eq!(t.skipped["moe power_law_1.01 routing"], 14);
        assert_eq!(t.skipped["moe over several GPUs"], 14);
        let classes: Vec<_> = t.rows.iter().map(|r| r.class()).collect();
        assert_eq!(classes[..4], [Some(OpClass::MoeMemory); 4]);
        assert_eq!(classes[4..7], [None; 3]); // 64 to 192 rows an expert: between the regimes
        assert!(classes[7..].iter().all(|c| *c == Some(OpClass::MoeCompute)));
        let fits = fit_ops(&t.rows, &|g| HardwareSpec::preset(g), &tiles).unwrap();
        let value = |c| fits.iter().find(|f| f.class == c).unwrap().value;
        assert!((value(OpClass::MoeCompute) - 0.5).abs() < 1e-9);
        assert!((value(OpClass::MoeMemory) - 0.8).abs() < 1e-9);
        let compute = fits
            .iter()
            .find(|f| f.class == OpClass::MoeCompute)
            .unwrap();
        assert_eq!((compute.fitted, compute.held_out), (3, 4)); // 4,096, 8,192, 16,384 fitted
        assert!(compute.held_out_median_ape.unwrap() < 1e-9);
        let unpadded = fit_ops(&t.rows, &|g| HardwareSpec::preset(g), &[]).unwrap();
        let c = unpadded
            .iter()
            .find(|f| f.class == OpClass::MoeCompute)
            .unwrap();
        assert!(c.held_out_median_ape.unwrap() > 0.05, "{c:?}");
    }

    /// A `moe` row with top-k above its experts is an error naming the file, line and field.
    #[test]
    fn a_contradictory_moe_row_names_its_field() {
        let text = format!(
            "{MOE}\nVLLM,0.24.0,NVIDIA H200,moe,triton,bfloat16,16,2048,768,9,8,1,1,balanced,0.3\n"
        );
        let e = read_op_table("moe.csv", &text).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.field.as_str()),
            ("moe.csv", 2, "topk")
        );
        assert!(e.to_string().contains("top-9 of 8 experts"), "{e}");
    }

    /// Counts as large as a table may give (2⁴⁰ each) multiply without overflowing: such rows are read
    /// and classified, never a panic or a wrapped product.
    #[test]
    fn the_largest_counts_do_not_overflow() {
        let big = 1u64 << 40;
        let text = format!(
            "{GEMM}\nX,1,NVIDIA H200,gemm,k,bfloat16,{big},{big},{big},1.0\n\
             {MOE}\nVLLM,0.24.0,NVIDIA H200,moe,triton,bfloat16,{big},{big},{big},{big},{big},1,1,balanced,1.0\n"
        );
        let (gemm, moe) = text.split_once(&format!("{MOE}\n")).unwrap();
        let g = read_op_table("g.csv", gemm).unwrap();
        assert_eq!(g.rows[0].op.flops(), 2.0 * (big as f64).powi(3));
        let m = read_op_table("m.csv", &format!("{MOE}\n{moe}")).unwrap();
        let op = &m.rows[0].op;
        assert_eq!(op.moe_rows_per_expert(), big);
        assert_eq!(m.rows[0].class(), Some(OpClass::MoeCompute));
        assert!(padded_moe_flops(op, &[]).is_finite() && op.bytes().is_finite());
    }
}
