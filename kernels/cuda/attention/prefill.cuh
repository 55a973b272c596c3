// Tiled (FlashAttention-2 style) paged attention for queries of 2+ tokens.
//
// One block of 4 warps per (tile of 64 query rows, query head, sequence);
// warp w owns rows 16w..16w+15 of the tile. Query row i of a sequence sits
// at position ctx + i (ctx = seq_len - query_len: chunked prefill and
// prefix-cache hits start past 0) and sees keys 0..ctx + i. The block walks
// the key tiles [0, ctx + last row], loading K and V tiles of `tile_keys`
// rows through the block table into shared memory (cp.async, 16 bytes, zero
// filled past the last visible key), and keeps per row an online softmax in
// registers: S = Q K^T for the warp's 16 rows, causal mask only on tiles
// that cross the warp's diagonal, running max and sum, O += P V.
//
// bfloat16/float16 run both products on tensor cores, mma.sync m16n8k16
// with float32 accumulators: Q and K fragments come from ldmatrix, V's from
// ldmatrix.trans, P is re-packed from the S accumulators in registers (the
// C fragment of S is the A fragment of P V). float32 runs the same fragment
// layout with plain FMAs (strict float32, no TF32): S from shared memory
// float4s, P through a per-warp shared buffer. Fragment layout of a
// 16x8 accumulator tile, per lane (g = lane / 4, t = lane % 4):
//   c[0], c[1]: row g,     columns 2t, 2t + 1
//   c[2], c[3]: row g + 8, columns 2t, 2t + 1
//
// FP8 caches: K and V tiles are read as e4m3 codes and widened into the
// shared tiles as T (load_code_tiles), k_scale folded into the scores' scale
// and v_scale into the output's.
//
// Shared memory rows are padded (8 bf16/f16 or 4 floats past the head_dim
// rounded up to 16) so ldmatrix and the float4 loads hit distinct banks; the
// columns past head_dim are zero and stay zero.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/mma.cuh"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda::attention {

constexpr int prefill_warps = 4;
constexpr int prefill_threads = 32 * prefill_warps;
constexpr int prefill_rows = 16 * prefill_warps;  // query rows per block

template <class T>
struct prefill_shape {
  static constexpr bool tensor_cores = sizeof(T) == 2;
  static constexpr int tile_keys = tensor_cores ? 64 : 32;
  static constexpr int row_pad = tensor_cores ? 8 : 4;  // elements past the padded head_dim
  static constexpr int p_ld = tile_keys + 4;            // float32 P buffer row stride
};

__host__ __device__ constexpr int padded_head_dim(int head_dim) { return (head_dim + 15) / 16 * 16; }

template <class T>
__host__ __device__ constexpr int prefill_ld(int head_dim) {
  return padded_head_dim(head_dim) + prefill_shape<T>::row_pad;
}

// Q tile, K tile, V tile (and float32's P buffers): a multiple of 16 bytes.
template <class T>
__host__ __device__ constexpr size_t prefill_smem_bytes(int head_dim) {
  using shape = prefill_shape<T>;
  size_t bytes = static_cast<size_t>(prefill_rows + 2 * shape::tile_keys) *
                 static_cast<size_t>(prefill_ld<T>(head_dim)) * sizeof(T);
  if (!shape::tensor_cores) {
    bytes += static_cast<size_t>(prefill_warps) * 16 * shape::p_ld * sizeof(float);
  }
  return bytes;
}

__device__ __forceinline__ void cp_async_16(void* smem_ptr, const void* global_ptr, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  const int src_bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_ptr),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Rows [0, total_rows) of a shared tile (row stride ld) from global rows
// row_src(r) of head_dim elements; rows >= valid_rows become zeros (columns
// past head_dim are left alone: zero). vec16: 16-byte cp.async (head_dim *
// sizeof(T) % 16 == 0, 16-byte aligned rows), walking DMAX-wide rows so the
// index arithmetic is shifts; else 4-byte words through registers (any even
// head_dim).
template <class T, int DMAX, class RowSrc>
__device__ __forceinline__ void load_tile(T* dst, int ld, int total_rows, int valid_rows,
                                          int head_dim, bool vec16, const void* any_global,
                                          RowSrc row_src) {
  if (vec16) {
    constexpr int per_vector = 16 / static_cast<int>(sizeof(T));
    constexpr int vectors = DMAX / per_vector;  // a power of two
    for (int i = threadIdx.x; i < total_rows * vectors; i += prefill_threads) {
      const int r = i / vectors;
      const int c = (i % vectors) * per_vector;
      if (c >= head_dim) continue;
      const bool valid = r < valid_rows;
      cp_async_16(dst + r * ld + c, valid ? static_cast<const void*>(row_src(r) + c) : any_global,
                  valid);
    }
  } else {
    const int row_words = head_dim * static_cast<int>(sizeof(T)) / 4;
    for (int i = threadIdx.x; i < total_rows * row_words; i += prefill_threads) {
      const int r = i / row_words;
      const int c = i - r * row_words;
      uint32_t w = 0;
      if (r < valid_rows) w = __ldg(reinterpret_cast<const unsigned int*>(row_src(r)) + c);
      reinterpret_cast<uint32_t*>(dst + r * ld)[c] = w;
    }
  }
}

