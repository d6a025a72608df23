//! The transformer on the GPU: weights (random from a seed, or safetensors), the paged KV cache, the
//! activation buffers and one forward pass over a packed step, ending in greedy sampling.
//! Knows nothing of scheduling: the step's batch arrives packed.

use crate::batch::{Packed, DECODE_SPLIT};
use crate::config::ModelConfig;
use crate::device::{Arg, Buffer, Device};
use crate::error::{CudaError, Result};
use half::bf16;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where the weights come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Weights {
    /// Generated on the GPU from a seed (uniform, scaled by 1/√fan-in; norms 1): for timing.
    Random {
        /// Seed.
        seed: u64,
    },
    /// bf16 safetensors: a file, or a directory of `*.safetensors` files.
    Safetensors(PathBuf),
}

/// Engine-side sizes: the KV pool and the largest step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// KV blocks.
    pub num_blocks: u32,
    /// Tokens per block.
    pub block_size: u32,
    /// Largest number of tokens in one step.
    pub max_tokens: u32,
    /// Largest number of sequences in one step.
    pub max_seqs: u32,
    /// Longest context.
    pub max_context: u32,
}

struct Layer {
    qkv: Buffer<bf16>,
    o: Buffer<bf16>,
    gate_up: Buffer<bf16>,
    down: Buffer<bf16>,
    in_norm: Buffer<bf16>,
    post_norm: Buffer<bf16>,
    q_norm: Buffer<bf16>,
    k_norm: Buffer<bf16>,
}

struct Activations {
    idx: Buffer<i32>,
    res: Buffer<bf16>,
    xn: Buffer<bf16>,
    delta: Buffer<bf16>,
    qkv: Buffer<bf16>,
    q: Buffer<bf16>,
    attn: Buffer<bf16>,
    gate_up: Buffer<bf16>,
    act: Buffer<bf16>,
    part_o: Buffer<f32>,
    part_ml: Buffer<f32>,
    sel_res: Buffer<bf16>,
    sel_delta: Buffer<bf16>,
    sel_xn: Buffer<bf16>,
    logits: Buffer<bf16>,
    sampled: Buffer<i32>,
}

/// A model resident on one GPU.
pub struct Model {
    /// The GPU.
    pub dev: Device,
    /// Shape.
    pub cfg: ModelConfig,
    /// Sizes.
    pub cap: Capacity,
    embed: Buffer<bf16>,
    lm_head: Option<Buffer<bf16>>,
    final_norm: Buffer<bf16>,
    layers: Vec<Layer>,
    k_cache: Buffer<bf16>,
    v_cache: Buffer<bf16>,
    a: Activations,
    /// Copy each sampled row's logits to the host after every step (for correctness checks).
    pub keep_logits: bool,
    /// The last step's logits, one row of `vocab` per sampled row (when `keep_logits`).
    pub last_logits: Vec<f32>,
    /// Decode-only steps replay a CUDA graph captured for their launch shape (off if capture failed).
    pub use_graphs: bool,
    graphs: HashMap<Vec<usize>, cudarc::driver::CudaGraph>,
}

