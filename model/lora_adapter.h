// LoRA adapters in PEFT's format: a folder with adapter_config.json and
// adapter_model.safetensors, as peft's save_pretrained writes them.
//
// load_lora_adapter reads and checks one against the base model it will run
// on, and keeps its weights in float32 on the host, ready for the worker to
// copy into a device slot: per layer and target module, lora_A as [r, in]
// and lora_B as [out, r] with the adapter's scaling (lora_alpha / r, or
// lora_alpha / sqrt(r) with use_rslora) folded in. Every problem is listed
// in the error, each naming the adapter: a missing or unreadable file, a
// rank above max_lora_rank, a target module the architecture lacks, a
// tensor whose shape does not fit the base, options troupe does not run
// (bias other than "none", modules_to_save, DoRA, fan_in_fan_out, per-module
// rank or alpha patterns).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/model_config.h"

namespace troupe {

// The projections of a Llama-family layer a LoRA may target, in the order
// of the fused products' columns (q, k, v; gate, up) and then o and down.
enum class lora_target : int { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
constexpr int num_lora_targets = 7;
const char* lora_target_name(lora_target t);
// [out, in] of target t in a model of this configuration.
int64_t lora_target_in(const model_config& c, lora_target t);
int64_t lora_target_out(const model_config& c, lora_target t);

struct lora_weights {
  int64_t rank = 0;        // 0: the adapter leaves this module alone
  std::vector<float> a;    // [rank, in]
  std::vector<float> b;    // [out, rank], scaling folded in
};

struct lora_adapter {
  std::string name;
  std::filesystem::path path;
  int64_t rank = 0;      // r
  double scaling = 0;    // folded into every b
  std::vector<lora_target> targets;  // modules with weights, in enum order
  // [layer * num_lora_targets + target]
  std::vector<lora_weights> modules;

  const lora_weights& at(int64_t layer, lora_target t) const {
    return modules[static_cast<size_t>(layer * num_lora_targets + static_cast<int>(t))];
  }
};

result<std::shared_ptr<const lora_adapter>> load_lora_adapter(const std::string& name,
                                                              const std::filesystem::path& dir,
                                                              const model_config& base,
                                                              int64_t max_lora_rank);

}  // namespace troupe
