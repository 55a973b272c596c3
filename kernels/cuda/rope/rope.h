// Rotary embedding (host API): rotate-half (NeoX) layout, in place on q
// [n, q_heads * head_dim] and k [n, k_heads * head_dim], with float32
// cos/sin tables [max_position, head_dim / 2] built on the host for the
// model's scaling rule. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

void rope(element_type t, void* q, int64_t q_heads, void* k, int64_t k_heads, int64_t head_dim,
          const int32_t* positions, int64_t num_tokens, const float* cos_table,
          const float* sin_table, cudaStream_t stream);

// The attention block's input side fused (ops::qkv_rope_cache): qkv [n,
// (q_heads + 2 kv_heads) * head_dim]; q and k heads get a per-head RMSNorm
// with q_norm / k_norm (each [head_dim], or null: none), rounded to the
// element type as a separate norm would store it, then RoPE; q heads go to
// q_out [n, q_heads * head_dim], k and v heads to the cache's [slots,
// kv_heads * head_dim] at slot_mapping[i] (-1: skipped; FP8 caches get the
// codes, cache.h). One warp per head.
// REQUIRES: head_dim even and <= 256.
void qkv_rope_cache(element_type t, const void* qkv, int64_t num_tokens, int64_t q_heads,
                    int64_t kv_heads, int64_t head_dim, const void* q_norm, const void* k_norm,
                    float eps, const int32_t* positions, const float* cos_table,
                    const float* sin_table, const int32_t* slot_mapping, void* q_out,
                    const kv_dest& cache, cudaStream_t stream);

}  // namespace troupe::cuda
