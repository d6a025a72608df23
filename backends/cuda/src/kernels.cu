// serverbench CUDA engine kernels (compiled at run time with NVRTC). bf16 storage, fp32 arithmetic.
// Rounding points follow the Hugging Face Qwen3/Llama modules so that logits match them closely.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define HD 128
#define NEG_INF __int_as_float(0xff800000)

// 2^x in one MUFU instruction (flushes subnormal results to zero; softmax weights that small are 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

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

// out = rmsnorm(x) * w, one block per row, 8 elements per thread and pass (hidden a multiple of 8).
// With `delta` non-null: x += delta first (x is the residual stream, updated in place, rounded to bf16
// as the reference adds in bf16).
extern "C" __global__ void add_rmsnorm(const bf16* delta, bf16* x, const bf16* w, bf16* out, int hidden, float eps) {
  __shared__ float sh[32];
  long long row = (long long)blockIdx.x * hidden;
  uint4* xr = (uint4*)(x + row);
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) {
    uint4 xv = xr[i];
    bf16* xe = (bf16*)&xv;
    if (delta) {
      uint4 dv = ((const uint4*)(delta + row))[i];
      const bf16* de = (const bf16*)&dv;
#pragma unroll
      for (int e = 0; e < 8; e++) xe[e] = __float2bfloat16(__bfloat162float(xe[e]) + __bfloat162float(de[e]));
      xr[i] = xv;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) { float v = __bfloat162float(xe[e]); ss += v * v; }
  }
  float r = rsqrtf(block_sum(ss, sh) / hidden + eps);
  for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) {
    uint4 xv = xr[i], wv = ((const uint4*)w)[i], ov;
    const bf16* xe = (const bf16*)&xv;
    const bf16* we = (const bf16*)&wv;
    bf16* oe = (bf16*)&ov;
#pragma unroll
    for (int e = 0; e < 8; e++) oe[e] = __float2bfloat16(__bfloat162float(we[e]) * rb(__bfloat162float(xe[e]) * r));
    ((uint4*)(out + row))[i] = ov;
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

// act[t, j] = silu(gate[t, j]) * up[t, j]; gate_up is [T, 2*inter] (gate first), inter a multiple of 8.
// grid (T, ceil(inter / 8 / 256)), 256 threads, 8 elements per thread.
extern "C" __global__ void swiglu(const bf16* gate_up, bf16* act, int inter) {
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= inter / 8) return;
  long long t = blockIdx.x;
  uint4 gv = ((const uint4*)(gate_up + t * 2 * inter))[c];
  uint4 uv = ((const uint4*)(gate_up + t * 2 * inter + inter))[c];
  const bf16* g = (const bf16*)&gv;
  const bf16* u = (const bf16*)&uv;
  uint4 ov;
  bf16* o = (bf16*)&ov;
#pragma unroll
  for (int e = 0; e < 8; e++) {
    float x = __bfloat162float(g[e]);
    o[e] = __float2bfloat16(rb(x / (1.f + expf(-x))) * __bfloat162float(u[e]));
  }
  ((uint4*)(act + t * inter))[c] = ov;
}

