// Random PEFT LoRA adapters for a model configuration (benchmarks and
// tests): adapter_config.json and adapter_model.safetensors as peft writes
// them, lora_A uniform in +-1/sqrt(in) (as peft initialises it), lora_B
// uniform in +-b_scale (peft starts it at zero; random here so that the
// adapter changes the output), from a seed (fill_dummy_f32's generator:
// the same seed gives the same adapter).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "common/result.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace troupe {

struct random_lora_spec {
  int64_t rank = 16;
  double alpha = 32;
  std::vector<lora_target> targets;  // empty: all seven
  int64_t seed = 0;
  dtype type = dtype::bf16;  // of the stored weights (f32, bf16, f16)
  float b_scale = 1e-2f;
};

// Writes the adapter into `dir` (created if missing; existing files of the
// same names replaced).
status write_random_lora(const model_config& base, const std::filesystem::path& dir,
                         const random_lora_spec& spec);

}  // namespace troupe
