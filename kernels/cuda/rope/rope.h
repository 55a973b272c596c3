// Rotary embedding (host API): rotate-half (NeoX) layout, in place on q
// [n, q_heads * head_dim] and k [n, k_heads * head_dim], with float32
// cos/sin tables [max_position, head_dim / 2] built on the host for the
// model's scaling rule. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

void rope(element_type t, void* q, int64_t q_heads, void* k, int64_t k_heads, int64_t head_dim,
          const int32_t* positions, int64_t num_tokens, const float* cos_table,
          const float* sin_table, cudaStream_t stream);

}  // namespace troupe::cuda
