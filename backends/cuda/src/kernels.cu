// serverbench CUDA engine kernels (compiled at run time with NVRTC). bf16 storage, fp32 arithmetic.
// Rounding points follow the Hugging Face Qwen3/Llama modules so that logits match them closely.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define HD 128
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float rb(float x) { return __bfloat162float(__float2bfloat16(x)); }

__device__ __forceinline__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  float t = 0.f;
  for (int i = 0; i < nw; i++) t += sh[i];
  return t;
}

// rows of `table` (row length `width`, a multiple of 8) picked by `ids` -> out
extern "C" __global__ void gather_rows(const int* ids, const bf16* table, bf16* out, int width) {
  const uint4* src = (const uint4*)(table + (long long)ids[blockIdx.x] * width);
  uint4* dst = (uint4*)(out + (long long)blockIdx.x * width);
  for (int i = threadIdx.x; i < width / 8; i += blockDim.x) dst[i] = src[i];
}

// out = rmsnorm(x) * w, one block per row. With `delta` non-null: x += delta first (x is the residual
// stream, updated in place, rounded to bf16 as the reference adds in bf16).
extern "C" __global__ void add_rmsnorm(const bf16* delta, bf16* x, const bf16* w, bf16* out, int hidden, float eps) {
  __shared__ float sh[32];
  long long row = (long long)blockIdx.x * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = __bfloat162float(x[row + i]);
    if (delta) { v = rb(v + __bfloat162float(delta[row + i])); x[row + i] = __float2bfloat16(v); }
    ss += v * v;
  }
  float r = rsqrtf(block_sum(ss, sh) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float n = rb(__bfloat162float(x[row + i]) * r);
    out[row + i] = __float2bfloat16(__bfloat162float(w[i]) * n);
  }
}

// Per token t and head: q and k heads get the per-head RMSNorm and rotary embedding (rotate-half
// form); q goes to `q_out` [T, hq, HD], k and v go to the paged cache at slot[t].
// grid (T, hq + 2*hkv), block HD/2 threads.
extern "C" __global__ void qk_norm_rope_store(const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
    const int* pos, const int* slot, bf16* q_out, bf16* k_cache, bf16* v_cache,
    int hq, int hkv, float eps, float theta, int qk_norm) {
  __shared__ float sh[32];
  int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
  const bf16* src = qkv + ((long long)t * (hq + 2 * hkv) + h) * HD;
  float x1 = __bfloat162float(src[i]), x2 = __bfloat162float(src[i + HD / 2]);
  if (h >= hq + hkv) {  // v
    bf16* dst = v_cache + ((long long)slot[t] * hkv + (h - hq - hkv)) * HD;
    dst[i] = src[i]; dst[i + HD / 2] = src[i + HD / 2];
    return;
  }
  if (qk_norm) {
    const bf16* w = h < hq ? q_norm : k_norm;
    float r = rsqrtf(block_sum(x1 * x1 + x2 * x2, sh) / HD + eps);
    x1 = rb(__bfloat162float(w[i]) * rb(x1 * r));
    x2 = rb(__bfloat162float(w[i + HD / 2]) * rb(x2 * r));
  }
  float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
  float ang = (float)pos[t] * inv_freq;
  float c = rb(cosf(ang)), s = rb(sinf(ang));
  float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
  bf16* dst = h < hq ? q_out + ((long long)t * hq + h) * HD
                     : k_cache + ((long long)slot[t] * hkv + (h - hq)) * HD;
  dst[i] = __float2bfloat16(y1); dst[i + HD / 2] = __float2bfloat16(y2);
}

// act[t, j] = silu(gate[t, j]) * up[t, j]; gate_up is [T, 2*inter] (gate first).
extern "C" __global__ void swiglu(const bf16* gate_up, bf16* act, int inter, long long n) {
  long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  long long t = k / inter, j = k % inter;
  float g = __bfloat162float(gate_up[t * 2 * inter + j]);
  float u = __bfloat162float(gate_up[t * 2 * inter + inter + j]);
  act[k] = __float2bfloat16(rb(g / (1.f + expf(-g))) * u);
}

