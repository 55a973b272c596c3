// Quantized checkpoints (docs/quantization.md): config.json's
// quantization_config read and checked, and the exact dequantization of
// each format's packed tensors to float32, the CPU reference every kernel is
// held to (formats as ../shared/fixtures/QUANT_MOE.md describes them):
//
//   GPTQ (AutoGPTQ / GPTQModel, checkpoint_format gptq = v1 or gptq_v2):
//     qweight int32 [in * bits / 32, out], packed along the input: input
//       i = r * (32 / bits) + j sits at bits [bits * j, bits * (j + 1)) of
//       row r;
//     qzeros int32 [groups, out * bits / 32], packed along the output the
//       same way; v1 stores zero - 1;
//     scales float16 [groups, out]; g_idx int32 [in] (input i's group;
//       absent: i / group_size; act-order checkpoints permute it);
//     W[o, i] = (q[i, o] - zero[g_idx[i], o]) * scales[g_idx[i], o].
//   AWQ (AutoAWQ, version gemm, zero_point): qweight int32 [in, out / 8],
//     packed along the output: column c of word k = c / 8 at nibble
//     [0, 4, 1, 5, 2, 6, 3, 7][c % 8]; qzeros [groups, out / 8] the same
//     (zero stored as is); scales [groups, out];
//     W[o, i] = (q[i, o] - z[i / group_size, o]) * s[i / group_size, o].
//   Block FP8 (Qwen3-*-FP8, DeepSeek-V3): weight float8_e4m3fn [out, in],
//     weight_scale_inv float32 [ceil(out / b0), ceil(in / b1)];
//     W[o, i] = e4m3(weight[o, i]) * scale_inv[o / b0, i / b1].
//
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace troupe {

// (AWQ's modules_to_not_convert need no key here: those modules are stored
// as float tensors and read as such; GPTQ's sym is in its zeros.)
struct quant_config {
  enum class method { none, gptq, awq, fp8 };
  method kind = method::none;
  int bits = 0;
  int64_t group_size = -1;  // -1: one group over the whole input
  bool desc_act = false;    // GPTQ act-order: g_idx is required (it is permuted)
  bool zeros_minus_one = true;  // GPTQ v1 (checkpoint_format gptq)
  // FP8: weight_block_size (block_in -1: the whole input, one scale an
  // output row); `online`: a float checkpoint quantized at load
  // (`quantization: fp8`, one scale a row: block 1 x -1).
  int64_t block_out = 128, block_in = 128;
  bool online = false;
  // GPTQ or AWQ: integer codes with per-group scales and zeros (packable,
  // model/quant_pack.h).
  bool integer_codes() const { return kind == method::gptq || kind == method::awq; }
  // FP8: the block's inputs for a linear of `cols` inputs (also the
  // activations' quantization group).
  int64_t fp8_block_in(int64_t cols) const { return block_in > 0 ? block_in : cols; }
};

const char* quant_method_name(quant_config::method m);

// config.json's quantization_config (JSON text of the object), or an
// AutoGPTQ quantize_config.json (default_method "gptq": it may not name
// one). Errors name the file, the key and what is supported
// ("config.json: 'quantization_config.bits': 3 is not supported (GPTQ: 4
// or 8)").
result<quant_config> parse_quant_config(const std::string& json_text, const std::string& source,
                                        const std::string& default_method = "");

// The quantization a model runs with, from the `quantization` config key
// (vLLM's names) and the checkpoint's quantization_config: "" keeps the
// checkpoint's; gptq / gptq_marlin and awq / awq_marlin (troupe has one
// family of packed kernels for each: the names choose nothing more) need
// a checkpoint of that method, or `dummy` weights on a float config, which
// then become 4-bit, group-128 GPTQ (symmetric) or AWQ dummy weights;
// fp8 keeps a block-FP8 checkpoint's, and quantizes a float checkpoint
// (or dummy weights) at load, one scale an output row (`online`). Errors
// name the key, the value and what would work.
result<quant_config> resolve_quantization(const std::string& requested, const quant_config& checkpoint,
                                          bool dummy);

float e4m3_to_f32(uint8_t v);
// The float8 e4m3fn code nearest v (ties to even), saturated to +-448 (as
// vLLM's FP8 KV cache writes; NaN gives 0x7F): the FP8 KV cache's encoding.
uint8_t f32_to_e4m3(float v);

// W [out, in] row-major from the packed tensors (shapes as above, checked
// by the caller). scales / scale_inv already float32.
void gptq_dequantize(const int32_t* qweight, const int32_t* qzeros, const float* scales,
                     const int32_t* g_idx, int64_t in, int64_t out, int bits, bool zeros_minus_one,
                     float* w);
void awq_dequantize(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in,
                    int64_t out, int64_t group_size, float* w);
void fp8_block_dequantize(const uint8_t* q, const float* scale_inv, int64_t out, int64_t in,
                          int64_t block_out, int64_t block_in, float* w);

}  // namespace troupe
