// Activation kernels (host API). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// gate_up is [rows, 2 * d]: out[i, j] = silu(gate_up[i, j]) * gate_up[i, d + j].
void silu_and_mul(element_type t, const void* gate_up, int64_t rows, int64_t d, void* out,
                  cudaStream_t stream);

// out[i, j] += sigmoid(gate[i * gate_stride]) * x[i, j] (rows of `cols`;
// x, gate and out of one type; Qwen2-MoE's shared expert, ops::add_sigmoid_gated).
void add_sigmoid_gated(element_type t, const void* x, const void* gate, int64_t gate_stride,
                       int64_t rows, int64_t cols, void* out, cudaStream_t stream);

// out[i, :] = table[ids[i] - first_row, :] (rows of `cols` elements) where
// that is one of the table's `rows` rows, else zeros (ops::embedding).
void embedding(element_type t, const int32_t* ids, int64_t num_tokens, const void* table,
               int64_t first_row, int64_t rows, int64_t cols, void* out, cudaStream_t stream);

}  // namespace troupe::cuda

namespace troupe::cuda {

// out[i, j] += bias[j] (rows of `cols`; out and bias of the same type).
void add_bias(element_type t, void* out, const void* bias, int64_t rows, int64_t cols,
              cudaStream_t stream);

// out[i] = model/weights.h's dummy value i of `key` (bit for bit the host's
// fill_dummy_f32), converted to t; n elements.
void fill_dummy(element_type t, void* out, int64_t n, uint64_t key, float scale, float offset,
                cudaStream_t stream);

}  // namespace troupe::cuda