// ---- decode attention: split-K over the context, GQA groups share each K/V read ----
#define SPLIT 256
#define MAXG 8
// grid (decode seqs, hkv, splits), 128 threads.
extern "C" __global__ void __launch_bounds__(128) attn_decode_partial(const bf16* q, const bf16* kc, const bf16* vc,
    const int* qtok, const int* ctx_len, const int* tables, int max_blocks, int bs, int hq, int hkv,
    float scale_log2, int nsplit, float* part_o, float* part_ml) {
  __shared__ float qs[MAXG][HD];
  __shared__ float p[MAXG][SPLIT];
  __shared__ long long offs[SPLIT];
  __shared__ float mh[MAXG];
  int j = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
  int group = hq / hkv;
  int L = ctx_len[j];
  int s0 = sp * SPLIT, s1 = min(L, s0 + SPLIT), n = s1 - s0;
  long long pbase = ((long long)j * hq + g * group) * nsplit + sp;
  if (n <= 0) {
    if (tid < group) { part_ml[(pbase + (long long)tid * nsplit) * 2] = NEG_INF; part_ml[(pbase + (long long)tid * nsplit) * 2 + 1] = 0.f; }
    return;
  }
  for (int h = 0; h < group; h++)
    qs[h][tid] = __bfloat162float(q[((long long)qtok[j] * hq + g * group + h) * HD + tid]) * scale_log2;
  __syncthreads();
  const int* table = tables + (long long)j * max_blocks;
  for (int k = tid; k < n; k += 128) {
    int kp = s0 + k;
    long long off = (((long long)table[kp / bs] * bs + kp % bs) * hkv + g) * HD;
    offs[k] = off;
    const uint4* kr = (const uint4*)(kc + off);
    float acc[MAXG];
#pragma unroll
    for (int h = 0; h < MAXG; h++) acc[h] = 0.f;
#pragma unroll 4
    for (int c = 0; c < HD / 8; c++) {
      uint4 u = kr[c];
      const __nv_bfloat162* b2 = (const __nv_bfloat162*)&u;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float2 f = __bfloat1622float2(b2[e]);
#pragma unroll
        for (int h = 0; h < MAXG; h++)
          if (h < group) acc[h] += f.x * qs[h][c * 8 + 2 * e] + f.y * qs[h][c * 8 + 2 * e + 1];
      }
    }
#pragma unroll
    for (int h = 0; h < MAXG; h++) if (h < group) p[h][k] = acc[h];
  }
  __syncthreads();
  int warp = tid >> 5, lane = tid & 31;
  for (int h = warp; h < group; h += 4) {
    float m = NEG_INF;
    for (int k = lane; k < n; k += 32) m = fmaxf(m, p[h][k]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float l = 0.f;
    for (int k = lane; k < n; k += 32) { float e = exp2f(p[h][k] - m); p[h][k] = e; l += e; }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffff, l, o);
    if (lane == 0) { mh[h] = m; part_ml[(pbase + (long long)h * nsplit) * 2] = m; part_ml[(pbase + (long long)h * nsplit) * 2 + 1] = l; }
  }
  __syncthreads();
  float o[MAXG];
#pragma unroll
  for (int h = 0; h < MAXG; h++) o[h] = 0.f;
  int k = 0;
  for (; k + 8 <= n; k += 8) {  // eight independent loads in flight per thread
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = __bfloat162float(vc[offs[k + u] + tid]);
#pragma unroll
    for (int u = 0; u < 8; u++)
#pragma unroll
      for (int h = 0; h < MAXG; h++) if (h < group) o[h] += p[h][k + u] * v[u];
  }
  for (; k < n; k++) {
    float v = __bfloat162float(vc[offs[k] + tid]);
#pragma unroll
    for (int h = 0; h < MAXG; h++) if (h < group) o[h] += p[h][k] * v;
  }
#pragma unroll
  for (int h = 0; h < MAXG; h++) if (h < group) part_o[(pbase + (long long)h * nsplit) * HD + tid] = o[h];
}

// grid (decode seqs, hq), HD threads: combines the splits into attn_out[qtok[j], h, :].
extern "C" __global__ void attn_decode_reduce(const float* part_o, const float* part_ml, const int* qtok,
    const int* ctx_len, int hq, int nsplit, bf16* out) {
  int j = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  int used = (ctx_len[j] + SPLIT - 1) / SPLIT;
  long long base = ((long long)j * hq + h) * nsplit;
  float M = NEG_INF;
  for (int s = 0; s < used; s++) M = fmaxf(M, part_ml[(base + s) * 2]);
  float num = 0.f, den = 0.f;
  for (int s = 0; s < used; s++) {
    float w = exp2f(part_ml[(base + s) * 2] - M);
    num += part_o[(base + s) * HD + d] * w;
    den += part_ml[(base + s) * 2 + 1] * w;
  }
  out[((long long)qtok[j] * hq + h) * HD + d] = __float2bfloat16(num / den);
}

