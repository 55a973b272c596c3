// Device-side element types and conversions shared by the CUDA kernels:
// every kernel loads its inputs as float, computes in float, and stores in
// the tensor's own type (float32, bfloat16 or float16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Sum over a block of up to 1024 threads (every thread gets the result).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // partial[] is reused by the next call
  return v;
}

// The rotary pair (x1, x2) turned by (c, s): (x1 c - x2 s, x2 c + x1 s),
// each rounding spelled out (no contraction left to the compiler), so that
// every kernel that rotates (qkv_rope_cache, rope, the q/k/v product's
// epilogue) gets the same bits.
__device__ __forceinline__ float2 rotate_pair(float x1, float x2, float c, float s) {
  return make_float2(__fmaf_rn(x1, c, -__fmul_rn(x2, s)), __fmaf_rn(x2, c, __fmul_rn(x1, s)));
}

// 16 bytes of elements (8 bf16/f16, 4 float32) as one aligned load/store.
template <class T>
struct alignas(16) vec16 {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
};

template <class T>
__device__ __forceinline__ vec16<T> load16(const T* p) {
  return *reinterpret_cast<const vec16<T>*>(p);
}

template <class T>
__device__ __forceinline__ void store16(T* p, const vec16<T>& x) {
  *reinterpret_cast<vec16<T>*>(p) = x;
}

// Calls f with a value of t's device type (float, __nv_bfloat16 or
// __half): the launchers' dispatch on the element type.
template <class F>
void by_element_type(element_type t, F&& f) {
  switch (t) {
    case element_type::f32: return f(float{});
    case element_type::bf16: return f(__nv_bfloat16{});
    case element_type::f16: return f(__half{});
  }
}

// A float16 held as its bits.
__device__ __forceinline__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// 8 bf16/f16 elements of 16 bytes as floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]);
template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack8<__half>(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Element i of the dummy weights of `key` (model/weights.h
// fill_dummy_f32), as float32 before any offset: the host's formula with
// every float operation rounded on its own (no contraction into FMAs), so
// the values match bit for bit.
__device__ __forceinline__ float dummy_value(uint64_t key, int64_t i, float scale) {
  const uint64_t bits = splitmix64(key + uint64_t(i) * 0xD1B54A32D192ED03ull);
  const float u = __fdiv_rn(float(bits >> 40), float((1u << 24) - 1));
  return __fmul_rn(__fsub_rn(__fmul_rn(2.0f, u), 1.0f), scale);
}

}  // namespace troupe::cuda
