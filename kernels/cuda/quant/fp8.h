// FP8 (e4m3) W8A8 products (model/fp8_linear.h is their CPU reference):
// activations quantized per token (and per 128 inputs for block-FP8
// weights), then either the mma kernel here (float8 mma.sync, for a few
// tokens: decode) or cuBLASLt's block-scaled FP8 GEMM (kernels/cuda/
// cuda_fp8.cpp). Host header: device pointers, sizes, a stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

// A [rows, cols] FP8 weight: codes row-major; float32 scales, one a block
// of block_out x block_in weights, [ceil(rows / block_out), scale_stride]
// (block_in == cols: one a row).
struct fp8_weight_args {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t block_out = 1, block_in = 0, scale_stride = 1;
};

// Whether the kernels here take the weight: cols a multiple of 128, rows
// of 16, block_in 128 or cols, block_out dividing 16 or a multiple of 16.
bool fp8_supported(const fp8_weight_args& w);

// x [rows, cols] of `t` to codes [rows, cols] and scales group-major,
// [groups][rows] (groups = cols / group: cuBLASLt's VEC128 layout; the
// values are model/fp8_linear.h's fp8_quantize_activations', bit for bit);
// group is 128 or cols; cols a multiple of 8 (of 128 for groups of 128);
// x 16-byte aligned rows.
void fp8_quantize_activations(element_type t, const void* x, int64_t rows, int64_t cols, int64_t group,
                              uint8_t* codes, float* scales, cudaStream_t stream);

// out [m, w.rows] (row stride ldo, of `t`) = the W8A8 product of quantized
// activations (xq [m, w.cols], xs [groups][m] as above with group =
// w.block_in) and w, on float8 mma.sync m16n8k32 with float32 sums (a
// token's outputs do not depend on the other tokens). Any m; the weight is
// read once for up to 16 tokens.
void fp8_mma(element_type t, const uint8_t* xq, const float* xs, int64_t m, const fp8_weight_args& w, void* out,
             int64_t ldo, cudaStream_t stream);

// Dummy FP8 weights: the dummy values of `key` (element.cuh's dummy_value
// times scale, rounded to `t` as the float dummies are), quantized per
// block as fp8_quantize_blocks does (w's codes and scales written).
void fp8_fill_dummy(element_type t, const fp8_weight_args& w, uint64_t key, float scale, cudaStream_t stream);

}  // namespace troupe::cuda