impl Model {
    /// Loads or generates the weights and allocates the KV pool and activations.
    pub fn load(dev: Device, cfg: ModelConfig, weights: &Weights, cap: Capacity) -> Result<Model> {
        cfg.check().map_err(|e| CudaError::Config(e.to_string()))?;
        check_capacity(&cfg, &cap)?;
        let (h, i) = (cfg.hidden_size as usize, cfg.intermediate_size as usize);
        let (hq, hkv, d) = (
            cfg.num_attention_heads as usize,
            cfg.num_key_value_heads as usize,
            cfg.head_dim() as usize,
        );
        let v = cfg.vocab_size as usize;
        let mut st = match weights {
            Weights::Safetensors(p) => Some(TensorFiles::open(p)?),
            Weights::Random { .. } => None,
        };
        let seed = match weights {
            Weights::Random { seed } => *seed,
            Weights::Safetensors(_) => 0,
        };
        let mut counter = 0u64;
        let mut make =
            |dev: &Device, parts: &[(&str, usize, usize)], norm: bool| -> Result<Buffer<bf16>> {
                let total: usize = parts.iter().map(|p| p.1 * p.2).sum();
                let mut buf = dev.zeros::<bf16>(total)?;
                match st.as_mut() {
                    Some(files) => {
                        let mut at = 0;
                        for &(name, rows, cols) in parts {
                            let host = files.tensor(name, rows, cols)?;
                            dev.upload(&host, &mut buf, at)?;
                            at += rows * cols;
                        }
                    }
                    None => {
                        counter += 1;
                        let fan_in = parts[0].2 as f32;
                        let (scale, constant) = if norm {
                            (1.0, 1)
                        } else {
                            ((3.0 / fan_in).sqrt(), 0)
                        };
                        fill(dev, &buf, crate::hash(seed, counter), scale, constant)?;
                    }
                }
                Ok(buf)
            };
        let embed = make(&dev, &[("model.embed_tokens.weight", v, h)], false)?;
        let mut layers = Vec::new();
        for l in 0..cfg.num_hidden_layers as usize {
            let n = |s: &str| format!("model.layers.{l}.{s}");
            let (q, k, vv) = (
                n("self_attn.q_proj.weight"),
                n("self_attn.k_proj.weight"),
                n("self_attn.v_proj.weight"),
            );
            let qkv = make(
                &dev,
                &[(&q, hq * d, h), (&k, hkv * d, h), (&vv, hkv * d, h)],
                false,
            )?;
            let o = make(&dev, &[(&n("self_attn.o_proj.weight"), h, hq * d)], false)?;
            let (g, u) = (n("mlp.gate_proj.weight"), n("mlp.up_proj.weight"));
            let gate_up = make(&dev, &[(&g, i, h), (&u, i, h)], false)?;
            let down = make(&dev, &[(&n("mlp.down_proj.weight"), h, i)], false)?;
            let in_norm = make(&dev, &[(&n("input_layernorm.weight"), 1, h)], true)?;
            let post_norm = make(&dev, &[(&n("post_attention_layernorm.weight"), 1, h)], true)?;
            let (q_norm, k_norm) = if cfg.has_qk_norm() {
                (
                    make(&dev, &[(&n("self_attn.q_norm.weight"), 1, d)], true)?,
                    make(&dev, &[(&n("self_attn.k_norm.weight"), 1, d)], true)?,
                )
            } else {
                (dev.zeros(0)?, dev.zeros(0)?)
            };
            layers.push(Layer {
                qkv,
                o,
                gate_up,
                down,
                in_norm,
                post_norm,
                q_norm,
                k_norm,
            });
        }
        let final_norm = make(&dev, &[("model.norm.weight", 1, h)], true)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(make(&dev, &[("lm_head.weight", v, h)], false)?)
        };
        let slots = cap.num_blocks as usize * cap.block_size as usize;
        let kv_len = cfg.num_hidden_layers as usize * slots * hkv * d;
        let k_cache = dev.zeros::<bf16>(kv_len)?;
        let v_cache = dev.zeros::<bf16>(kv_len)?;
        let (t, r) = (cap.max_tokens as usize, cap.max_seqs as usize);
        let splits = cap.max_context.div_ceil(DECODE_SPLIT) as usize;
        let a = Activations {
            idx: dev.zeros(16 * t + 4 * r)?,
            res: dev.zeros(t * h)?,
            xn: dev.zeros(t * h)?,
            delta: dev.zeros(t * h)?,
            qkv: dev.zeros(t * cfg.qkv_width() as usize)?,
            q: dev.zeros((t + 64) * hq * d)?,
            attn: dev.zeros(t * hq * d)?,
            gate_up: dev.zeros(t * 2 * i)?,
            act: dev.zeros(t * i)?,
            part_o: dev.zeros(r * hq * splits * d)?,
            part_ml: dev.zeros(r * hq * splits * 2)?,
            sel_res: dev.zeros(r * h)?,
            sel_delta: dev.zeros(r * h)?,
            sel_xn: dev.zeros(r * h)?,
            logits: dev.zeros(r * v)?,
            sampled: dev.zeros(r)?,
        };
        dev.sync()?;
        let use_graphs = dev.cuda_graphs;
        Ok(Model {
            dev,
            cfg,
            cap,
            embed,
            lm_head,
            final_norm,
            layers,
            k_cache,
            v_cache,
            a,
            keep_logits: false,
            last_logits: Vec::new(),
            use_graphs,
            graphs: HashMap::new(),
        })
    }

    /// Fills the whole KV cache with random values (benchmarks attend over "cached" context).
    pub fn randomize_kv(&self, seed: u64) -> Result<()> {
        fill(&self.dev, &self.k_cache, seed, 1.0, 0)?;
        fill(&self.dev, &self.v_cache, seed ^ 0x55, 1.0, 0)
    }

    fn check_fits(&self, p: &Packed) -> Result<()> {
        let splits = self.cap.max_context.div_ceil(DECODE_SPLIT);
        let rows = p.sample_rows.len() as u32;
        if p.tokens > self.cap.max_tokens
            || rows > self.cap.max_seqs
            || p.decode_seqs > self.cap.max_seqs
            || p.dc_splits > splits
        {
            return Err(CudaError::Config(format!(
                "step of {} tokens, {} decodes, {} sampled rows, {} splits exceeds the engine's buffers ({} tokens, {} sequences, {} splits)",
                p.tokens, p.decode_seqs, rows, p.dc_splits, self.cap.max_tokens, self.cap.max_seqs, splits
            )));
        }
        Ok(())
    }

    /// Runs one forward pass over a packed step and returns the greedy token of each sampled row.
    pub fn forward(&mut self, p: &Packed) -> Result<Vec<u32>> {
        self.check_fits(p)?;
        if p.tokens == 0 {
            return Ok(Vec::new());
        }
        if p.data.len() > self.a.idx.len {
            self.a.idx = self.dev.zeros(p.data.len() * 2)?;
            self.graphs.clear(); // they hold addresses inside the old index buffer
        }
        self.dev.upload(&p.data, &mut self.a.idx, 0)?;
        let rows = if p.prefill_seqs == 0 && self.use_graphs {
            self.launch_graph(p)?
        } else {
            self.launch_all(p)?
        };
        if rows == 0 {
            return Ok(Vec::new());
        }
        let (a, dev, c) = (&self.a, &self.dev, &self.cfg);
        let out = dev.download(&a.sampled, rows as usize)?;
        if self.keep_logits {
            let l = dev.download(&a.logits, (rows * c.vocab_size) as usize)?;
            self.last_logits = l.into_iter().map(f32::from).collect();
        }
        Ok(out.into_iter().map(|x| x as u32).collect())
    }

    /// Replays (capturing it first if needed) the CUDA graph of a decode-only step's launch shape: one
    /// launch instead of ~10 per layer. Steps of the same shape differ only in the index data uploaded
    /// before. If capture fails, graphs are turned off and the step runs eagerly.
    fn launch_graph(&mut self, p: &Packed) -> Result<u32> {
        let key = graph_key(p);
        if !self.graphs.contains_key(&key) {
            match self.capture(p) {
                Ok(g) => {
                    self.graphs.insert(key.clone(), g);
                }
                Err(e) => {
                    eprintln!(
                        "serverbench-cuda: CUDA graph capture failed ({e}); decode steps run eagerly"
                    );
                    self.use_graphs = false;
                    return self.launch_all(p);
                }
            }
        }
        self.graphs[&key].launch()?;
        Ok(p.sample_rows.len() as u32)
    }

    /// Records the step's kernels into a graph (nothing runs yet).
    fn capture(&self, p: &Packed) -> Result<cudarc::driver::CudaGraph> {
        let stream = self.dev.stream.clone();
        stream.begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )?;
        let launched = self.launch_all(p);
        let graph = stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
        launched?;
        graph?.ok_or_else(|| CudaError::Config("the captured graph is empty".into()))
    }

    /// Queues every kernel of the forward pass; returns the number of sampled rows.
    fn launch_all(&self, p: &Packed) -> Result<u32> {
        let c = &self.cfg;
        let (t, h) = (p.tokens, c.hidden_size);
        let (hq, hkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim());
        let inter = c.intermediate_size;
        let eps = c.rms_norm_eps as f32;
        let ix = |r: &std::ops::Range<usize>| Arg::Ptr(self.a.idx.at(r.start));
        let a = &self.a;
        let dev = &self.dev;
        dev.launch(
            "gather_rows",
            (t, 1, 1),
            256,
            &[
                ix(&p.ids),
                Arg::Ptr(self.embed.ptr),
                Arg::Ptr(a.res.ptr),
                Arg::I32(h as i32),
            ],
        )?;
        let norm = |delta: u64, x: u64, w: u64, out: u64, rows: u32| {
            dev.launch(
                "add_rmsnorm",
                (rows, 1, 1),
                512,
                &[
                    Arg::Ptr(delta),
                    Arg::Ptr(x),
                    Arg::Ptr(w),
                    Arg::Ptr(out),
                    Arg::I32(h as i32),
                    Arg::F32(eps),
                ],
            )
        };
        norm(0, a.res.ptr, self.layers[0].in_norm.ptr, a.xn.ptr, t)?;
        let slots = self.cap.num_blocks as usize * self.cap.block_size as usize;
        let layer_len = slots * (hkv * d) as usize;
        let scale_log2 = (1.0 / (d as f32).sqrt()) * std::f32::consts::LOG2_E;
        let bs = self.cap.block_size as i32;
        for (l, w) in self.layers.iter().enumerate() {
            let (kc, vc) = (
                self.k_cache.at(l * layer_len),
                self.v_cache.at(l * layer_len),
            );
            dev.linear(a.xn.ptr, w.qkv.ptr, a.qkv.ptr, t, c.qkv_width(), h)?;
            dev.launch(
                "qk_norm_rope_store",
                (t, hq + 2 * hkv, 1),
                d / 2,
                &[
                    Arg::Ptr(a.qkv.ptr),
                    Arg::Ptr(w.q_norm.ptr),
                    Arg::Ptr(w.k_norm.ptr),
                    ix(&p.pos),
                    ix(&p.slot),
                    Arg::Ptr(a.q.ptr),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::I32(hq as i32),
                    Arg::I32(hkv as i32),
                    Arg::F32(eps),
                    Arg::F32(c.rope_theta as f32),
                    Arg::I32(c.has_qk_norm() as i32),
                ],
            )?;
            if p.prefill_seqs > 0 {
                let (kernel, threads) = dev.prefill_attn;
                dev.launch(
                    kernel,
                    (p.tiles, hkv, 1),
                    threads,
                    &[
                        Arg::Ptr(a.q.ptr),
                        Arg::Ptr(kc),
                        Arg::Ptr(vc),
                        Arg::Ptr(a.attn.ptr),
                        ix(&p.tile_seq),
                        ix(&p.tile_u0),
                        ix(&p.pf_qstart),
                        ix(&p.pf_qlen),
                        ix(&p.pf_pos0),
                        ix(&p.pf_tables),
                        Arg::I32(p.pf_max_blocks as i32),
                        Arg::I32(bs),
                        Arg::I32(hq as i32),
                        Arg::I32(hkv as i32),
                        Arg::F32(scale_log2),
                    ],
                )?;
            }
            if p.decode_seqs > 0 {
                dev.launch(
                    "attn_decode_partial",
                    (p.decode_seqs, hkv, p.dc_splits),
                    128,
                    &[
                        Arg::Ptr(a.q.ptr),
                        Arg::Ptr(kc),
                        Arg::Ptr(vc),
                        ix(&p.dc_qtok),
                        ix(&p.dc_ctx),
                        ix(&p.dc_tables),
                        Arg::I32(p.dc_max_blocks as i32),
                        Arg::I32(bs),
                        Arg::I32(hq as i32),
                        Arg::I32(hkv as i32),
                        Arg::F32(scale_log2),
                        Arg::I32(p.dc_splits as i32),
                        Arg::Ptr(a.part_o.ptr),
                        Arg::Ptr(a.part_ml.ptr),
                    ],
                )?;
                dev.launch(
                    "attn_decode_reduce",
                    (p.decode_seqs, hq, 1),
                    d,
                    &[
                        Arg::Ptr(a.part_o.ptr),
                        Arg::Ptr(a.part_ml.ptr),
                        ix(&p.dc_qtok),
                        ix(&p.dc_ctx),
                        Arg::I32(hq as i32),
                        Arg::I32(p.dc_splits as i32),
                        Arg::Ptr(a.attn.ptr),
                    ],
                )?;
            }
            dev.linear(a.attn.ptr, w.o.ptr, a.delta.ptr, t, h, hq * d)?;
            norm(a.delta.ptr, a.res.ptr, w.post_norm.ptr, a.xn.ptr, t)?;
            dev.linear(a.xn.ptr, w.gate_up.ptr, a.gate_up.ptr, t, 2 * inter, h)?;
            dev.launch(
                "swiglu",
                (t, (inter / 8).div_ceil(256), 1),
                256,
                &[
                    Arg::Ptr(a.gate_up.ptr),
                    Arg::Ptr(a.act.ptr),
                    Arg::I32(inter as i32),
                ],
            )?;
            dev.linear(a.act.ptr, w.down.ptr, a.delta.ptr, t, h, inter)?;
            if let Some(next) = self.layers.get(l + 1) {
                norm(a.delta.ptr, a.res.ptr, next.in_norm.ptr, a.xn.ptr, t)?;
            }
        }
        let rows = p.sample_rows.len() as u32;
        if rows == 0 {
            return Ok(0);
        }
        let r = ix(&p.sample_rows);
        dev.launch(
            "gather_rows",
            (rows, 1, 1),
            256,
            &[
                r,
                Arg::Ptr(a.res.ptr),
                Arg::Ptr(a.sel_res.ptr),
                Arg::I32(h as i32),
            ],
        )?;
        dev.launch(
            "gather_rows",
            (rows, 1, 1),
            256,
            &[
                r,
                Arg::Ptr(a.delta.ptr),
                Arg::Ptr(a.sel_delta.ptr),
                Arg::I32(h as i32),
            ],
        )?;
        norm(
            a.sel_delta.ptr,
            a.sel_res.ptr,
            self.final_norm.ptr,
            a.sel_xn.ptr,
            rows,
        )?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        dev.linear(a.sel_xn.ptr, head.ptr, a.logits.ptr, rows, c.vocab_size, h)?;
        dev.launch(
            "argmax_rows",
            (rows, 1, 1),
            1024,
            &[
                Arg::Ptr(a.logits.ptr),
                Arg::I32(c.vocab_size as i32),
                Arg::Ptr(a.sampled.ptr),
            ],
        )?;
        Ok(rows)
    }
}