// 8 e4m3 codes widened (exactly, through float16) to T at `out` (16-byte
// aligned).
template <class T>
__device__ __forceinline__ void store_codes(T* out, uint2 codes) {
  if constexpr (std::is_same_v<T, __half>) {
    uint32_t h[4];  // float16 pairs
    e4m3x4_to_f16x4(codes.x, h[0], h[1]);
    e4m3x4_to_f16x4(codes.y, h[2], h[3]);
    *reinterpret_cast<uint4*>(out) = make_uint4(h[0], h[1], h[2], h[3]);
  } else {
    float f[8];
    e4m3x4_to_float(codes.x, f);
    e4m3x4_to_float(codes.y, f + 4);
    if constexpr (std::is_same_v<T, float>) {
      reinterpret_cast<float4*>(out)[0] = make_float4(f[0], f[1], f[2], f[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
      *reinterpret_cast<uint4*>(out) = make_uint4(pack_pair<T>(f[0], f[1]), pack_pair<T>(f[2], f[3]),
                                                  pack_pair<T>(f[4], f[5]), pack_pair<T>(f[6], f[7]));
    }
  }
}

// The FP8 cache's K and V tiles: rows [0, ROWS) of two shared tiles (row
// stride ld, the compute type T) from global rows k_src(r) / v_src(r) of
// head_dim e4m3 codes, 8 at a time (8-byte loads, every one of a thread
// issued before the first is widened); rows >= valid_rows become zeros
// (columns past head_dim are left alone: zero). REQUIRES: head_dim % 8 ==
// 0, 8-byte aligned rows.
template <class T, int DMAX, int ROWS, class KSrc, class VSrc>
__device__ __forceinline__ void load_code_tiles(T* k_dst, T* v_dst, int ld, int valid_rows,
                                                int head_dim, KSrc k_src, VSrc v_src) {
  constexpr int vectors = DMAX / 8;  // a power of two
  constexpr int per_thread = ROWS * vectors / prefill_threads;
  static_assert(ROWS * vectors % prefill_threads == 0);
  uint2 kc[per_thread], vc[per_thread];
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int idx = threadIdx.x + i * prefill_threads;
    const int r = idx / vectors, c = (idx % vectors) * 8;
    const bool valid = r < valid_rows && c < head_dim;
    kc[i] = valid ? __ldg(reinterpret_cast<const uint2*>(k_src(r) + c)) : make_uint2(0u, 0u);
    vc[i] = valid ? __ldg(reinterpret_cast<const uint2*>(v_src(r) + c)) : make_uint2(0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int idx = threadIdx.x + i * prefill_threads;
    const int r = idx / vectors, c = (idx % vectors) * 8;
    if (c >= head_dim) continue;
    store_codes(k_dst + r * ld + c, kc[i]);
    store_codes(v_dst + r * ld + c, vc[i]);
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_ptr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_ptr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// s[j] (keys 8j..8j+7 of the tile, the warp's 16 rows) = Q K^T.
template <class T, int DMAX, int BN>
__device__ __forceinline__ void tile_scores(const T* q_s, const T* k_s, int ld, int dp,
                                            int warp_row, int lane, float (&s)[BN / 8][4]) {
  if constexpr (prefill_shape<T>::tensor_cores) {
    for (int kk = 0; kk < dp / 16; ++kk) {
      uint32_t a[4];  // rows lane % 16, dims kk*16 + 8 * (lane / 16): a0..a3 in mma order
      ldmatrix_x4(a, q_s + (warp_row + lane % 16) * ld + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int jj = 0; jj < BN / 16; ++jj) {
        // Keys jj*16 + lane % 16: b[0], b[2] are key tile 2jj's b0, b1; b[1], b[3] tile 2jj+1's.
        uint32_t b[4];
        ldmatrix_x4(b, k_s + (jj * 16 + lane % 16) * ld + kk * 16 + (lane / 16) * 8);
        mma_16816<T>(s[2 * jj], a, b[0], b[2]);
        mma_16816<T>(s[2 * jj + 1], a, b[1], b[3]);
      }
    }
  } else {
    const int g = lane / 4, t = lane % 4;
    const float* qa = q_s + (warp_row + g) * ld;
    const float* qb = qa + 8 * ld;
#pragma unroll 2
    for (int d = 0; d < dp; d += 4) {
      const float4 x = *reinterpret_cast<const float4*>(qa + d);
      const float4 y = *reinterpret_cast<const float4*>(qb + d);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const float4 k0 = *reinterpret_cast<const float4*>(k_s + (8 * j + 2 * t) * ld + d);
        const float4 k1 = *reinterpret_cast<const float4*>(k_s + (8 * j + 2 * t + 1) * ld + d);
        s[j][0] = fmaf(x.x, k0.x, fmaf(x.y, k0.y, fmaf(x.z, k0.z, fmaf(x.w, k0.w, s[j][0]))));
        s[j][1] = fmaf(x.x, k1.x, fmaf(x.y, k1.y, fmaf(x.z, k1.z, fmaf(x.w, k1.w, s[j][1]))));
        s[j][2] = fmaf(y.x, k0.x, fmaf(y.y, k0.y, fmaf(y.z, k0.z, fmaf(y.w, k0.w, s[j][2]))));
        s[j][3] = fmaf(y.x, k1.x, fmaf(y.y, k1.y, fmaf(y.z, k1.z, fmaf(y.w, k1.w, s[j][3]))));
      }
    }
  }
}

// o[n] (dims 8n..8n+7) += P V, P = the probabilities in s (same layout).
template <class T, int DMAX, int BN>
__device__ __forceinline__ void tile_accumulate(const float (&s)[BN / 8][4], const T* v_s, int ld,
                                                int dp, int lane, float* p_s,
                                                float (&o)[DMAX / 8][4]) {
  if constexpr (prefill_shape<T>::tensor_cores) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // Keys kk*16..+15: the C fragments of key tiles 2kk and 2kk+1 are P's A fragment.
      const uint32_t a[4] = {pack_pair<T>(s[2 * kk][0], s[2 * kk][1]),
                             pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nn = 0; nn < DMAX / 16; ++nn) {
        if (nn * 16 < dp) {
          // Keys kk*16 + lane % 16, dims nn*16 + 8 * (lane / 16), transposed:
          // b[0], b[1] are dim tile 2nn's b0, b1; b[2], b[3] dim tile 2nn+1's.
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_s + (kk * 16 + lane % 16) * ld + nn * 16 + (lane / 16) * 8);
          mma_16816<T>(o[2 * nn], a, b[0], b[1]);
          mma_16816<T>(o[2 * nn + 1], a, b[2], b[3]);
        }
      }
    }
  } else {
    constexpr int p_ld = prefill_shape<T>::p_ld;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      *reinterpret_cast<float2*>(p_s + g * p_ld + 8 * j + 2 * t) = make_float2(s[j][0], s[j][1]);
      *reinterpret_cast<float2*>(p_s + (g + 8) * p_ld + 8 * j + 2 * t) =
          make_float2(s[j][2], s[j][3]);
    }
    __syncwarp();
#pragma unroll 2
    for (int k = 0; k < BN; ++k) {
      const float pa = p_s[g * p_ld + k];
      const float pb = p_s[(g + 8) * p_ld + k];
      const float* v_row = reinterpret_cast<const float*>(v_s) + k * ld + 2 * t;
#pragma unroll
      for (int n = 0; n < DMAX / 8; ++n) {
        if (n * 8 < dp) {
          const float2 v = *reinterpret_cast<const float2*>(v_row + 8 * n);
          o[n][0] = fmaf(pa, v.x, o[n][0]);
          o[n][1] = fmaf(pa, v.y, o[n][1]);
          o[n][2] = fmaf(pb, v.x, o[n][2]);
          o[n][3] = fmaf(pb, v.y, o[n][3]);
        }
      }
    }
    __syncwarp();  // p_s is rewritten by the next tile
  }
}

