// Parses config.json / generation_config.json with simdjson's DOM API, using
// error codes only (nothing here throws). Every error names the file and the
// key it is about.
#include "model/model_config.h"

#include "common/file_util.h"
#include "model/config_fields.h"

#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>

namespace troupe {
namespace {

using config_fields::field_reader;

namespace fs = std::filesystem;
using simdjson::dom::element;
using simdjson::dom::object;

struct family {
  const char* architecture;
  const char* model_type;
};

constexpr family k_families[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {"Qwen2MoeForCausalLM", "qwen2_moe"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"},
    {"MixtralForCausalLM", "mixtral"},
};

// architectures[0], or the family of model_type when `architectures` is
// absent (hand-written dummy configs).
status read_architecture(const field_reader& f, model_config& c) {
  MODEL_CONFIG_TRY(model_type, f.get_string("model_type"));
  auto list = f.get("architectures");
  if (list) {
    simdjson::dom::array arr;
    std::string_view first;
    if (list->get_array().get(arr) != simdjson::SUCCESS || arr.size() == 0 ||
        arr.at(0).get_string().get(first) != simdjson::SUCCESS) {
      return f.fail("'architectures' must be a non-empty list of strings");
    }
    c.architecture = std::string(first);
  } else if (model_type) {
    for (const auto& fam : k_families) {
      if (*model_type == fam.model_type) c.architecture = fam.architecture;
    }
    if (c.architecture.empty()) {
      return make_error("unsupported model_type '" + *model_type + "' in " + f.source() +
                        " (supported: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral)");
    }
  } else {
    return f.fail("missing 'architectures'");
  }
  const family* found = nullptr;
  for (const auto& fam : k_families) {
    if (c.architecture == fam.architecture) found = &fam;
  }
  if (!found) {
    std::string list_text;
    for (const auto& a : supported_architectures()) list_text += (list_text.empty() ? "" : ", ") + a;
    return make_error("unsupported architecture '" + c.architecture + "' in " + f.source() +
                      " (supported: " + list_text + ")");
  }
  c.model_type = model_type ? *model_type : found->model_type;
  return {};
}

// Sizes, head geometry, norm epsilon, activation.
status read_dims(const field_reader& f, model_config& c) {
  MODEL_CONFIG_TRY(vocab, f.require_positive_int("vocab_size"));
  MODEL_CONFIG_TRY(hidden, f.require_positive_int("hidden_size"));
  MODEL_CONFIG_TRY(inter, f.require_positive_int("intermediate_size"));
  MODEL_CONFIG_TRY(layers, f.require_positive_int("num_hidden_layers"));
  MODEL_CONFIG_TRY(heads, f.require_positive_int("num_attention_heads"));
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;

  MODEL_CONFIG_TRY(kv_heads, f.get_int("num_key_value_heads"));
  c.num_key_value_heads = kv_heads.value_or(heads);
  if (c.num_key_value_heads <= 0) return f.fail("'num_key_value_heads' must be positive");
  if (heads % c.num_key_value_heads != 0) {
    return f.fail("num_attention_heads (" + std::to_string(heads) +
                  ") must be a multiple of num_key_value_heads (" +
                  std::to_string(c.num_key_value_heads) + ")");
  }
  MODEL_CONFIG_TRY(head_dim, f.get_int("head_dim"));
  if (head_dim) {
    if (*head_dim <= 0) return f.fail("'head_dim' must be positive");
    c.head_dim = *head_dim;
  } else {
    if (hidden % heads != 0) {
      return f.fail("hidden_size (" + std::to_string(hidden) +
                    ") is not divisible by num_attention_heads (" + std::to_string(heads) +
                    ") and there is no 'head_dim'");
    }
    c.head_dim = hidden / heads;
  }
  MODEL_CONFIG_TRY(max_pos, f.get_int("max_position_embeddings"));
  c.max_position_embeddings = max_pos.value_or(2048);
  if (c.max_position_embeddings <= 0) return f.fail("'max_position_embeddings' must be positive");
  MODEL_CONFIG_TRY(eps, f.get_number("rms_norm_eps"));
  if (eps) c.rms_norm_eps = *eps;
  if (c.rms_norm_eps <= 0) return f.fail("'rms_norm_eps' must be positive");
  MODEL_CONFIG_TRY(tie, f.get_bool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  MODEL_CONFIG_TRY(act, f.get_string("hidden_act"));
  if (act && *act != "silu") {
    return f.fail("hidden_act '" + *act + "' is not supported (supported: silu)");
  }
  return {};
}

// Biases, q/k norm and sliding window, which differ per family.
status read_family_rules(const field_reader& f, model_config& c) {
  const bool is_qwen = c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen3ForCausalLM" ||
                       c.architecture == "Qwen2MoeForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
  MODEL_CONFIG_TRY(attention_bias, f.get_bool("attention_bias"));
  if (c.architecture == "Qwen2ForCausalLM") {
    c.attention_bias = true;  // Qwen2's q/k/v always carry a bias; no key says so
  } else if (c.architecture == "Qwen2MoeForCausalLM") {
    // transformers 5 writes qkv_bias (true); hub checkpoints say nothing
    // and always have the biases.
    MODEL_CONFIG_TRY(qkv_bias, f.get_bool("qkv_bias"));
    c.attention_bias = qkv_bias.value_or(true);
  } else {
    c.attention_bias = attention_bias.value_or(false);
  }
  c.qk_norm = c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
  if (!is_qwen) {
    MODEL_CONFIG_TRY(mlp_bias, f.get_bool("mlp_bias"));
    if (mlp_bias.value_or(false)) return f.fail("mlp_bias is not supported");
  }
  MODEL_CONFIG_TRY(window, f.get_int("sliding_window"));
  if (window && *window < c.max_position_embeddings) {
    bool enabled = true;
    if (is_qwen) {
      MODEL_CONFIG_TRY(use_window, f.get_bool("use_sliding_window"));
      enabled = use_window.value_or(true);
    }
    if (enabled) {
      return f.fail("sliding-window attention is not supported yet (sliding_window " +
                    std::to_string(*window) + " < max_position_embeddings " +
                    std::to_string(c.max_position_embeddings) + ")");
    }
  }
  return {};
}

// Experts and routing (Qwen2-MoE and Qwen3-MoE: num_experts, or
// transformers 5's num_local_experts; Mixtral: num_local_experts); Qwen2-MoE's
// shared expert (shared_expert_intermediate_size).
status read_moe(const field_reader& f, model_config& c) {
  const bool qwen2 = c.architecture == "Qwen2MoeForCausalLM";
  const bool qwen = qwen2 || c.architecture == "Qwen3MoeForCausalLM";
  if (!qwen && c.architecture != "MixtralForCausalLM") return {};
  moe_config& m = c.moe;
  MODEL_CONFIG_TRY(experts, f.get_int(qwen && f.get("num_experts") ? "num_experts" : "num_local_experts"));
  if (!experts || *experts <= 0) return f.fail(qwen ? "missing 'num_experts'" : "missing 'num_local_experts'");
  m.num_experts = *experts;
  MODEL_CONFIG_TRY(top_k, f.require_positive_int("num_experts_per_tok"));
  if (top_k > m.num_experts) {
    return f.fail("num_experts_per_tok (" + std::to_string(top_k) + ") is more than the " +
                  std::to_string(m.num_experts) + " experts");
  }
  m.top_k = top_k;
  m.mixtral_names = !qwen;
  if (!qwen) {
    m.intermediate = c.intermediate_size;
    m.renormalize = true;
    return {};
  }
  MODEL_CONFIG_TRY(inter, f.require_positive_int("moe_intermediate_size"));
  m.intermediate = inter;
  if (qwen2) {
    MODEL_CONFIG_TRY(shared, f.require_positive_int("shared_expert_intermediate_size"));
    m.shared_intermediate = shared;
  }
  MODEL_CONFIG_TRY(norm, f.get_bool("norm_topk_prob"));
  m.renormalize = norm.value_or(false);
  MODEL_CONFIG_TRY(step, f.get_int("decoder_sparse_step"));
  m.sparse_step = step.value_or(1);
  if (m.sparse_step <= 0) return f.fail("'decoder_sparse_step' must be positive");
  if (auto list = f.get("mlp_only_layers")) {
    simdjson::dom::array arr;
    if (list->get_array().get(arr) != simdjson::SUCCESS) return f.fail("'mlp_only_layers' must be a list of layers");
    for (element e : arr) {
      int64_t layer = 0;
      if (e.get_int64().get(layer) != simdjson::SUCCESS) return f.fail("'mlp_only_layers' must be a list of layers");
      m.mlp_only_layers.push_back(layer);
    }
  }
  return {};
}

// The parameters of one RoPE type from `rope_parameters` or `rope_scaling`.
status read_rope_type(const field_reader& sub, const std::string& type, rope_config& rope) {
  if (type == "default") {
    rope.type = rope_type::default_;
    return {};
  }
  if (type != "linear" && type != "llama3") {
    return make_error("unsupported RoPE type '" + type + "' in " + sub.source() +
                      " (supported: default, linear, llama3)");
  }
  MODEL_CONFIG_TRY(factor, sub.require_number("factor"));
  if (factor <= 0) return sub.fail(sub.quoted("factor") + " must be positive");
  rope.factor = factor;
  if (type == "linear") {
    rope.type = rope_type::linear;
    return {};
  }
  rope.type = rope_type::llama3;
  MODEL_CONFIG_TRY(low, sub.require_number("low_freq_factor"));
  MODEL_CONFIG_TRY(high, sub.require_number("high_freq_factor"));
  MODEL_CONFIG_TRY(original, sub.get_int("original_max_position_embeddings"));
  if (!original) return sub.fail("missing " + sub.quoted("original_max_position_embeddings"));
  if (*original <= 0) return sub.fail(sub.quoted("original_max_position_embeddings") + " must be positive");
  if (high <= low) return sub.fail(sub.quoted("high_freq_factor") + " must exceed low_freq_factor");
  rope.low_freq_factor = low;
  rope.high_freq_factor = high;
  rope.original_max_position_embeddings = *original;
  return {};
}

// transformers 5 `rope_parameters`, else hub `rope_theta` + `rope_scaling`
// (whose type key is `rope_type`, or `type` in older checkpoints).
result<rope_config> read_rope(const field_reader& f) {
  rope_config rope;
  MODEL_CONFIG_TRY(top_theta, f.get_number("rope_theta"));
  const char* block_key = f.get("rope_parameters") ? "rope_parameters" : "rope_scaling";
  auto block = f.get(block_key);
  std::string type = "default";
  std::optional<double> theta = top_theta;
  if (block) {
    object obj;
    if (block->get_object().get(obj) != simdjson::SUCCESS) {
      return f.fail("'" + std::string(block_key) + "' must be an object");
    }
    field_reader sub(obj, f.source(), std::string(block_key) + ".");
    MODEL_CONFIG_TRY(type_key, sub.get_string("rope_type"));
    MODEL_CONFIG_TRY(legacy_type_key, sub.get_string("type"));
    if (type_key) {
      type = *type_key;
    } else if (legacy_type_key) {
      type = *legacy_type_key;
    } else if (std::string_view(block_key) == "rope_scaling") {
      return f.fail("missing 'rope_scaling.rope_type'");
    }
    MODEL_CONFIG_TRY(inner_theta, sub.get_number("rope_theta"));
    if (inner_theta) theta = inner_theta;
    if (auto s = read_rope_type(sub, type, rope); !s) return std::move(s).take_error();
  }
  rope.theta = theta.value_or(10000.0);
  if (rope.theta <= 0) return f.fail("'rope_theta' must be positive");
  return rope;
}

// eos_token_id: an integer, a list of integers, or null.
status append_eos_ids(const field_reader& f, std::vector<int64_t>& ids) {
  auto e = f.get("eos_token_id");
  if (!e) return {};
  int64_t one = 0;
  if (e->get_int64().get(one) == simdjson::SUCCESS) {
    if (std::find(ids.begin(), ids.end(), one) == ids.end()) ids.push_back(one);
    return {};
  }
  simdjson::dom::array arr;
  if (e->get_array().get(arr) != simdjson::SUCCESS) {
    return f.fail("'eos_token_id' must be an integer or a list of integers");
  }
  for (element item : arr) {
    if (item.get_int64().get(one) != simdjson::SUCCESS) {
      return f.fail("'eos_token_id' must be an integer or a list of integers");
    }
    if (std::find(ids.begin(), ids.end(), one) == ids.end()) ids.push_back(one);
  }
  return {};
}

status read_tokens_and_dtype(const field_reader& f, model_config& c) {
  MODEL_CONFIG_TRY(bos, f.get_int("bos_token_id"));
  c.bos_token_id = bos.value_or(-1);
  if (auto s = append_eos_ids(f, c.eos_token_ids); !s) return s;
  MODEL_CONFIG_TRY(dtype_key, f.get_string("dtype"));
  MODEL_CONFIG_TRY(torch_dtype_key, f.get_string("torch_dtype"));
  if (dtype_key) {
    c.torch_dtype = *dtype_key;
  } else if (torch_dtype_key) {
    c.torch_dtype = *torch_dtype_key;
  }
  return {};
}


// Parses json_text as an object; the parser owns the returned DOM.
result<object> parse_object(simdjson::dom::parser& parser, const std::string& json_text,
                            const std::string& source_name) {
  element root;
  if (auto err = parser.parse(json_text).get(root); err != simdjson::SUCCESS) {
    return make_error(source_name + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS) {
    return make_error(source_name + ": not a JSON object");
  }
  return obj;
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& fam : k_families) v.emplace_back(fam.architecture);
    return v;
  }();
  return names;
}

result<model_config> parse_model_config(const std::string& json_text,
                                        const std::string& source_name) {
  simdjson::dom::parser parser;
  MODEL_CONFIG_TRY(obj, parse_object(parser, json_text, source_name));
  field_reader f(obj, source_name);
  model_config c;
  if (auto s = read_architecture(f, c); !s) return std::move(s).take_error();
  if (auto s = read_dims(f, c); !s) return std::move(s).take_error();
  if (auto s = read_family_rules(f, c); !s) return std::move(s).take_error();
  if (auto s = read_moe(f, c); !s) return std::move(s).take_error();
  MODEL_CONFIG_TRY(rope, read_rope(f));
  c.rope = rope;
  if (auto s = read_tokens_and_dtype(f, c); !s) return std::move(s).take_error();
  if (auto q = f.get("quantization_config")) {
    MODEL_CONFIG_TRY(quant, parse_quant_config(simdjson::minify(*q), source_name));
    c.quantization = quant;
  }
  return c;
}

bool is_moe_layer(const model_config& c, int64_t layer) {
  const moe_config& m = c.moe;
  if (m.num_experts == 0) return false;
  if (std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) != m.mlp_only_layers.end()) return false;
  return (layer + 1) % m.sparse_step == 0;
}

bool has_dense_mlp(const model_config& c) {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (!is_moe_layer(c, i)) return true;
  }
  return false;
}

result<model_config> load_model_config(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    return make_error("model folder '" + dir.string() + "' does not exist");
  }
  if (!fs::is_directory(dir, ec)) {
    return make_error("model folder '" + dir.string() + "' is not a folder");
  }
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path, ec)) {
    return make_error("no config.json in model folder '" + dir.string() + "'");
  }
  MODEL_CONFIG_TRY(text, read_text_file(config_path));
  MODEL_CONFIG_TRY(config, parse_model_config(text, config_path.string()));
  // AutoGPTQ's quantize_config.json when config.json says nothing (as vLLM reads it).
  const fs::path quantize_path = dir / "quantize_config.json";
  if (config.quantization.kind == quant_config::method::none && fs::exists(quantize_path, ec)) {
    MODEL_CONFIG_TRY(quant_text, read_text_file(quantize_path));
    MODEL_CONFIG_TRY(quant, parse_quant_config(quant_text, quantize_path.string(), "gptq"));
    config.quantization = quant;
  }

  // generation_config.json may add end-of-sequence ids (e.g. <|eot_id|>).
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    MODEL_CONFIG_TRY(gen_text, read_text_file(gen_path));
    simdjson::dom::parser parser;
    MODEL_CONFIG_TRY(gen, parse_object(parser, gen_text, gen_path.string()));
    if (auto s = append_eos_ids(field_reader(gen, gen_path.string()), config.eos_token_ids); !s) {
      return std::move(s).take_error();
    }
  }
  return config;
}

}  // namespace troupe
