// PEFT adapter loading (lora_adapter.h). The config is read with simdjson's
// DOM API (error codes only); the weights through safetensors_file. Problems
// are collected, not stopped at, so one error lists all of them.
#include "model/lora_adapter.h"

#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <string_view>

#include "common/file_util.h"
#include "model/weights.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_target_names[num_lora_targets] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

int target_index(std::string_view name) {
  for (int t = 0; t < num_lora_targets; ++t) {
    if (name == k_target_names[t]) return t;
  }
  return -1;
}

std::string all_target_names() {
  std::string s;
  for (int t = 0; t < num_lora_targets; ++t) s += std::string(t ? ", " : "") + k_target_names[t];
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Whether a JSON value counts as unset: null, false, "", an empty list or
// object.
bool is_empty(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return true;
    case element_type::BOOL: return !bool(e.get_bool());
    case element_type::STRING: return std::string_view(e.get_string()).empty();
    case element_type::ARRAY: return simdjson::dom::array(e.get_array()).size() == 0;
    case element_type::OBJECT: return simdjson::dom::object(e.get_object()).size() == 0;
    default: return false;
  }
}

struct peft_config {
  int64_t r = 0;
  double alpha = 0;
  bool rslora = false;
  std::vector<std::string> target_list;  // target_modules as a list
  std::string target_regex;              // or as a regular expression
};

// adapter_config.json's fields that matter, with every problem appended.
peft_config read_config(const std::string& text, int64_t max_lora_rank,
                        std::vector<std::string>& problems) {
  peft_config c;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(text).get(root) != simdjson::SUCCESS || !root.is_object()) {
    problems.push_back("adapter_config.json is not a JSON object");
    return c;
  }
  auto field = [&](const char* key, simdjson::dom::element& e) {
    return root.at_key(key).get(e) == simdjson::SUCCESS && !e.is_null();
  };
  simdjson::dom::element e;
  if (field("peft_type", e)) {
    std::string_view type;
    if (e.get_string().get(type) != simdjson::SUCCESS || type != "LORA") {
      problems.push_back("peft_type must be \"LORA\"");
    }
  }
  if (!field("r", e) || e.get_int64().get(c.r) != simdjson::SUCCESS || c.r <= 0) {
    problems.push_back("'r' must be a positive integer");
  } else if (c.r > max_lora_rank) {
    problems.push_back("rank " + std::to_string(c.r) + " is above max_lora_rank " +
                       std::to_string(max_lora_rank));
  }
  if (!field("lora_alpha", e) || e.get_double().get(c.alpha) != simdjson::SUCCESS) {
    int64_t i = 0;
    if (field("lora_alpha", e) && e.get_int64().get(i) == simdjson::SUCCESS) {
      c.alpha = static_cast<double>(i);
    } else {
      problems.push_back("'lora_alpha' must be a number");
    }
  }
  if (field("use_rslora", e) && e.get_bool().get(c.rslora) != simdjson::SUCCESS) {
    problems.push_back("'use_rslora' must be true or false");
  }
  if (field("bias", e)) {
    std::string_view bias;
    if (e.get_string().get(bias) != simdjson::SUCCESS || bias != "none") {
      problems.push_back("bias '" + std::string(bias) + "' is not supported (only \"none\")");
    }
  }
  for (const char* unsupported : {"modules_to_save", "use_dora", "fan_in_fan_out", "rank_pattern",
                                  "alpha_pattern", "lora_bias"}) {
    if (field(unsupported, e) && !is_empty(e)) {
      problems.push_back(std::string(unsupported) + " is not supported");
    }
  }
  if (!field("target_modules", e)) {
    problems.push_back("'target_modules' is missing");
  } else if (e.is_string()) {
    c.target_regex = std::string(std::string_view(e.get_string()));
  } else if (e.is_array()) {
    for (simdjson::dom::element m : simdjson::dom::array(e.get_array())) {
      std::string_view name;
      if (m.get_string().get(name) != simdjson::SUCCESS) {
        problems.push_back("'target_modules' must list strings");
        continue;
      }
      if (target_index(name) < 0) {
        problems.push_back("target module '" + std::string(name) +
                           "' is not one this architecture has (" + all_target_names() + ")");
      }
      c.target_list.emplace_back(name);
    }
  } else {
    problems.push_back("'target_modules' must be a list or a string");
  }
  return c;
}

}  // namespace