// C: the cache's element type (T, or uint8_t: FP8 codes, widened into the
// tiles as T: exact, since every e4m3 value is a bf16/f16/f32 value).
template <class T, class C, int DMAX>
__global__ void __launch_bounds__(prefill_threads) prefill_kernel(params p, bool vec16) {
  pdl_begin();  // before any global memory access (launch.cuh)
  using shape = prefill_shape<T>;
  constexpr int BN = shape::tile_keys;
  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int q_begin = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_begin;
  if (q_len < 2) return;  // the decode kernel's sequence (or none)
  const int row0 = (gridDim.x - 1 - blockIdx.x) * prefill_rows;  // the longest tiles first
  if (row0 >= q_len) return;
  const int ctx = p.seq_lens[seq] - q_len;  // position of query row 0
  const int rows = min(prefill_rows, q_len - row0);
  const int key_limit = ctx + row0 + rows;  // keys [0, key_limit) are visible to the tile
  const int kv_head = head / p.group;
  const int dp = padded_head_dim(p.head_dim);
  const int ld = prefill_ld<T>(p.head_dim);

  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = q_s + prefill_rows * ld;
  T* v_s = k_s + BN * ld;
  float* p_all = reinterpret_cast<float*>(v_s + BN * ld);  // float32 only
  const int smem_vectors = static_cast<int>(prefill_smem_bytes<T>(p.head_dim) / 16);
  for (int i = threadIdx.x; i < smem_vectors; i += prefill_threads) {
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0u, 0u, 0u, 0u);  // padding columns
  }
  __syncthreads();

  const T* q_tile = static_cast<const T*>(p.q) +
                    static_cast<int64_t>(q_begin + row0) * p.q_row_stride +
                    static_cast<int64_t>(head) * p.head_dim;
  load_tile<T, DMAX>(q_s, ld, prefill_rows, rows, p.head_dim, vec16, p.q,
               [&](int r) { return q_tile + static_cast<int64_t>(r) * p.q_row_stride; });

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = warp * 16;                 // the warp's first row in the tile
  const int warp_pos = ctx + row0 + warp_row;     // and its position
  const bool warp_active = row0 + warp_row < q_len;
  float* p_s = p_all + warp * 16 * shape::p_ld;

  float o[DMAX / 8][4];
