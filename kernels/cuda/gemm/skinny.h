// Skinny products on tensor cores for decode batches of up to 64 rows:
// out[m, n] = sum_k x[m, k] w[n, k], bf16 or f16 x and w (row-major, K
// contiguous), float32 accumulation (mma.sync m16n8k16), output in the
// weights' type or float32. At 16-64 rows these products are still bound
// by the weights' bytes, and cuBLAS tiles them into too few blocks to keep
// the memory busy (a 4096 x 4096 product at 64 rows: 69% of the copy rate
// on an H100). Here a block takes 64 or 128 weight rows and a slice of K,
// so that a product spreads over two to four blocks per SM (split-K); the
// last block of a tile to finish adds the others' partial sums in split
// order (deterministic) and stores the result. Weights stream into
// registers with 16-byte loads, double buffered, the first ones before the
// PDL wait. cuda_ops times the variants against cuBLAS per shape at
// start-up and keeps the fastest (docs/gpu.md, "Decode GEMV").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

constexpr int skinny_max_rows = 64;

// Variants 0 .. skinny_num_variants() - 1.
int skinny_num_variants();
const char* skinny_variant_name(int variant);

// Whether skinny() can run this product: bf16/f16, 1 <= m <= 64, k a
// multiple of 8, x and w 16-byte aligned.
bool skinny_supported(element_type t, int64_t m, int64_t k, const void* x, const void* w);

// Scratch for split-K: `workspace` (float32 partial sums) and `counters`
// (one int per tile of output columns, all zero before the first call; the
// kernel leaves them zero). A product whose splits need more than the
// workspace or counters given runs with fewer splits (one needs none).
struct skinny_scratch {
  float* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* counters = nullptr;
  int64_t num_counters = 0;
};

// out row i starts at out + i * n (elements of t, or float32 when out_f32).
// REQUIRES: skinny_supported(t, m, k, x, w). Asynchronous on `stream`;
// calls on one stream may share `scratch` (each finishes its reduction
// before the next one's blocks touch it).
void skinny(element_type t, bool out_f32, int variant, const void* x, int64_t m, const void* w,
            int64_t n, int64_t k, void* out, const skinny_scratch& scratch, cudaStream_t stream);

// The split count skinny() uses for this product and scratch (tests).
int skinny_splits(int variant, int64_t m, int64_t n, int64_t k, const skinny_scratch& scratch);

}  // namespace troupe::cuda
