#include "model/lora_writer.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

namespace troupe {

namespace {

const char* safetensors_dtype(dtype t) {
  return t == dtype::f32 ? "F32" : t == dtype::bf16 ? "BF16" : "F16";
}

}  // namespace

status write_random_lora(const model_config& base, const std::filesystem::path& dir,
                         const random_lora_spec& spec) {
  std::vector<lora_target> targets = spec.targets;
  if (targets.empty()) {
    for (int t = 0; t < num_lora_targets; ++t) targets.push_back(static_cast<lora_target>(t));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error("cannot create '" + dir.string() + "': " + ec.message());
  // Tensors in name order, as the header lists them.
  struct item {
    std::string name;
    int64_t rows, cols;
    float scale;
  };
  std::vector<item> items;
  for (int64_t l = 0; l < base.num_hidden_layers; ++l) {
    for (lora_target t : targets) {
      const bool attn = t <= lora_target::o_proj;
      if (!attn && is_moe_layer(base, l)) continue;  // experts take no LoRA (lora_adapter.h)
      const std::string prefix = "base_model.model.model.layers." + std::to_string(l) +
                                 (attn ? ".self_attn." : ".mlp.") + lora_target_name(t);
      const int64_t in = lora_target_in(base, t), out = lora_target_out(base, t);
      items.push_back({prefix + ".lora_A.weight", spec.rank, in,
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)))});
      items.push_back({prefix + ".lora_B.weight", out, spec.rank, spec.b_scale});
    }
  }
  const size_t elem = dtype_size(spec.type);
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  size_t offset = 0;
  for (const item& it : items) {
    const size_t bytes = static_cast<size_t>(it.rows * it.cols) * elem;
    header += ",\"" + it.name + "\":{\"dtype\":\"" + safetensors_dtype(spec.type) +
              "\",\"shape\":[" + std::to_string(it.rows) + "," + std::to_string(it.cols) +
              "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream out(dir / "adapter_model.safetensors", std::ios::binary | std::ios::trunc);
  if (!out) return make_error("cannot write '" + (dir / "adapter_model.safetensors").string() + "'");
  const uint64_t header_len = header.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  std::vector<float> values;
  std::vector<uint16_t> half;
  for (const item& it : items) {
    values.resize(static_cast<size_t>(it.rows * it.cols));
    fill_dummy_f32(dummy_key(spec.seed, it.name), values.data(), values.size(), it.scale, 0.0f);
    if (spec.type == dtype::f32) {
      out.write(reinterpret_cast<const char*>(values.data()),
                static_cast<std::streamsize>(values.size() * 4));
      continue;
    }
    half.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      half[i] = spec.type == dtype::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    }
    out.write(reinterpret_cast<const char*>(half.data()),
              static_cast<std::streamsize>(half.size() * 2));
  }
  if (!out) return make_error("cannot write '" + (dir / "adapter_model.safetensors").string() + "'");
  std::string modules;
  for (lora_target t : targets) modules += std::string(modules.empty() ? "" : ", ") + "\"" + lora_target_name(t) + "\"";
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%g", spec.alpha);
  std::ofstream cfg(dir / "adapter_config.json", std::ios::trunc);
  cfg << "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"r\": " << spec.rank
      << ",\n  \"lora_alpha\": " << alpha << ",\n  \"lora_dropout\": 0.0,\n  \"bias\": \"none\",\n"
      << "  \"use_rslora\": false,\n  \"use_dora\": false,\n  \"fan_in_fan_out\": false,\n"
      << "  \"modules_to_save\": null,\n  \"target_modules\": [" << modules << "],\n"
      << "  \"base_model_name_or_path\": null,\n  \"inference_mode\": true,\n"
      << "  \"comment\": \"random weights written by troupe make-lora (seed " << spec.seed << ")\"\n}\n";
  if (!cfg) return make_error("cannot write '" + (dir / "adapter_config.json").string() + "'");
  return {};
}

}  // namespace troupe
