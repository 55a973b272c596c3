// Paged KV cache kernels (host API). A layer's cache is K and V, each
// [num_slots, kv_cols] with slot = block * block_size + offset. Device
// pointers unless noted; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// Where a step's keys and values are written (a layer's kv_cache_layer,
// kernels/ops.h): rows of the compute type, or (fp8, kv_cache_dtype fp8)
// float8 e4m3 codes of value / scale, the value first rounded to the
// compute type (as a cache of that type would hold it), then to the code
// (kv_codes.cuh). Device pointers.
struct kv_dest {
  void* k = nullptr;
  void* v = nullptr;
  bool fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// cache.k[slot_mapping[i]] = k[i] (and v); slot -1 is skipped (padding).
void write_kv_cache(element_type t, const void* k, const void* v, const int32_t* slot_mapping,
                    int64_t num_tokens, int64_t kv_cols, const kv_dest& cache,
                    cudaStream_t stream);

// dst[rows[i]] = src[src_index[i]] for i < n (the async scheduler's
// placeholder tokens: a step's input ids from the previous step's samples).
void gather_tokens(int32_t* dst, const int32_t* rows, const int32_t* src_index, const int32_t* src,
                   int64_t n, cudaStream_t stream);
// out[i] = x[indices[i]] for rows of `cols` elements.
void gather_rows(element_type t, const void* x, const int32_t* indices, int64_t n, int64_t cols,
                 void* out, cudaStream_t stream);

// Copies whole blocks (K and V) between two caches, device or pinned host
// memory on either side: block src_blocks[i] -> dst_blocks[i]. The index
// arrays are host memory. For swapping and copy-on-write. element_bytes:
// the caches' (1 for FP8 codes).
void copy_kv_blocks(size_t element_bytes, const void* src_k, const void* src_v, void* dst_k,
                    void* dst_v, const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                    int64_t block_size, int64_t kv_cols, cudaStream_t stream);

}  // namespace troupe::cuda