/// What the kernels assume of the KV pool: blocks of a power-of-two number of tokens (a key's block is
/// found with a shift) and fewer than 2^31 elements per layer and cache (32-bit offsets).
fn check_capacity(cfg: &ModelConfig, cap: &Capacity) -> Result<()> {
    if !cap.block_size.is_power_of_two() {
        return Err(CudaError::Config(format!(
            "engine.block_size: {} tokens; the CUDA engine needs a power of two (its attention kernels find a key's KV block with a shift)",
            cap.block_size
        )));
    }
    let slots = cap.num_blocks as u64 * cap.block_size as u64;
    let per_layer = slots * cfg.num_key_value_heads as u64 * cfg.head_dim() as u64;
    if per_layer >= 1 << 31 {
        return Err(CudaError::Config(format!(
            "KV pool of {slots} tokens: one layer's cache would hold 2^31 or more elements, more than the attention kernels' 32-bit offsets reach"
        )));
    }
    Ok(())
}

/// What a captured graph bakes in: the step's sizes and where each index array sits in the upload.
fn graph_key(p: &Packed) -> Vec<usize> {
    let ranges = [
        &p.ids,
        &p.pos,
        &p.slot,
        &p.dc_qtok,
        &p.dc_ctx,
        &p.dc_tables,
        &p.sample_rows,
    ];
    let mut k = vec![
        p.tokens as usize,
        p.decode_seqs as usize,
        p.dc_max_blocks as usize,
        p.dc_splits as usize,
    ];
    k.extend(ranges.iter().flat_map(|r| [r.start, r.end]));
    k
}