// ---- prefill attention: flash attention on tensor cores (mma.sync m16n8k16, bf16 -> fp32) ----
#define BQ 64
#define BK 64
#define KS (HD + 8)

__device__ __forceinline__ u32 pack2(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *(u32*)&v;
}
__device__ __forceinline__ u32 pack2h(bf16 a, bf16 b) {
  __nv_bfloat162 v; v.x = a; v.y = b;
  return *(u32*)&v;
}
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// grid (tiles, hq), 128 threads (4 warps x 16 query rows). Tile i covers queries
// tile_q0[i] .. +64 of prefill sequence tile_seq[i]; that sequence's queries are batch tokens
// seq_qstart .. +seq_qlen at positions seq_pos0 .. ; keys are positions 0 ..= query position.
extern "C" __global__ void __launch_bounds__(128) attn_prefill(const bf16* q, const bf16* kc, const bf16* vc, bf16* out,
    const int* tile_seq, const int* tile_q0, const int* seq_qstart, const int* seq_qlen, const int* seq_pos0,
    const int* tables, int max_blocks, int bs, int hq, int hkv, float scale_log2) {
  __shared__ __align__(16) bf16 ks[BK * KS];
  __shared__ __align__(16) bf16 vs[BK * KS];
  int h = blockIdx.y, gkv = h / (hq / hkv);
  int sq = tile_seq[blockIdx.x], q0 = tile_q0[blockIdx.x];
  int qstart = seq_qstart[sq], qlen = seq_qlen[sq], pos0 = seq_pos0[sq];
  const int* table = tables + (long long)sq * max_blocks;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  int row0 = q0 + warp * 16;
  int ra = row0 + gid, rbw = ra + 8;
  bool va = ra < qlen, vb = rbw < qlen;
  const bf16* qa_p = q + ((long long)(qstart + (va ? ra : 0)) * hq + h) * HD;
  const bf16* qb_p = q + ((long long)(qstart + (vb ? rbw : 0)) * hq + h) * HD;
  u32 qf[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    int c = kk * 16 + 2 * tig;
    qf[kk][0] = va ? *(const u32*)(qa_p + c) : 0u;
    qf[kk][1] = vb ? *(const u32*)(qb_p + c) : 0u;
    qf[kk][2] = va ? *(const u32*)(qa_p + c + 8) : 0u;
    qf[kk][3] = vb ? *(const u32*)(qb_p + c + 8) : 0u;
  }
  float o[16][4];
#pragma unroll
  for (int d = 0; d < 16; d++) { o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f; }
  float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;
  int qpos_a = pos0 + ra, qpos_b = pos0 + rbw;
  int kv_len = pos0 + min(q0 + BQ, qlen);
  int warp_last = pos0 + min(row0 + 15, qlen - 1);
  for (int k0 = 0; k0 < kv_len; k0 += BK) {
    __syncthreads();
#pragma unroll
    for (int it = 0; it < 8; it++) {
      int idx = threadIdx.x + 128 * it, key = idx >> 4, c = idx & 15, kp = k0 + key;
      uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
      if (kp < kv_len) {
        long long off = (((long long)table[kp / bs] * bs + kp % bs) * hkv + gkv) * HD + c * 8;
        kv4 = *(const uint4*)(kc + off);
        vv4 = *(const uint4*)(vc + off);
      }
      *(uint4*)(ks + key * KS + c * 8) = kv4;
      *(uint4*)(vs + key * KS + c * 8) = vv4;
    }
    __syncthreads();
    if (k0 > warp_last) continue;
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const bf16* kr = ks + (nt * 8 + gid) * KS + 2 * tig;
#pragma unroll
      for (int kk = 0; kk < 8; kk++)
        mma16816(s[nt], qf[kk], *(const u32*)(kr + kk * 16), *(const u32*)(kr + kk * 16 + 8));
    }
    float mx_a = NEG_INF, mx_b = NEG_INF;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + nt * 8 + 2 * tig + (e & 1);
        int qp = e < 2 ? qpos_a : qpos_b;
        float v = s[nt][e] * scale_log2;
        if (key > qp || key >= kv_len) v = NEG_INF;
        s[nt][e] = v;
        if (e < 2) mx_a = fmaxf(mx_a, v); else mx_b = fmaxf(mx_b, v);
      }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 2));
    float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    float use_a = mn_a == NEG_INF ? 0.f : mn_a, use_b = mn_b == NEG_INF ? 0.f : mn_b;
    float corr_a = exp2f(m_a - use_a), corr_b = exp2f(m_b - use_b);
    m_a = mn_a; m_b = mn_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      s[nt][0] = exp2f(s[nt][0] - use_a); s[nt][1] = exp2f(s[nt][1] - use_a);
      s[nt][2] = exp2f(s[nt][2] - use_b); s[nt][3] = exp2f(s[nt][3] - use_b);
      sum_a += s[nt][0] + s[nt][1]; sum_b += s[nt][2] + s[nt][3];
    }
    l_a = l_a * corr_a + sum_a; l_b = l_b * corr_b + sum_b;
