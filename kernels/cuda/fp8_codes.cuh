// float8 e4m3 codes on the device, shared by the FP8 weight kernels
// (quant/fp8.cu) and the FP8 KV cache (its writers and the attention
// kernels that read it). Every e4m3 value is exactly a float16 (and a
// bfloat16 and a float32): decoding never rounds.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace troupe::cuda {

// The code of v / scale, the quotient correctly rounded: nearest, ties to
// even, saturated at +-448 (infinities too), NaN to 0x7f; bit for bit
// model/quantization.cpp's f32_to_e4m3(v / scale).
__device__ __forceinline__ uint8_t to_e4m3(float v, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3));
}

// Two codes (the low byte the first) as a float16 pair (the first in the
// low half): one cvt on sm_89 and later.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Four codes in a word as float16 pairs: lo holds bytes 0, 1; hi bytes 2, 3.
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t codes, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_to_f16x2(codes & 0xffffu);
  hi = e4m3x2_to_f16x2(codes >> 16);
}

// Four codes in a word as floats, byte 0 first.
__device__ __forceinline__ void e4m3x4_to_float(uint32_t codes, float* f) {
  uint32_t lo, hi;
  e4m3x4_to_f16x4(codes, lo, hi);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

}  // namespace troupe::cuda