const char* lora_target_name(lora_target t) { return k_target_names[static_cast<int>(t)]; }

int64_t lora_target_in(const model_config& c, lora_target t) {
  switch (t) {
    case lora_target::o_proj: return c.num_attention_heads * c.head_dim;
    case lora_target::down_proj: return c.intermediate_size;
    default: return c.hidden_size;
  }
}

int64_t lora_target_out(const model_config& c, lora_target t) {
  switch (t) {
    case lora_target::q_proj: return c.num_attention_heads * c.head_dim;
    case lora_target::k_proj:
    case lora_target::v_proj: return c.num_key_value_heads * c.head_dim;
    case lora_target::gate_proj:
    case lora_target::up_proj: return c.intermediate_size;
    default: return c.hidden_size;
  }
}

result<std::shared_ptr<const lora_adapter>> load_lora_adapter(const std::string& name,
                                                              const fs::path& dir,
                                                              const model_config& base,
                                                              int64_t max_lora_rank) {
  const std::string who = "LoRA adapter '" + name + "' (" + dir.string() + "): ";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error(who + "not a directory");
  auto text = read_text_file(dir / "adapter_config.json");
  if (!text) return make_error(who + "cannot read adapter_config.json");
  std::vector<std::string> problems;
  const peft_config cfg = read_config(*text, max_lora_rank, problems);
  const fs::path weights = dir / "adapter_model.safetensors";
  if (!fs::exists(weights, ec)) {
    problems.push_back(fs::exists(dir / "adapter_model.bin", ec)
                           ? "adapter_model.bin is not supported (convert it to safetensors)"
                           : "adapter_model.safetensors is missing");
  }
  auto file = problems.empty() ? safetensors_file::open(weights)
                               : result<std::shared_ptr<safetensors_file>>(make_error(""));
  if (problems.empty() && !file) problems.push_back(file.error_message());
  auto fail = [&] {
    std::string m = who + problems.front();
    for (size_t i = 1; i < problems.size(); ++i) m += "; " + problems[i];
    return make_error(m);
  };
  if (!problems.empty()) return fail();

  auto adapter = std::make_shared<lora_adapter>();
  adapter->name = name;
  adapter->path = dir;
  adapter->rank = cfg.r;
  adapter->scaling = cfg.rslora ? cfg.alpha / std::sqrt(static_cast<double>(cfg.r))
                                : cfg.alpha / static_cast<double>(cfg.r);
  adapter->modules.resize(static_cast<size_t>(base.num_hidden_layers * num_lora_targets));
  std::regex target_re;
  if (!cfg.target_regex.empty()) {
    try {
      target_re = std::regex(cfg.target_regex);
    } catch (const std::regex_error&) {
      problems.push_back("target_modules '" + cfg.target_regex + "' is not a valid regular expression");
      return fail();
    }
  }
  // base_model.model.model.layers.<i>.<self_attn|mlp>.<module>.lora_<A|B>[.<adapter>].weight
  static const std::regex name_re(
      R"(base_model\.model\.(model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+))\.lora_(A|B)(\.\w+)?\.weight)");
  std::map<std::pair<int64_t, int>, std::pair<const tensor_info*, const tensor_info*>> found;
  for (const auto& [tensor_name, info] : (*file)->tensors()) {
    std::smatch m;
    if (!std::regex_match(tensor_name, m, name_re)) {
      problems.push_back("tensor '" + tensor_name + "' is not a LoRA weight of a layer's projection");
      continue;
    }
    const int64_t layer = std::stoll(m[2].str());
    const int t = target_index(m[4].str());
    const bool attn_module = t >= 0 && t <= static_cast<int>(lora_target::o_proj);
    if (t < 0 || attn_module != (m[3].str() == "self_attn")) {
      problems.push_back("tensor '" + tensor_name + "': module '" + m[3].str() + "." + m[4].str() +
                         "' is not one this architecture has (" + all_target_names() + ")");
      continue;
    }
    if (layer >= base.num_hidden_layers) {
      problems.push_back("tensor '" + tensor_name + "': layer " + std::to_string(layer) +
                         " is past the base model's " + std::to_string(base.num_hidden_layers));
      continue;
    }
    if (!attn_module && is_moe_layer(base, layer)) {
      problems.push_back("tensor '" + tensor_name + "': layer " + std::to_string(layer) + " of " +
                         base.architecture + " is a mixture-of-experts layer, whose experts take no LoRA "
                         "yet (its attention modules q_proj, k_proj, v_proj, o_proj do)");
      continue;
    }
    if (!cfg.target_regex.empty() && !std::regex_match(m[1].str(), target_re) &&
        !std::regex_match(m[4].str(), target_re)) {
      problems.push_back("tensor '" + tensor_name + "' is outside target_modules");
      continue;
    }
    if (!is_float_type(info.type)) {
      problems.push_back("tensor '" + tensor_name + "' is " + stored_type_name(info.type) +
                         ", expected a float tensor (F32, BF16, F16)");
      continue;
    }
    auto& slot = found[{layer, t}];
    (m[5].str() == "A" ? slot.first : slot.second) = &info;
  }
  std::vector<std::string> misfits;  // shape problems: a wrong base gives one per tensor
  for (const auto& [key, pair] : found) {
    const auto [layer, t] = key;
    const auto target = static_cast<lora_target>(t);
    const std::string where = "layer " + std::to_string(layer) + " " + k_target_names[t];
    if (pair.first == nullptr || pair.second == nullptr) {
      problems.push_back(where + ": lora_" + std::string(pair.first ? "B" : "A") + " is missing");
      continue;
    }
    if (!cfg.target_list.empty() &&
        std::find(cfg.target_list.begin(), cfg.target_list.end(), k_target_names[t]) ==
            cfg.target_list.end()) {
      problems.push_back(where + " has weights but is not in target_modules");
      continue;
    }
    const int64_t in = lora_target_in(base, target), out = lora_target_out(base, target);
    const std::vector<int64_t> want_a = {cfg.r, in}, want_b = {out, cfg.r};
    bool fits = true;
    for (const auto& [info, want] : {std::pair{pair.first, want_a}, std::pair{pair.second, want_b}}) {
      if (info->shape != want) {
        misfits.push_back("tensor '" + info->name + "' has shape " + shape_text(info->shape) +
                           ", expected " + shape_text(want) + " (rank " + std::to_string(cfg.r) +
                           ", " + k_target_names[t] + " is " + std::to_string(in) + " -> " +
                           std::to_string(out) + " in the base model)");
        fits = false;
      }
    }
    if (!fits) continue;
    lora_weights& w = adapter->modules[static_cast<size_t>(layer * num_lora_targets + t)];
    w.rank = cfg.r;
    w.a.resize(static_cast<size_t>(cfg.r * in));
    w.b.resize(static_cast<size_t>(out * cfg.r));
    tensor_to_f32(*pair.first, w.a.data());
    tensor_to_f32(*pair.second, w.b.data());
    const auto s = static_cast<float>(adapter->scaling);
    for (float& v : w.b) v *= s;
  }
  // A few shape problems in full, then how many more.
  for (size_t i = 0; i < misfits.size() && i < 3; ++i) problems.push_back(misfits[i]);
  if (misfits.size() > 3) {
    problems.push_back("and " + std::to_string(misfits.size() - 3) +
                       " more tensors whose shapes do not fit the base model");
  }
  if (found.empty() && problems.empty()) problems.push_back("no LoRA weights in adapter_model.safetensors");
  if (!problems.empty()) return fail();
  for (int t = 0; t < num_lora_targets; ++t) {
    for (int64_t l = 0; l < base.num_hidden_layers; ++l) {
      if (adapter->at(l, static_cast<lora_target>(t)).rank > 0) {
        adapter->targets.push_back(static_cast<lora_target>(t));
        break;
      }
    }
  }
  return std::shared_ptr<const lora_adapter>(std::move(adapter));
}

}  // namespace troupe