// ---- tensor-core and async-copy helpers (sm_80+) ----
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// 16-byte global -> shared copy that bypasses registers; zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldsm4(u32* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// The same, each matrix transposed (B fragments of a row-major [k][n] tile).
__device__ __forceinline__ void ldsm4t(u32* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ u32 pack2(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *(u32*)&v;
}
// c += a (16x16, row-major) * b (16x8, column-major); bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#define KS (HD + 8)  // shared-memory row stride of K/V/Q tiles: conflict-free ldmatrix

// Copies ROWS keys (K and V rows of KV head g) starting at key position k0 into shared tiles
// ks/vs (row stride KS); keys at or past `end` are zero-filled. THREADS threads; each copies
// 16-byte chunk tid % 16 of keys tid / 16 + (THREADS / 16) i. bs (tokens per KV block) is a power of two, and a
// layer's cache holds fewer than 2^31 elements (the host checks both), so offsets are 32-bit.
template <int ROWS, int THREADS = 128>
__device__ __forceinline__ void load_kv_tile(bf16* ks, bf16* vs, const bf16* kc, const bf16* vc, const int* table,
    int bs, int hkv, int g, int k0, int end) {
  int sh = __ffs(bs) - 1, c = threadIdx.x & 15;
  unsigned stride = (unsigned)hkv * HD;
  const bf16* kb = kc + g * HD + c * 8;
  const bf16* vb = vc + g * HD + c * 8;
#pragma unroll
  for (int i = 0; i < ROWS * 16 / THREADS; i++) {
    int key = (threadIdx.x >> 4) + THREADS / 16 * i, kp = k0 + key, kq = min(kp, end - 1);
    unsigned off = (((unsigned)table[kq >> sh] << sh) | (unsigned)(kq & (bs - 1))) * stride;
    cp_async16(ks + key * KS + c * 8, kb + off, kp < end);
    cp_async16(vs + key * KS + c * 8, vb + off, kp < end);
  }
}

// ---- decode attention: split-K over the context on tensor cores ----
// The query heads of one GQA group are the rows of one 16-row mma tile (rows past the group are zero),
// so every K/V element is read once per group. Each split of SPLIT keys goes through shared memory in
// chunks of DCH keys, double-buffered with cp.async; each warp takes DCH/4 keys of a chunk and keeps
// its own online softmax, and the four warps merge at the end.
#define SPLIT 256
#define DCH 64
#define MAXG 8
#define DEC_SMEM ((4 * DCH + 16) * KS * 2)
// grid (decode seqs, hkv, splits), 128 threads, DEC_SMEM bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(128) attn_decode_partial(const bf16* q, const bf16* kc, const bf16* vc,
    const int* qtok, const int* ctx_len, const int* tables, int max_blocks, int bs, int hq, int hkv,
    float scale_log2, int nsplit, float* part_o, float* part_ml) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kbuf = (bf16*)smem;                 // [2][DCH][KS]
  bf16* vbuf = kbuf + 2 * DCH * KS;         // [2][DCH][KS]
  bf16* qs = vbuf + 2 * DCH * KS;           // [16][KS]
  int j = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
  int warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  int group = hq / hkv;
  int L = ctx_len[j];
  int s0 = sp * SPLIT, s1 = min(L, s0 + SPLIT), n = s1 - s0;
  long long pbase = ((long long)j * hq + g * group) * nsplit + sp;
  if (n <= 0) {
    if (tid < group) { part_ml[(pbase + (long long)tid * nsplit) * 2] = NEG_INF; part_ml[(pbase + (long long)tid * nsplit) * 2 + 1] = 0.f; }
    return;
  }
  const int* table = tables + (long long)j * max_blocks;
  load_kv_tile<DCH>(kbuf, vbuf, kc, vc, table, bs, hkv, g, s0, s1);
  cp_async_commit();
  for (int idx = tid; idx < 16 * 16; idx += 128) {
    int r = idx >> 4, c = idx & 15;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < group) v = *(const uint4*)(q + ((long long)qtok[j] * hq + g * group + r) * HD + c * 8);
    *(uint4*)(qs + r * KS + c * 8) = v;
  }
  __syncthreads();
  u32 qf[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; kk++) ldsm4(qf[kk], qs + ((lane >> 3 & 1) * 8 + (lane & 7)) * KS + kk * 16 + (lane >> 4) * 8);
  float o[16][4];
#pragma unroll
  for (int d = 0; d < 16; d++) { o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f; }
  float m = NEG_INF, l = 0.f;
  int chunks = (n + DCH - 1) / DCH;
  for (int ch = 0; ch < chunks; ch++) {
    if (ch + 1 < chunks) {
      int nb = (ch + 1) & 1;
      load_kv_tile<DCH>(kbuf + nb * DCH * KS, vbuf + nb * DCH * KS, kc, vc, table, bs, hkv, g, s0 + (ch + 1) * DCH, s1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* ks = kbuf + (ch & 1) * DCH * KS + warp * 16 * KS;
    const bf16* vs = vbuf + (ch & 1) * DCH * KS + warp * 16 * KS;
    // scores of this warp's 16 keys: two n-tiles of 8
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++) { s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f; }
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
      u32 b[4];  // keys 0-7 dims kk*16 (+8), keys 8-15 dims kk*16 (+8)
      ldsm4(b, ks + ((lane >> 4) * 8 + (lane & 7)) * KS + kk * 16 + (lane >> 3 & 1) * 8);
      mma16816(s[0], qf[kk], b[0], b[1]);
      mma16816(s[1], qf[kk], b[2], b[3]);
    }
    int kbase = ch * DCH + warp * 16;
    float mx = NEG_INF;
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float v = kbase + nt * 8 + 2 * tig + e < n ? s[nt][e] * scale_log2 : NEG_INF;
        s[nt][e] = v;
        mx = fmaxf(mx, v);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    float mn = fmaxf(m, mx);
    float use = mn == NEG_INF ? 0.f : mn;
    float corr = exp2f(m - use);
    m = mn;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
      s[nt][0] = exp2f(s[nt][0] - use); s[nt][1] = exp2f(s[nt][1] - use);
      sum += s[nt][0] + s[nt][1];
    }
    l = l * corr + sum;
    u32 a[4] = {pack2(s[0][0], s[0][1]), 0u, pack2(s[1][0], s[1][1]), 0u};
