// RMSNorm kernels (host API). Rows of `cols` elements, row-major; compute in
// float32 whatever the element type; y = x / sqrt(mean(x^2) + eps) * w.
// All pointers are device memory; launches are asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// out = rms_norm(x) * w
void rms_norm(element_type t, const void* x, const void* w, float eps, int64_t rows, int64_t cols,
              void* out, cudaStream_t stream);

// residual += x; out = rms_norm(residual) * w (a block's fused pre-norm).
void add_rms_norm(element_type t, void* residual, const void* x, const void* w, float eps,
                  int64_t rows, int64_t cols, void* out, cudaStream_t stream);

// In place over every head_dim-wide segment of each row (Qwen3's q/k norm).
void head_rms_norm(element_type t, void* x, const void* w, float eps, int64_t rows,
                   int64_t cols, int64_t head_dim, cudaStream_t stream);

}  // namespace troupe::cuda
