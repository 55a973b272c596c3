// Products with packed GPTQ / AWQ weights (model/quant_pack.h's layout:
// row o's 4- or 8-bit codes along its inputs, a float16 scale and a uint8
// zero per group, act-order's permutation of the inputs), and the
// conversions around them:
// - packed_mma (kernels/cuda/quant/qmma.cu): products of up to
//   packed_mma_rows rows of bf16/f16 x with 4-bit weights in the
//   tensor-core layout (model/quant_pack.h), on mma.sync m16n8k16;
// - packed_gemv: decode products of up to packed_gemv_rows rows with
//   weights in the row layout (8-bit, or shapes the tensor-core layout
//   does not take), reading each packed weight once (16-byte streaming
//   loads, codes turned into floats with bit operations, sums in float32);
// - packed_dequantize: the weight as t [rows, cols] in input order, for a
//   cuBLAS product of more rows (prefill);
// - packed_gather_cols: x's columns in the packed (act-order) order;
// - packed_fill_dummy: round-to-nearest codes of the dummy weights
//   (model/quant_pack.h rtn_quantize, bit for bit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

struct packed_weight_args {
  const uint32_t* words = nullptr;
  const uint16_t* scales = nullptr;  // float16 bits
  const uint8_t* zeros = nullptr;
  int bits = 4;
  int64_t group_size = 0, rows = 0, cols = 0;
  bool mma = false;  // the tensor-core layout
};

constexpr int packed_gemv_rows = 8;
constexpr int packed_mma_rows = 16;

// Whether packed_mma runs this product: bf16/f16, 1 <= m <=
// packed_mma_rows, w in the tensor-core layout, x 4-byte aligned.
bool packed_mma_supported(element_type t, int64_t m, const packed_weight_args& w, const void* x);
// out[i * ldo + o] = sum_j x[i, j] W[o, j] (x in the packed column order),
// out of type t: each group's codes less its zero summed by the tensor
// cores in float32, then times the group's scale in float32.
void packed_mma(element_type t, const void* x, int64_t m, const packed_weight_args& w, void* out, int64_t ldo,
                cudaStream_t stream);
// mma_words = w's words (row layout) in the tensor-core layout.
void packed_to_mma_layout(const packed_weight_args& w, uint32_t* mma_words, cudaStream_t stream);

// Whether packed_gemv runs this product: bf16/f16, 1 <= m <= packed_gemv_rows,
// cols a multiple of 32, the group size a multiple of 32, x 16-byte aligned.
bool packed_gemv_supported(element_type t, int64_t m, const packed_weight_args& w, const void* x);
// out[i * ldo + o] = sum_j x[i, j] W[o, j] (x in the packed column order), out of type t.
void packed_gemv(element_type t, const void* x, int64_t m, const packed_weight_args& w, void* out, int64_t ldo,
                 cudaStream_t stream);
// out [rows, cols] of type t: W[o, perm[j]] for packed column j (perm null:
// j), from either layout.
void packed_dequantize(element_type t, const packed_weight_args& w, const int32_t* perm, void* out,
                       cudaStream_t stream);
// out[i, j] = x[i, perm[j]], for m rows of cols columns.
void packed_gather_cols(element_type t, const void* x, int64_t m, int64_t cols, const int32_t* perm, void* out,
                        cudaStream_t stream);
// w's codes, scales and zeros: rtn_quantize of the dummy values of `key`
// (element i = row * cols + col), each rounded to t first.
void packed_fill_dummy(element_type t, const packed_weight_args& w, uint64_t key, float scale,
                       cudaStream_t stream);

}  // namespace troupe::cuda