#pragma unroll
    for (int d = 0; d < 16; d += 2) {
      u32 b[4];  // keys 0-7 / 8-15 of dims d*8 and (d+1)*8
      ldsm4t(b, vs + ((lane >> 3 & 1) * 8 + (lane & 7)) * KS + d * 8 + (lane >> 4) * 8);
      o[d][0] *= corr; o[d][1] *= corr; o[d + 1][0] *= corr; o[d + 1][1] *= corr;
      mma16816(o[d], a, b[0], b[1]);
      mma16816(o[d + 1], a, b[2], b[3]);
    }
    __syncthreads();
  }
  // merge the four warps: row gid of each warp holds head gid's (m, l, o) over that warp's keys
  l += __shfl_xor_sync(0xffffffff, l, 1);
  l += __shfl_xor_sync(0xffffffff, l, 2);
  float* wo = (float*)smem;                  // [4][MAXG][HD]
  float* wm = wo + 4 * MAXG * HD;            // [4][MAXG]
  float* wl = wm + 4 * MAXG;                 // [4][MAXG]
  if (gid < group) {
#pragma unroll
    for (int d = 0; d < 16; d++) {
      wo[(warp * MAXG + gid) * HD + d * 8 + 2 * tig] = o[d][0];
      wo[(warp * MAXG + gid) * HD + d * 8 + 2 * tig + 1] = o[d][1];
    }
    if (tig == 0) { wm[warp * MAXG + gid] = m; wl[warp * MAXG + gid] = l; }
  }
  __syncthreads();
  for (int h = 0; h < group; h++) {
    float M = fmaxf(fmaxf(wm[h], wm[MAXG + h]), fmaxf(wm[2 * MAXG + h], wm[3 * MAXG + h]));
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
      float f = exp2f(wm[w * MAXG + h] - M);  // a warp with no keys has m = -inf: weight 0
      num += wo[(w * MAXG + h) * HD + tid] * f;
      den += wl[w * MAXG + h] * f;
    }
    part_o[(pbase + (long long)h * nsplit) * HD + tid] = num;
    if (tid == 0) { part_ml[(pbase + (long long)h * nsplit) * 2] = M; part_ml[(pbase + (long long)h * nsplit) * 2 + 1] = den; }
  }
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
// A block serves one KV head with four warps; each warp takes two "units" of 16 queries of one query
// head of that KV head's GQA group (32 rows), so the group's heads share every K/V tile the block loads
// and each K/V fragment a warp reads from shared memory feeds two MMAs (units are numbered token group
// major: unit u is queries 16 (u / group) .. +16 of head u % group). K/V tiles of BK keys are
// double-buffered in shared memory with cp.async (the next tile loads while this one is computed); the
// query rows wait in shared memory too, and fragments come out with ldmatrix. Measured on the H200
// against 16 rows per warp (eight warps) and 64-key tiles: docs/cuda-engine.md.
#define PU 8  // units per block
#define BK 32
#define PF_SMEM ((4 * BK + PU * 16) * KS * 2)

__device__ __forceinline__ void tree_max(float* t, int n) {
#pragma unroll
  for (int w = n / 2; w >= 1; w >>= 1)
#pragma unroll
    for (int i = 0; i < w; i++) t[i] = fmaxf(t[i], t[i + w]);
}
__device__ __forceinline__ void tree_sum(float* t, int n) {
#pragma unroll
  for (int w = n / 2; w >= 1; w >>= 1)
#pragma unroll
    for (int i = 0; i < w; i++) t[i] += t[i + w];
}

