// Which dims of a K and a V row each lane of decode_mma_kernel loads, and
// how its loads become the mma's 16-bit operand words, for caches of the
// compute type (16-bit) and FP8 caches (e4m3 codes). A dot product and P V
// do not care which physical dim each logical mma index stands for, as
// long as both operands agree (decode_mma.cuh), so every load is as wide
// as the layout allows.
//
// A "chunk" is 8 consecutive dims as four 16-bit pairs (a uint4): K chunk j
// (j < DMAX / 32) feeds k-steps 2j and 2j + 1, and q's A fragments come
// from the same dims (q_dim); V chunk h (h < DMAX / 64) feeds output tiles
// 8h .. 8h + 7, column n of tile 8h + j being dim out_dim(h, n, j). A
// "piece" is what one load brings.
#pragma once

#include <cstdint>

#include "kernels/cuda/fp8_codes.cuh"

namespace troupe::cuda::attention {

// 16 bytes at byte `offset` of a row, or zeros.
__device__ __forceinline__ uint4 load_row_chunk(const char* row, int offset, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(row + offset)) : make_uint4(0u, 0u, 0u, 0u);
}

// 8 codes as an mma chunk: float16 pairs (every e4m3 value is a float16).
__device__ __forceinline__ uint4 widen_codes(uint32_t lo, uint32_t hi) {
  uint4 r;
  e4m3x4_to_f16x4(lo, r.x, r.y);
  e4m3x4_to_f16x4(hi, r.z, r.w);
  return r;
}

// 16-bit caches: one 16-byte piece a chunk. K chunk j: dims 32j + 8t; V
// chunk h: dims 64h + 8g; column n of tile 8h + j: dim 64h + 8n + j.
template <class C, int DMAX>
struct mma_kv_layout {
  using k_piece = uint4;
  using v_piece = uint4;
  static constexpr int k_pieces = DMAX / 32;
  static constexpr int v_pieces = DMAX / 64;
  __device__ static int k_dim(int piece, int t) { return 32 * piece + 8 * t; }
  __device__ static int q_dim(int j, int t) { return 32 * j + 8 * t; }
  __device__ static int v_dim(int piece, int g) { return 64 * piece + 8 * g; }
  __device__ static int out_dim(int h, int n, int j) { return 64 * h + 8 * n + j; }
  __device__ static k_piece load_k(const char* row, int dim, int head_dim) {
    return load_row_chunk(row, dim * 2, dim < head_dim);
  }
  __device__ static v_piece load_v(const char* row, int dim, int head_dim) {
    return load_row_chunk(row, dim * 2, dim < head_dim);
  }
  __device__ static uint4 k_chunk(const k_piece (&k)[k_pieces], int j) { return k[j]; }
  __device__ static uint4 v_chunk(const v_piece (&v)[v_pieces], int h) { return v[h]; }
};

// 16 codes at dim `dim` of a row of head_dim codes: the 8 past head_dim
// (head_dim % 16 == 8) and everything past the row load as zeros.
__device__ __forceinline__ uint4 load_codes16(const char* row, int dim, int head_dim) {
  if (dim + 16 <= head_dim) return __ldg(reinterpret_cast<const uint4*>(row + dim));
  if (dim < head_dim) {
    const uint2 half = __ldg(reinterpret_cast<const uint2*>(row + dim));
    return make_uint4(half.x, half.y, 0u, 0u);
  }
  return make_uint4(0u, 0u, 0u, 0u);
}

// FP8 caches: 16 codes a K piece, two chunks: K piece L holds dims 64L +
// 16t .. + 16, chunk 2L its first 8, chunk 2L + 1 the rest (q_dim of chunk
// j: 64 (j / 2) + 16t + 8 (j % 2)). V: head_dim up to 128 in one 16-code
// piece a key at dims 16g (chunk h: dims 16g + 8h; column n of tile 8h + j:
// dim 16n + 8h + j); up to 64 in one 8-code piece at dims 8g (as the
// 16-bit layout). So a lane's loads of a 16-key step are half of a 16-bit
// step's bytes in as many 16-byte loads (up to 64: in 8-byte ones).
template <int DMAX>
struct mma_kv_layout<uint8_t, DMAX> {
  static constexpr bool wide_v = DMAX == 128;
  using k_piece = uint4;
  using v_piece = std::conditional_t<wide_v, uint4, uint2>;
  static constexpr int k_pieces = DMAX / 64;
  static constexpr int v_pieces = 1;
  __device__ static int k_dim(int piece, int t) { return 64 * piece + 16 * t; }
  __device__ static int q_dim(int j, int t) { return 64 * (j / 2) + 16 * t + 8 * (j % 2); }
  __device__ static int v_dim(int, int g) { return wide_v ? 16 * g : 8 * g; }
  __device__ static int out_dim(int h, int n, int j) { return wide_v ? 16 * n + 8 * h + j : 8 * n + j; }
  __device__ static k_piece load_k(const char* row, int dim, int head_dim) { return load_codes16(row, dim, head_dim); }
  __device__ static v_piece load_v(const char* row, int dim, int head_dim) {
    if constexpr (wide_v) {
      return load_codes16(row, dim, head_dim);
    } else {
      return dim < head_dim ? __ldg(reinterpret_cast<const uint2*>(row + dim)) : make_uint2(0u, 0u);
    }
  }
  __device__ static uint4 k_chunk(const k_piece (&k)[k_pieces], int j) {
    const uint4& piece = k[j / 2];
    return j % 2 == 0 ? widen_codes(piece.x, piece.y) : widen_codes(piece.z, piece.w);
  }
  __device__ static uint4 v_chunk(const v_piece (&v)[v_pieces], int h) {
    if constexpr (wide_v) {
      return h == 0 ? widen_codes(v[0].x, v[0].y) : widen_codes(v[0].z, v[0].w);
    } else {
      return widen_codes(v[0].x, v[0].y);
    }
  }
};

}  // namespace troupe::cuda::attention
