// Device helpers shared by the paged-attention kernels: block-table lookups
// and raw vector loads of K/V/q rows converted to float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/fp8_codes.cuh"

namespace troupe::cuda::attention {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Slot of `key` (a position in its sequence) through the sequence's block
// table row: block_id * block_size + offset (a slot index fits 32 bits; the
// element offset slot * kv_row_stride may not).
__device__ __forceinline__ int slot_of(const params& p, const int32_t* table, int key) {
  int block, offset;
  if (p.block_shift >= 0) {
    block = key >> p.block_shift;
    offset = key & (p.block_size - 1);
  } else {
    block = key / p.block_size;
    offset = key - block * p.block_size;
  }
  return __ldg(table + block) * p.block_size + offset;
}

// N 32-bit words loaded with one instruction (N = 4: 16 bytes).
template <int N>
struct words {
  uint32_t w[N];
};

// The inputs of attention are written by earlier kernels, never by the
// attention kernels themselves: the read-only (non-coherent) path is safe.
__device__ __forceinline__ void load_words(const void* ptr, words<4>& r) {
  const uint4 v = __ldg(static_cast<const uint4*>(ptr));
  r.w[0] = v.x;
  r.w[1] = v.y;
  r.w[2] = v.z;
  r.w[3] = v.w;
}
__device__ __forceinline__ void load_words(const void* ptr, words<2>& r) {
  const uint2 v = __ldg(static_cast<const uint2*>(ptr));
  r.w[0] = v.x;
  r.w[1] = v.y;
}
__device__ __forceinline__ void load_words(const void* ptr, words<1>& r) {
  r.w[0] = __ldg(static_cast<const unsigned int*>(ptr));
}

template <int N>
__device__ __forceinline__ void zero_words(words<N>& r) {
#pragma unroll
  for (int i = 0; i < N; ++i) r.w[i] = 0u;
}

// The elements held by N words, as floats: f[0 .. N * 4 / sizeof(T)).
// Little-endian: the element at the lower address is in the low half.
// T = uint8_t: float8 e4m3 codes (an FP8 KV cache), four a word.
template <class T, int N>
__device__ __forceinline__ void unpack(const words<N>& r, float* f) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t w = r.w[i];
    if constexpr (std::is_same_v<T, uint8_t>) {
      e4m3x4_to_float(w, f + 4 * i);
    } else if constexpr (std::is_same_v<T, float>) {
      f[i] = __uint_as_float(w);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(w << 16);
      f[2 * i + 1] = __uint_as_float(w & 0xffff0000u);
    } else {
      f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
      f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
    }
  }
}

}  // namespace troupe::cuda::attention