#pragma unroll
    for (int d = 0; d < 16; d++) { o[d][0] *= corr_a; o[d][1] *= corr_a; o[d][2] *= corr_b; o[d][3] *= corr_b; }
#pragma unroll
    for (int kt = 0; kt < 4; kt++) {
      u32 a[4] = {pack2(s[2 * kt][0], s[2 * kt][1]), pack2(s[2 * kt][2], s[2 * kt][3]),
                  pack2(s[2 * kt + 1][0], s[2 * kt + 1][1]), pack2(s[2 * kt + 1][2], s[2 * kt + 1][3])};
      const bf16* v0 = vs + (kt * 16 + 2 * tig) * KS + gid;
#pragma unroll
      for (int d = 0; d < 16; d++) {
        const bf16* vp = v0 + d * 8;
        u32 b0 = pack2h(vp[0], vp[KS]);
        u32 b1 = pack2h(vp[8 * KS], vp[9 * KS]);
        mma16816(o[d], a, b0, b1);
      }
    }
  }
  l_a += __shfl_xor_sync(0xffffffff, l_a, 1); l_a += __shfl_xor_sync(0xffffffff, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffff, l_b, 1); l_b += __shfl_xor_sync(0xffffffff, l_b, 2);
  bf16* oa = out + ((long long)(qstart + ra) * hq + h) * HD + 2 * tig;
  bf16* ob = out + ((long long)(qstart + rbw) * hq + h) * HD + 2 * tig;
#pragma unroll
  for (int d = 0; d < 16; d++) {
    if (va) *(__nv_bfloat162*)(oa + d * 8) = __floats2bfloat162_rn(o[d][0] / l_a, o[d][1] / l_a);
    if (vb) *(__nv_bfloat162*)(ob + d * 8) = __floats2bfloat162_rn(o[d][2] / l_b, o[d][3] / l_b);
  }
}

// Greedy sampling: argmax of each logits row (first index on ties). grid rows, 1024 threads.
extern "C" __global__ void argmax_rows(const bf16* logits, int vocab, int* out) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  const bf16* row = logits + (long long)blockIdx.x * vocab;
  float best = NEG_INF; int idx = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = __bfloat162float(row[i]);
    if (v > best) { best = v; idx = i; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffff, best, o);
    int oi = __shfl_xor_sync(0xffffffff, idx, o);
    if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
  }
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) { bv[w] = best; bi[w] = idx; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < (int)(blockDim.x >> 5); k++)
      if (bv[k] > best || (bv[k] == best && bi[k] < idx)) { best = bv[k]; idx = bi[k]; }
    out[blockIdx.x] = idx;
  }
}

// Deterministic pseudo-random bf16 fill, uniform in [-scale, scale] (or `scale` exactly when
// constant != 0), for `--weights random` and for benchmark KV contents.
extern "C" __global__ void fill_random(bf16* p, long long n, u64 seed, float scale, int constant) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (; i < n; i += stride) {
    if (constant) { p[i] = __float2bfloat16(scale); continue; }
    u64 z = seed + (u64)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}