// grid (tiles, hkv), 128 threads, PF_SMEM bytes of dynamic shared memory.
// Tile i covers units tile_u0[i] .. +PU of prefill sequence tile_seq[i]; that sequence's queries are
// batch tokens seq_qstart .. +seq_qlen at positions seq_pos0 .. ; keys are positions 0 ..= query position.
extern "C" __global__ void __launch_bounds__(128, 2) attn_prefill(const bf16* q, const bf16* kc, const bf16* vc, bf16* out,
    const int* tile_seq, const int* tile_u0, const int* seq_qstart, const int* seq_qlen, const int* seq_pos0,
    const int* tables, int max_blocks, int bs, int hq, int hkv, float scale_log2) {
  constexpr int NT = BK / 8;  // n-tiles of 8 keys per K/V tile
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kbuf = (bf16*)smem;         // [2][BK][KS]
  bf16* vbuf = kbuf + 2 * BK * KS;  // [2][BK][KS]
  bf16* qs = vbuf + 2 * BK * KS;    // [PU * 16][KS]
  int gkv = blockIdx.y, group = hq / hkv;
  int sq = tile_seq[blockIdx.x], u0 = tile_u0[blockIdx.x];
  int qstart = seq_qstart[sq], qlen = seq_qlen[sq], pos0 = seq_pos0[sq];
  const int* table = tables + (long long)sq * max_blocks;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  int units = ((qlen + 15) >> 4) * group;
  int kv_len = pos0 + min(((min(u0 + PU, units) - 1) / group + 1) * 16, qlen);
  int tiles = (kv_len + BK - 1) / BK;
  bool active[2];
  int h[2], row0[2], warp_last = -1;
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    int u = u0 + 2 * warp + mt, tg = u / group;
    active[mt] = u < units;
    h[mt] = gkv * group + (u - tg * group);
    row0[mt] = tg * 16;
    if (active[mt]) warp_last = max(warp_last, pos0 + min(row0[mt] + 15, qlen - 1));
  }
  bf16* qw = qs + warp * 32 * KS;  // this warp's 32 query rows (two units), zeros past the chunk
  for (int i = lane; i < 32 * 16; i += 32) {
    int r = i >> 4, c = i & 15;
    bool hi = r >= 16;  // second unit (selects, not indexing: the arrays stay in registers)
    int row = (hi ? row0[1] : row0[0]) + (r & 15), head = hi ? h[1] : h[0];
    bool ok = (hi ? active[1] : active[0]) && row < qlen;
    cp_async16(qw + r * KS + c * 8, q + ((long long)(qstart + (ok ? row : 0)) * hq + head) * HD + c * 8, ok);
  }
  load_kv_tile<BK, 128>(kbuf, vbuf, kc, vc, table, bs, hkv, gkv, 0, kv_len);
  cp_async_commit();
  float o[2][16][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int d = 0; d < 16; d++) { o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.f; }
  float m[2][2], l[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; mt++) { m[mt][0] = m[mt][1] = NEG_INF; l[mt][0] = l[mt][1] = 0.f; }
  for (int t = 0; t < tiles; t++) {
    int k0 = t * BK;
    if (t + 1 < tiles) {
      int nb = (t + 1) & 1;
      load_kv_tile<BK, 128>(kbuf + nb * BK * KS, vbuf + nb * BK * KS, kc, vc, table, bs, hkv, gkv, k0 + BK, kv_len);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (k0 <= warp_last) {
      const bf16* ks = kbuf + (t & 1) * BK * KS;
      const bf16* vs = vbuf + (t & 1) * BK * KS;
      float s[2][NT][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) { s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f; }
#pragma unroll
      for (int kk = 0; kk < 8; kk++) {
        u32 a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
          ldsm4(a[mt], qw + (mt * 16 + (lane >> 3 & 1) * 8 + (lane & 7)) * KS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
          u32 b[4];
          ldsm4(b, ks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * KS + kk * 16 + (lane >> 3 & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            mma16816(s[mt][2 * np], a[mt], b[0], b[1]);
            mma16816(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
      u32 pa[2][NT / 2][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        if (!(k0 + BK - 1 <= pos0 + row0[mt] && k0 + BK <= kv_len)) {  // some key hidden from some row
          int qpos_a = pos0 + row0[mt] + gid, qpos_b = qpos_a + 8;
#pragma unroll
          for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
              int key = k0 + nt * 8 + 2 * tig + (e & 1);
              if (key > (e < 2 ? qpos_a : qpos_b) || key >= kv_len) s[mt][nt][e] = NEG_INF;
            }
        }
        float ta[NT / 2], tb[NT / 2];
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
          ta[i] = fmaxf(fmaxf(s[mt][2 * i][0], s[mt][2 * i][1]), fmaxf(s[mt][2 * i + 1][0], s[mt][2 * i + 1][1]));
          tb[i] = fmaxf(fmaxf(s[mt][2 * i][2], s[mt][2 * i][3]), fmaxf(s[mt][2 * i + 1][2], s[mt][2 * i + 1][3]));
        }
        tree_max(ta, NT / 2);
        tree_max(tb, NT / 2);
        float mx_a = ta[0], mx_b = tb[0];
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 2));
        float mn_a = fmaxf(m[mt][0], mx_a), mn_b = fmaxf(m[mt][1], mx_b);
        float use_a = mn_a == NEG_INF ? 0.f : mn_a * scale_log2, use_b = mn_b == NEG_INF ? 0.f : mn_b * scale_log2;
        float corr_a = ex2(m[mt][0] * scale_log2 - use_a), corr_b = ex2(m[mt][1] * scale_log2 - use_b);
        m[mt][0] = mn_a; m[mt][1] = mn_b;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          s[mt][nt][0] = ex2(fmaf(s[mt][nt][0], scale_log2, -use_a)); s[mt][nt][1] = ex2(fmaf(s[mt][nt][1], scale_log2, -use_a));
          s[mt][nt][2] = ex2(fmaf(s[mt][nt][2], scale_log2, -use_b)); s[mt][nt][3] = ex2(fmaf(s[mt][nt][3], scale_log2, -use_b));
        }
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
          ta[i] = (s[mt][2 * i][0] + s[mt][2 * i][1]) + (s[mt][2 * i + 1][0] + s[mt][2 * i + 1][1]);
          tb[i] = (s[mt][2 * i][2] + s[mt][2 * i][3]) + (s[mt][2 * i + 1][2] + s[mt][2 * i + 1][3]);
        }
        tree_sum(ta, NT / 2);
        tree_sum(tb, NT / 2);
        l[mt][0] = l[mt][0] * corr_a + ta[0]; l[mt][1] = l[mt][1] * corr_b + tb[0];
        if (__any_sync(0xffffffff, corr_a != 1.f || corr_b != 1.f)) {  // a row's maximum moved
#pragma unroll
          for (int d = 0; d < 16; d++) { o[mt][d][0] *= corr_a; o[mt][d][1] *= corr_a; o[mt][d][2] *= corr_b; o[mt][d][3] *= corr_b; }
        }
#pragma unroll
        for (int kt = 0; kt < NT / 2; kt++) {
          pa[mt][kt][0] = pack2(s[mt][2 * kt][0], s[mt][2 * kt][1]);
          pa[mt][kt][1] = pack2(s[mt][2 * kt][2], s[mt][2 * kt][3]);
          pa[mt][kt][2] = pack2(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
          pa[mt][kt][3] = pack2(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
        }
      }
#pragma unroll
      for (int kt = 0; kt < NT / 2; kt++)
#pragma unroll
        for (int d = 0; d < 16; d += 2) {
          u32 b[4];
          ldsm4t(b, vs + (kt * 16 + (lane >> 3 & 1) * 8 + (lane & 7)) * KS + d * 8 + (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            mma16816(o[mt][d], pa[mt][kt], b[0], b[1]);
            mma16816(o[mt][d + 1], pa[mt][kt], b[2], b[3]);
          }
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    if (!active[mt]) continue;
    float la = l[mt][0], lb = l[mt][1];
    la += __shfl_xor_sync(0xffffffff, la, 1); la += __shfl_xor_sync(0xffffffff, la, 2);
    lb += __shfl_xor_sync(0xffffffff, lb, 1); lb += __shfl_xor_sync(0xffffffff, lb, 2);
    int ra = row0[mt] + gid, rbw = ra + 8;
    bf16* oa = out + ((long long)(qstart + ra) * hq + h[mt]) * HD + 2 * tig;
    bf16* ob = out + ((long long)(qstart + rbw) * hq + h[mt]) * HD + 2 * tig;
#pragma unroll
    for (int d = 0; d < 16; d++) {
      if (ra < qlen) *(__nv_bfloat162*)(oa + d * 8) = __floats2bfloat162_rn(o[mt][d][0] / la, o[mt][d][1] / la);
      if (rbw < qlen) *(__nv_bfloat162*)(ob + d * 8) = __floats2bfloat162_rn(o[mt][d][2] / lb, o[mt][d][3] / lb);
    }
  }
}

// ---- prefill attention on Hopper (sm_90a): warpgroup MMA, a producer warpgroup, an mbarrier ring ----
// The same work split as attn_prefill (a block = one KV head and PU units of 16 queries x one query head),
// in three warpgroups. Warpgroup 0 copies K/V tiles of WBK keys from the paged cache into a ring of WST
// shared-memory stages (cp.async; each copying thread waits for its own copies WLAG tiles later, fences
// them for the async proxy and arrives on the stage's "full" barrier). Warpgroups 1 and 2 take four units
// each (64 rows) and, per tile: S = Q K^T with wgmma from shared memory (m64n64k16), the online softmax in
// registers, O += P V with P from registers (m64n128k16), then each warp arrives on the stage's "empty"
// barrier. The two consumer warpgroups are not synchronised with each other, so one's softmax overlaps the
// other's matrix products. Tiles are stored in the 128-byte swizzled layout wgmma reads without bank
// conflicts: two halves of 64 dims, one 128-byte line per key (or query row), 16-byte chunk c of line r at
// position c ^ (r % 8). Every tile is computed by both consumer warpgroups (keys past a row's position are
// masked), so no wgmma sits on a path ptxas must treat as divergent (it would serialise them). Measured on
// the H200 against the mma.sync kernel and three variants (turn-taking, next tile's S issued early):
// docs/cuda-engine.md.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ARCH 1
#endif
#define WBK 64
#define WST 4
#define WLAG 2                  // tiles a producer thread keeps in flight before it signals one
#define WTILE (WBK * HD * 2)    // bytes of one K or V tile
#define WQ (64 * HD * 2)        // bytes of one consumer warpgroup's query rows
#define WG_SMEM (1024 + 2 * WQ + WST * 2 * WTILE + 2 * WST * 8)

__device__ __forceinline__ u32 sw_off(int row, int c) { return ((c >> 3) << 13) | (row << 7) | (((c & 7) ^ (row & 7)) << 4); }
// Shared-memory matrix descriptor, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ u64 sw_desc(u32 addr, u32 lbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void cp_async16s(u32 dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(n)); }
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving register reads or writes across an asynchronous wgmma's issue or wait.
template <int N> __device__ __forceinline__ void reg_fence(float* r) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(u32* r) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}
// D (64 x 64 fp32, the accumulator layout of m64n64) = A (64 x 16 bf16, K-major in shared memory) * B
// (16 x 64, K-major in shared memory), + D when acc != 0. Asynchronous: fence, commit and wait around it.
__device__ __forceinline__ void wg_m64n64_ss(float* d, u64 da, u64 db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(acc));
}
// D (64 x 128 fp32) += A (64 x 16 bf16 in registers, the m16n8k16 A layout per warp) * B (16 x 128,
// N-major in shared memory). Asynchronous.
__device__ __forceinline__ void wg_m64n128_rs(float* d, const u32* a, u64 db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// Online softmax of one 64-key tile for this thread's two rows (a = gid, b = gid + 8 of its warp's unit):
// masks keys past the query's position or past kv_len where the tile crosses them, updates m and l,
// and leaves P (bf16, the A layout of m64nNk16) in pa; returns the factors O must be rescaled by.
__device__ __forceinline__ void wg_softmax(float* sc, u32 (*pa)[4], float* m, float* l, float2& corr, int k0, int qa,
    int kv_len, int tig, float scale_log2) {
  if (k0 + WBK - 1 > qa || k0 + WBK > kv_len) {  // some key of the tile hidden from some row
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + j * 8 + 2 * tig + (e & 1);
        if (key > (e < 2 ? qa : qa + 8) || key >= kv_len) sc[4 * j + e] = NEG_INF;
      }
  }
  float ta[4], tb[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    ta[i] = fmaxf(fmaxf(sc[8 * i], sc[8 * i + 1]), fmaxf(sc[8 * i + 4], sc[8 * i + 5]));
    tb[i] = fmaxf(fmaxf(sc[8 * i + 2], sc[8 * i + 3]), fmaxf(sc[8 * i + 6], sc[8 * i + 7]));
  }
  tree_max(ta, 4);
  tree_max(tb, 4);
  float mx_a = ta[0], mx_b = tb[0];
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 1));
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, 2));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 1));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, 2));
  float mn_a = fmaxf(m[0], mx_a), mn_b = fmaxf(m[1], mx_b);
  float use_a = mn_a == NEG_INF ? 0.f : mn_a * scale_log2, use_b = mn_b == NEG_INF ? 0.f : mn_b * scale_log2;
  corr.x = ex2(m[0] * scale_log2 - use_a);
  corr.y = ex2(m[1] * scale_log2 - use_b);
  m[0] = mn_a; m[1] = mn_b;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    sc[4 * j] = ex2(fmaf(sc[4 * j], scale_log2, -use_a)); sc[4 * j + 1] = ex2(fmaf(sc[4 * j + 1], scale_log2, -use_a));
    sc[4 * j + 2] = ex2(fmaf(sc[4 * j + 2], scale_log2, -use_b)); sc[4 * j + 3] = ex2(fmaf(sc[4 * j + 3], scale_log2, -use_b));
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    ta[i] = (sc[8 * i] + sc[8 * i + 1]) + (sc[8 * i + 4] + sc[8 * i + 5]);
    tb[i] = (sc[8 * i + 2] + sc[8 * i + 3]) + (sc[8 * i + 6] + sc[8 * i + 7]);
  }
  tree_sum(ta, 4);
  tree_sum(tb, 4);
  l[0] = l[0] * corr.x + ta[0];
  l[1] = l[1] * corr.y + tb[0];
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    pa[kk][0] = pack2(sc[8 * kk], sc[8 * kk + 1]);
    pa[kk][1] = pack2(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack2(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack2(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

__device__ __forceinline__ void wg_rescale(float* o, float2 corr) {
  if (__any_sync(0xffffffff, corr.x != 1.f || corr.y != 1.f)) {
#pragma unroll
    for (int d = 0; d < 16; d++) { o[4 * d] *= corr.x; o[4 * d + 1] *= corr.x; o[4 * d + 2] *= corr.y; o[4 * d + 3] *= corr.y; }
  }
}

// S = Q K^T from the query rows at qb and a K tile at kb (eight k-steps of 16 dims; the second 64-dim half is 8 KB further on).
__device__ __forceinline__ void wg_issue_s(float* sc, u32 qb, u32 kb) {
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    u32 off = (kk >> 2) * 8192 + (kk & 3) * 32;
    wg_m64n64_ss(sc, sw_desc(qb + off, 16), sw_desc(kb + off, 16), kk);
  }
  wg_commit();
}

// O += P V with the V tile at vb (four k-steps of 16 keys, 2 KB apart; the 64-dim halves of V are 8 KB apart).
__device__ __forceinline__ void wg_issue_pv(float* o, u32 (*pa)[4], u32 vb) {
  reg_fence<64>(o);
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++) wg_m64n128_rs(o, pa[kk], sw_desc(vb + kk * 2048, 8192));
  wg_commit();
}

// grid (tiles, hkv), 384 threads, WG_SMEM bytes of dynamic shared memory; arguments as attn_prefill's.
extern "C" __global__ void __launch_bounds__(384, 1) attn_prefill_wg(const bf16* q, const bf16* kc, const bf16* vc, bf16* out,
    const int* tile_seq, const int* tile_u0, const int* seq_qstart, const int* seq_qlen, const int* seq_pos0,
    const int* tables, int max_blocks, int bs, int hq, int hkv, float scale_log2) {
#ifdef WG_ARCH
  extern __shared__ __align__(16) unsigned char smem[];
  u32 base = (smem_addr(smem) + 1023) & ~1023u;
  u32 qbase = base, kbase = base + 2 * WQ, vbase = kbase + WST * WTILE, full = vbase + WST * WTILE, empty = full + WST * 8;
  int tid = threadIdx.x, wg = tid >> 7, t128 = tid & 127;
  int gkv = blockIdx.y, group = hq / hkv;
  int sq = tile_seq[blockIdx.x], u0 = tile_u0[blockIdx.x];
  int qstart = seq_qstart[sq], qlen = seq_qlen[sq], pos0 = seq_pos0[sq];
  const int* table = tables + (long long)sq * max_blocks;
  int units = ((qlen + 15) >> 4) * group;
  int kv_len = pos0 + min(((min(u0 + PU, units) - 1) / group + 1) * 16, qlen);
  int tiles = (kv_len + WBK - 1) / WBK;
  if (tid == 0) {
    for (int s = 0; s < WST; s++) { mbar_init(full + 8 * s, 128); mbar_init(empty + 8 * s, 8); }
  }
  __syncthreads();
  if (wg == 0) {  // producer
    int c = t128 & 15, sh = __ffs(bs) - 1;
    unsigned stride = (unsigned)hkv * HD;
    const bf16* kb = kc + gkv * HD + c * 8;
    const bf16* vb = vc + gkv * HD + c * 8;
    for (int t = 0; t < tiles; t++) {
      int s = t % WST, k0 = t * WBK;
      if (t >= WST) mbar_wait(empty + 8 * s, ((t / WST) - 1) & 1);
#pragma unroll
      for (int i = 0; i < WBK / 8; i++) {
        int key = (t128 >> 4) + 8 * i, kp = k0 + key, kq = min(kp, kv_len - 1);
        unsigned off = (((unsigned)table[kq >> sh] << sh) | (unsigned)(kq & (bs - 1))) * stride;
        u32 so = sw_off(key, c);
        cp_async16s(kbase + s * WTILE + so, kb + off, kp < kv_len);
        cp_async16s(vbase + s * WTILE + so, vb + off, kp < kv_len);
      }
      cp_async_commit();
      if (t >= WLAG) {
        cp_async_wait<WLAG>();
        fence_async_smem();
        mbar_arrive(full + 8 * ((t - WLAG) % WST));
      }
    }
    cp_async_wait<0>();
    fence_async_smem();
    for (int t = max(0, tiles - WLAG); t < tiles; t++) mbar_arrive(full + 8 * (t % WST));
    return;
  }
  int g = wg - 1, warp = t128 >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  int u = u0 + 4 * g + warp, tg = u / group;
  bool active = u < units;
  int h = gkv * group + (u - tg * group), row0 = tg * 16;
  int qa = pos0 + row0 + gid;  // this thread's first row's position (the second is qa + 8)
  u32 qb = qbase + g * WQ;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    int idx = t128 + 128 * i, r = idx >> 4, c = idx & 15;
    int uu = u0 + 4 * g + (r >> 4), ttg = uu / group, hh = gkv * group + (uu - ttg * group), row = ttg * 16 + (r & 15);
    bool ok = uu < units && row < qlen;
    cp_async16s(qb + sw_off(r, c), q + ((long long)(qstart + (ok ? row : 0)) * hq + (ok ? hh : 0)) * HD + c * 8, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_smem();
  named_sync(1 + g, 128);  // this warpgroup's query rows are in place
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; i++) o[i] = 0.f;
  float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
  u32 pa[4][4];
  for (int t = 0; t < tiles; t++) {
    int s = t % WST, k0 = t * WBK;
    mbar_wait(full + 8 * s, (t / WST) & 1);
    float sc[32];
    wg_issue_s(sc, qb, kbase + s * WTILE);
    wg_wait<0>();
    reg_fence<32>(sc);
    float2 corr;
    wg_softmax(sc, pa, m, l, corr, k0, qa, kv_len, tig, scale_log2);
    wg_rescale(o, corr);
    wg_issue_pv(o, pa, vbase + s * WTILE);
    wg_wait<0>();
    reg_fence<64>(o);
    reg_fence<16>(&pa[0][0]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);
  }
  if (!active) return;
  float la = l[0], lb = l[1];
  la += __shfl_xor_sync(0xffffffff, la, 1); la += __shfl_xor_sync(0xffffffff, la, 2);
  lb += __shfl_xor_sync(0xffffffff, lb, 1); lb += __shfl_xor_sync(0xffffffff, lb, 2);
  int ra = row0 + gid, rbw = ra + 8;
  bf16* oa = out + ((long long)(qstart + ra) * hq + h) * HD + 2 * tig;
  bf16* ob = out + ((long long)(qstart + rbw) * hq + h) * HD + 2 * tig;
#pragma unroll
  for (int d = 0; d < 16; d++) {
    if (ra < qlen) *(__nv_bfloat162*)(oa + d * 8) = __floats2bfloat162_rn(o[4 * d] / la, o[4 * d + 1] / la);
    if (rbw < qlen) *(__nv_bfloat162*)(ob + d * 8) = __floats2bfloat162_rn(o[4 * d + 2] / lb, o[4 * d + 3] / lb);
  }
#endif
}

// ---- small-batch linear layer (decode): y[t, n] = x[t, :] · w[n, :] for T <= GV_MAXT rows ----
// x (T x K bf16) is staged once per block in dynamic shared memory; the block's 8 warps then take
// output rows in turn (grid-stride, the grid sized to the GPU), each streaming its weight row with
// 16-byte loads, GV_UNROLL of them in flight per lane. fp32 accumulation, bf16 output (as cuBLAS).
// 256 threads, T * K * 2 bytes of dynamic shared memory.
#define GV_MAXT 4
#define GV_UNROLL 8
extern "C" __global__ void __launch_bounds__(256) gemv_small(const bf16* x, const bf16* w, bf16* y, int T, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* xs = (uint4*)smem;
  int n8 = K / 8, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < T * n8; i += blockDim.x) xs[i] = ((const uint4*)x)[i];
  __syncthreads();
  for (int row = blockIdx.x * 8 + (threadIdx.x >> 5); row < N; row += gridDim.x * 8) {
    const uint4* wr = (const uint4*)(w + (long long)row * K);
    float acc[GV_MAXT];
#pragma unroll
    for (int t = 0; t < GV_MAXT; t++) acc[t] = 0.f;
    for (int base = 0; base < n8; base += 32 * GV_UNROLL) {
      uint4 wv[GV_UNROLL];
#pragma unroll
      for (int u = 0; u < GV_UNROLL; u++) {
        int i = base + u * 32 + lane;
        wv[u] = i < n8 ? __ldcs(wr + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < GV_UNROLL; u++) {
        int i = base + u * 32 + lane;
        if (i >= n8) break;
        const __nv_bfloat162* w2 = (const __nv_bfloat162*)&wv[u];
#pragma unroll
        for (int t = 0; t < GV_MAXT; t++) {
          if (t >= T) break;
          uint4 xv = xs[t * n8 + i];
          const __nv_bfloat162* x2 = (const __nv_bfloat162*)&xv;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            float2 wf = __bfloat1622float2(w2[e]), xf = __bfloat1622float2(x2[e]);
            acc[t] += wf.x * xf.x + wf.y * xf.y;
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < GV_MAXT; t++) {
      if (t >= T) break;
      float v = acc[t];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
      if (lane == 0) y[(long long)t * N + row] = __float2bfloat16(v);
    }
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
