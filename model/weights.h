// Checkpoint weights: safetensors files, memory-mapped, single-file or
// sharded (model.safetensors.index.json), dtypes F32 / BF16 / F16 (and
// I32 / F8_E4M3 for quantized checkpoints); and
// `load_format: dummy` weights generated from a seed.
//
// checkpoint owns the mappings; tensor_info::data points into them and stays
// valid while the checkpoint lives. Not thread-safe for concurrent open, but
// reads (read_f32) of distinct tensors may run concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/fp8_linear.h"
#include "model/quant_pack.h"
#include "model/quantization.h"

namespace troupe {

// The element types of tensors. fp8_e4m3 is the FP8 KV cache's storage
// only (kv_cache_dtype: fp8; codes of f32_to_e4m3 times the layer's scale),
// never a compute type.
enum class dtype { f32, bf16, f16, fp8_e4m3 };

const char* dtype_name(dtype t);
size_t dtype_size(dtype t);

// How a checkpoint tensor is stored: the float types models compute in,
// and the words of quantized checkpoints (int32 packs, float8 e4m3;
// model/quantization.h).
enum class stored_type { f32, bf16, f16, i32, f8_e4m3 };
const char* stored_type_name(stored_type t);  // safetensors' name: "F32", "I32", "F8_E4M3", ...
size_t stored_type_size(stored_type t);
bool is_float_type(stored_type t);  // f32, bf16, f16

struct tensor_info {
  std::string name;
  stored_type type = stored_type::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the mapped file
  size_t nbytes = 0;
  std::string file;  // file name (not full path) the tensor lives in
};

// One mapped .safetensors file.
class safetensors_file {
 public:
  // Errors name the file: unreadable, header length past the end, header not
  // JSON, an unsupported dtype (naming the tensor), offsets outside the data
  // section or not matching shape x dtype size.
  static result<std::shared_ptr<safetensors_file>> open(const std::filesystem::path& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::map<std::string, tensor_info>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  safetensors_file() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, tensor_info> tensors_;
};

// All safetensors of a model folder: DIR/model.safetensors, or the shards
// listed in DIR/model.safetensors.index.json ("weight_map").
class checkpoint {
 public:
  // Errors: folder missing, no safetensors found, index malformed or naming a
  // missing shard, any file's own error.
  static result<checkpoint> open(const std::filesystem::path& dir);

  const tensor_info* find(const std::string& name) const;
  std::vector<std::string> names() const;

  // Converts tensor `name` to float32 into out (shape product elements),
  // after checking it exists and has exactly `shape`. Errors name the tensor
  // and its file: "missing tensor 'model.norm.weight' (looked in model.safetensors)",
  // "tensor 'x' in model.safetensors has shape [4, 8], expected [8, 8]".
  // With a quantization set, a quantized linear's "P.weight" (GPTQ / AWQ:
  // P.qweight, P.qzeros, P.scales, P.g_idx; FP8: P.weight in e4m3 and
  // P.weight_scale_inv) is dequantized exactly (model/quantization.h), its
  // packed tensors checked against `shape` ([out, in]) the same way.
  status read_f32(const std::string& name, const std::vector<int64_t>& shape,
                  float* out) const;

  // The model's quantization_config (model_config::quantization).
  void set_quantization(const quant_config& q) { quant_ = q; }

  // A GPTQ / AWQ linear `name` ("P.weight", or its prefix "P") of [out,
  // in] in the packed layout (model/quant_pack.h), its tensors checked as
  // read_f32 checks them. REQUIRES: a GPTQ or AWQ quantization set.
  result<packed_linear> read_packed_linear(const std::string& name, int64_t out, int64_t in) const;
  // An FP8 linear `name` ("P.weight") of [out, in]: a block-FP8
  // checkpoint's codes and weight_scale_inv (checked as read_f32 checks
  // them), or, with online FP8, the float tensor quantized one scale a row
  // (fp8_quantize_blocks). REQUIRES: an FP8 quantization set.
  result<fp8_codes> read_fp8_linear(const std::string& name, int64_t out, int64_t in) const;

 private:
  // A GPTQ / AWQ linear's tensors, checked (g_idx filled in for GPTQ).
  struct packed_tensors {
    std::vector<int32_t> qweight, qzeros, g_idx;
    std::vector<float> scales;
  };
  result<packed_tensors> read_packed_tensors(const std::string& prefix, int64_t out, int64_t in) const;
  // model/quantized_read.cpp: the packed forms of read_f32.
  status read_packed(const std::string& prefix, int64_t out, int64_t in, float* w) const;
  status read_fp8(const tensor_info& weight, int64_t out, int64_t in, float* w) const;
  // A block-FP8 weight's codes and scales as stored, checked (its scales'
  // shape, no NaN code, scales finite and not negative).
  result<fp8_codes> read_fp8_codes(const tensor_info& weight, int64_t out, int64_t in) const;
  // `name` with exactly `shape` and stored as `type` (any float type when
  // `type` is f32), or the error read_f32 gives.
  result<const tensor_info*> expect(const std::string& name, const std::vector<int64_t>& shape,
                                    stored_type type) const;

  quant_config quant_;
  std::vector<std::shared_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_info*> by_name_;
  std::string file_list_;  // for error messages
};

// Deterministic pseudo-random weights for `load_format: dummy`: uniform in
// [-scale, scale] from (seed, tensor name, element index), independent of
// thread count and of the order tensors are requested in.
void fill_dummy_f32(int64_t seed, const std::string& name, float* out, size_t n,
                    float scale);
// The same values from the tensor's key, elements [0, n), plus `offset`
// (added after scaling, in float): element i is
//   u = float(splitmix64(key + i * 0xD1B54A32D192ED03) >> 40) / (2^24 - 1)
//   (2u - 1) * scale + offset
// which backends reproduce bit for bit (ops::fill_dummy).
uint64_t dummy_key(int64_t seed, const std::string& name);
void fill_dummy_f32(uint64_t key, float* out, size_t n, float scale, float offset);
// The key whose element i is element first + i of `key`'s: a run of a
// tensor's dummy values (a tensor-parallel rank's part) made on its own.
uint64_t dummy_key_at(uint64_t key, int64_t first);

// A float tensor (f32, bf16, f16) as float32 into out (its element count).
// REQUIRES: is_float_type(t.type).
void tensor_to_f32(const tensor_info& t, float* out);

// Conversions used by the loaders (exact for bf16/f16 -> f32).
float bf16_to_f32(uint16_t v);
float f16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);  // round to nearest even
uint16_t f32_to_f16(float v);   // IEEE half, round to nearest even (subnormals, inf, NaN too)

}  // namespace troupe