fn fill(dev: &Device, buf: &Buffer<bf16>, seed: u64, scale: f32, constant: i32) -> Result<()> {
    let blocks = (buf.len.div_ceil(256)).min(65_535) as u32;
    dev.launch(
        "fill_random",
        (blocks.max(1), 1, 1),
        256,
        &[
            Arg::Ptr(buf.ptr),
            Arg::I64(buf.len as i64),
            Arg::U64(seed),
            Arg::F32(scale),
            Arg::I32(constant),
        ],
    )
}

/// bf16 tensors from safetensors files, by name.
struct TensorFiles {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl TensorFiles {
    fn open(path: &Path) -> Result<TensorFiles> {
        let mut paths = Vec::new();
        if path.is_dir() {
            let rd = std::fs::read_dir(path).map_err(|e| CudaError::file(path, e))?;
            for e in rd {
                let p = e.map_err(|e| CudaError::file(path, e))?.path();
                if p.extension().is_some_and(|x| x == "safetensors") {
                    paths.push(p);
                }
            }
            paths.sort();
        } else {
            paths.push(path.to_path_buf());
        }
        if paths.is_empty() {
            return Err(CudaError::file(path, "no .safetensors files"));
        }
        let files = paths
            .into_iter()
            .map(|p| {
                std::fs::read(&p)
                    .map(|b| (p.clone(), b))
                    .map_err(|e| CudaError::file(&p, e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TensorFiles { files })
    }

    /// Tensor `name`, checked to be bf16 of shape rows × cols (or a vector of `cols` when rows = 1).
    fn tensor(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<bf16>> {
        for (path, bytes) in &self.files {
            let st = safetensors::SafeTensors::deserialize(bytes)
                .map_err(|e| CudaError::file(path, e))?;
            let Ok(t) = st.tensor(name) else { continue };
            if t.dtype() != safetensors::Dtype::BF16 {
                return Err(CudaError::file(
                    path,
                    format!("{name}: dtype {:?}, only bf16 is supported", t.dtype()),
                ));
            }
            let want: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
            if t.shape() != want {
                return Err(CudaError::file(
                    path,
                    format!("{name}: shape {:?}, the config says {:?}", t.shape(), want),
                ));
            }
            return Ok(t
                .data()
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect());
        }
        Err(CudaError::Config(format!(
            "weights: tensor {name} is in none of the safetensors files"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(num_blocks: u32, block_size: u32) -> Capacity {
        Capacity {
            num_blocks,
            block_size,
            max_tokens: 2048,
            max_seqs: 64,
            max_context: 40_960,
        }
    }

    /// The pool the kernels can address: power-of-two blocks, under 2^31 elements per layer.
    #[test]
    fn the_kv_pool_must_suit_the_kernels() {
        let q = ModelConfig::qwen3_8b();
        assert!(check_capacity(&q, &cap(32_784, 16)).is_ok());
        let e = check_capacity(&q, &cap(1000, 12)).unwrap_err().to_string();
        assert!(
            e.contains("engine.block_size: 12") && e.contains("power of two"),
            "{e}"
        );
        // 8 KV heads × 128 = 1,024 elements a token: 2^21 tokens reach 2^31.
        assert!(check_capacity(&q, &cap((1 << 17) - 1, 16)).is_ok());
        let e = check_capacity(&q, &cap(1 << 17, 16))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2097152 tokens") && e.contains("32-bit"), "{e}");
    }
}