#pragma unroll
  for (int n = 0; n < DMAX / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, exp2 domain
  float l[2] = {0.0f, 0.0f};            // this lane's part of the rows' sums

  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const C* k_head = static_cast<const C*>(p.k_cache) + static_cast<int64_t>(kv_head) * p.head_dim;
  const C* v_head = static_cast<const C*>(p.v_cache) + static_cast<int64_t>(kv_head) * p.head_dim;
  const int num_tiles = ceil_div(key_limit, BN);
  for (int kt = 0; kt < num_tiles; ++kt) {
    const int key0 = kt * BN;
    const int valid_keys = min(BN, key_limit - key0);
    __syncthreads();  // every warp is done with the previous K/V tile
    auto k_row = [&](int r) {
      return k_head + static_cast<int64_t>(slot_of(p, table, key0 + r)) * p.kv_row_stride;
    };
    auto v_row = [&](int r) {
      return v_head + static_cast<int64_t>(slot_of(p, table, key0 + r)) * p.kv_row_stride;
    };
    if constexpr (std::is_same_v<C, T>) {
      load_tile<T, DMAX>(k_s, ld, BN, valid_keys, p.head_dim, vec16, p.k_cache, k_row);
      load_tile<T, DMAX>(v_s, ld, BN, valid_keys, p.head_dim, vec16, p.v_cache, v_row);
    } else {
      load_code_tiles<T, DMAX, BN>(k_s, v_s, ld, valid_keys, p.head_dim, k_row, v_row);
    }
    cp_async_wait_all();  // (the first tile's group holds Q's copies too)
    __syncthreads();
    // Warp-uniform: a warp past the query, or a tile past all its rows, skips.
    if (!warp_active || key0 > warp_pos + 15) continue;

    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    tile_scores<T, DMAX, BN>(q_s, k_s, ld, dp, warp_row, lane, s);
    const bool diagonal = key0 + BN - 1 > warp_pos;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] *= p.scale_log2;
        if (diagonal) {
          const int key = key0 + 8 * j + 2 * t + (e & 1);
          const int pos = warp_pos + g + 8 * (e >> 1);
          if (key > pos) s[j][e] = -INFINITY;
        }
      }
    }
    // Online softmax of rows g (r = 0) and g + 8 (r = 1); the 4 lanes of a
    // quad hold a row's columns.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(m[r], tile_max[r]);
      base[r] = new_max == -INFINITY ? 0.0f : new_max;  // a row with nothing visible yet
      const float correction = exp2f(m[r] - base[r]);
      m[r] = new_max;
      l[r] *= correction;
#pragma unroll
      for (int n = 0; n < DMAX / 8; ++n) {
        o[n][2 * r] *= correction;
        o[n][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - base[e >> 1]);
        l[e >> 1] += s[j][e];
      }
    }
    tile_accumulate<T, DMAX, BN>(s, v_s, ld, dp, lane, p_s, o);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (!warp_active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + warp_row + g + 8 * r;
    if (row >= q_len) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // (o * inv) * v_scale
    T* out = static_cast<T*>(p.out) + static_cast<int64_t>(q_begin + row) * p.q_row_stride +
             static_cast<int64_t>(head) * p.head_dim;
#pragma unroll
    for (int n = 0; n < DMAX / 8; ++n) {
      const int col = 8 * n + 2 * t;  // head_dim is even: col < head_dim covers col + 1
      if (col < p.head_dim) {
        out[col] = from_float<T>(o[n][2 * r] * inv * p.v_scale);
        out[col + 1] = from_float<T>(o[n][2 * r + 1] * inv * p.v_scale);
      }
    }
  }
}

}  // namespace troupe::cuda::attention
