// Device helpers of the MoE kernels (moe.cu, moe_gemm.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/element.cuh"
#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// f(T{}) with T the element type t names.
template <class F>
void with_element(element_type t, F&& f) {
  switch (t) {
    case element_type::f32: f(float{}); return;
    case element_type::bf16: f(__nv_bfloat16{}); return;
    case element_type::f16: f(__half{}); return;
  }
}

// 16 bytes read once (the streaming hint: not kept in L1).
template <class T>
__device__ __forceinline__ vec16<T> load16_stream(const T* p) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  return *reinterpret_cast<const vec16<T>*>(&u);
}

// silu(g) * u with g and u first rounded to T (the unfused model rounds the
// gate/up product's outputs), the result rounded to T.
template <class T>
__device__ __forceinline__ T silu_mul(float g, float u) {
  const float gr = to_float(from_float<T>(g)), ur = to_float(from_float<T>(u));
  return from_float<T>(gr / (1.0f + __expf(-gr)) * ur);
}

}  // namespace troupe::cuda
