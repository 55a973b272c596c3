// Device side of kv_dest (cache.h): one element of a step's key or value
// row stored into the cache, as the compute type or as an e4m3 code.
#pragma once

#include <cstdint>

#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/fp8_codes.cuh"

namespace troupe::cuda {

// Element `index` of the K (or V) cache = x (already of the compute type T).
template <class T>
__device__ __forceinline__ void store_kv(const kv_dest& c, bool is_v, int64_t index, T x) {
  void* base = is_v ? c.v : c.k;
  if (c.fp8) {
    static_cast<uint8_t*>(base)[index] = to_e4m3(to_float(x), is_v ? c.v_scale : c.k_scale);
  } else {
    static_cast<T*>(base)[index] = x;
  }
}

}  // namespace troupe::cuda
