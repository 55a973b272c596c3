// Multi-LoRA kernels (host API), Punica's BGMV in two launches: shrink
// (u = x A_s^T, u in float32) and expand (out[:, col0 ..] += u B_s^T), where
// s is each token's adapter slot (-1: no adapter, the token's output is left
// alone). x, a, b and out share one element type; sums in float32, out is
// rounded once. All pointers are device memory; launches are asynchronous
// on `stream`, allocate nothing and never wait for the host (CUDA-graph
// capturable; PDL launches, kernels/cuda/launch.cuh).
//
// Layouts (row-major, see ops::lora_add): x [n, in]; a [slots * rank, in]
// (slot s: rows s * rank ..); b [slots * out_cols, rank] (slot s: rows
// s * out_cols ..); u [n rows of u_stride floats]; out rows of out_stride
// elements, of which columns col0 .. col0 + out_cols - 1 are written.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// The largest rank the kernels take (expand keeps u of up to 8 tokens in
// shared memory: 8 * rank floats).
constexpr int64_t lora_max_rank = 1024;

// For each token t < n with 0 <= s = token_slots[t] < slots:
//   u[t * u_stride + r] = sum_k a[(s * rank + r) * in + k] x[t * in + k]   (r < rank)
// Other tokens' u rows are not written (slots >= `slots` count as -1).
// REQUIRES: 1 <= rank <= lora_max_rank, u_stride >= rank.
void lora_shrink(element_type t, const void* x, int64_t n, int64_t in, const void* a,
                 int64_t slots, int64_t rank, const int32_t* token_slots, float* u,
                 int64_t u_stride, cudaStream_t stream);

// For each token t < n with 0 <= s = token_slots[t] < slots, j < out_cols:
//   out[t * out_stride + col0 + j] += sum_r b[(s * out_cols + j) * rank + r] u[t * u_stride + r]
// (the sum in float32, then added to out's value in float32, rounded once).
// Other tokens' rows and other columns are not touched.
// REQUIRES: 1 <= rank <= lora_max_rank, col0 + out_cols <= out_stride.
void lora_expand(element_type t, const float* u, int64_t u_stride, int64_t n, const void* b,
                 int64_t slots, int64_t rank, int64_t out_cols, const int32_t* token_slots,
                 void* out, int64_t out_stride, int64_t col0, cudaStream_t stream);

// lora_shrink, then lora_expand (u is scratch: n rows of u_stride floats).
void lora_add(element_type t, const void* x, int64_t n, int64_t in, const void* a,
              const void* b, int64_t slots, int64_t rank, int64_t out_cols,
              const int32_t* token_slots, float* u, int64_t u_stride, void* out,
              int64_t out_stride, int64_t col0, cudaStream_t stream);

}  // namespace troupe::cuda
