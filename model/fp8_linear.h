// FP8 linears (docs/quantization.md "FP8"): float8 e4m3fn weight codes
// with one float32 scale a block of block_out x block_in weights, times
// activations quantized on the fly (W8A8, as vLLM's fp8 method and
// DeepSeek-V3's block FP8):
//
//   a block-FP8 checkpoint (quant_method fp8, weight_block_size [128,
//   128]): the checkpoint's codes and weight_scale_inv, activations
//   quantized per token per 128 inputs;
//   `quantization: fp8` on a float checkpoint (online): each output row
//   quantized at load with a scale of its own (block 1 x in),
//   activations quantized per token.
//
// The functions here are the CPU reference the CUDA kernels
// (kernels/cuda/quant/fp8.h) are held to, and the load-time quantizer.
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/quantization.h"

namespace troupe {

// An FP8 linear's codes [rows, cols] and scales [ceil(rows / block_out),
// ceil(cols / block_in)], row-major.
struct fp8_codes {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

// The float8 e4m3fn range (codes saturate there).
inline constexpr float fp8_e4m3_max = 448.0f;

// The scale of a block whose largest magnitude is `amax`: amax / 448, or
// 1 where the block is all zeros (its codes are then 0 whatever it is).
inline float fp8_scale_of(float amax) { return amax > 0.0f ? amax / fp8_e4m3_max : 1.0f; }

// W [rows, cols] to codes [rows, cols] and scales [ceil(rows / block_out),
// ceil(cols / block_in)] (row-major): per block, scale = fp8_scale_of(its
// amax), code = f32_to_e4m3(w / scale), the division correctly rounded.
void fp8_quantize_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_out, int64_t block_in,
                         uint8_t* codes, float* scales);

// X [rows, cols] to codes [rows, cols] and scales [rows, ceil(cols /
// group)]: each row's groups of `group` inputs (the last may be short)
// quantized as fp8_quantize_blocks' blocks of 1 x group.
void fp8_quantize_activations(const float* x, int64_t rows, int64_t cols, int64_t group, uint8_t* codes,
                              float* scales);

// out [rows, n] = the W8A8 product of quantized activations (xq, xs as
// fp8_quantize_activations with group = block_in) and weights (wq [n, k],
// ws as fp8_quantize_blocks): for each group g of block_in inputs,
// xs[r][g] * ws[o / block_out][g] * sum over i in g of e4m3(xq[r][i]) *
// e4m3(wq[o][i]), the sums in double.
void fp8_w8a8_linear(const uint8_t* xq, const float* xs, int64_t rows, const uint8_t* wq, const float* ws,
                     int64_t n, int64_t k, int64_t block_out, int64_t block_in, float* out);

// Whether online FP8 (`quantization: fp8` on a float checkpoint) quantizes
// the tensor `name`: the weights of the attention and MLP projections
// (q/k/v/o_proj, gate/up/down_proj, and the experts' w1/w2/w3), as a
// block-FP8 checkpoint stores them; not the embeddings, norms, LM head or
// routers.
bool fp8_quantizes(const std::string& name);

// The stride of a packed FP8 weight's rows of scales (kernels/ops.h
// packed_parts): one scale a row (block 1 x cols) as they are; blocks'
// scales rows padded to 4 (16 bytes, cuBLASLt's block-scale layout).
inline int64_t fp8_scale_stride(const quant_config& q, int64_t cols) {
  const int64_t block_in = q.fp8_block_in(cols), blocks = (cols + block_in - 1) / block_in;
  return q.block_out == 1 && blocks == 1 ? 1 : (blocks + 3) / 4 * 4;
}

// An FP8 linear's scales ([blocks_out, blocks_in], row-major) with each
// row at `stride` (fp8_scale_stride; the padding 0): how the packed
// weights hold them.
std::vector<float> fp8_padded_scales(const std::vector<float>& scales, int64_t blocks_out, int64_t blocks_in,
                                     int64_t stride);

// W [rows, cols] replaced by its dequantized FP8 quantization with q's
// blocks (online FP8's weights on a backend that computes in floats).
void fp8_round_trip(float* w, int64_t rows, int64_t cols, const quant_config& q);

}  // namespace troupe
