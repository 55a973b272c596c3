// model_config: what a Hugging Face config.json (plus generation_config.json)
// says about a decoder-only transformer of the Llama family (Llama, Mistral,
// Qwen2, Qwen3, and their mixture-of-experts kin). Parsed once at start;
// immutable afterwards.
//
// Accepts RoPE written either as `rope_theta` + `rope_scaling` (hub
// checkpoints) or as `rope_parameters` (transformers 5).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/quantization.h"

namespace troupe {

enum class rope_type { default_, linear, llama3 };

struct rope_config {
  rope_type type = rope_type::default_;
  double theta = 10000.0;
  double factor = 1.0;                       // linear and llama3
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// Mixture-of-experts (Qwen2-MoE, Qwen3-MoE, Mixtral; num_experts 0: dense). A layer
// is sparse (is_moe_layer) unless listed in mlp_only_layers, every
// sparse_step-th layer (decoder_sparse_step), as transformers decides.
struct moe_config {
  int64_t num_experts = 0;
  int64_t top_k = 0;          // num_experts_per_tok
  int64_t intermediate = 0;   // an expert's (moe_intermediate_size; Mixtral: intermediate_size)
  bool renormalize = false;   // the top-k weights to sum 1 (norm_topk_prob; Mixtral: always)
  int64_t sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // Qwen2-MoE: every sparse layer also has a shared expert, an MLP of this
  // intermediate size (shared_expert_intermediate_size) whose output is
  // added times sigmoid(shared_expert_gate . x); 0: none.
  int64_t shared_intermediate = 0;
  // Hub names: Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2},
  // else mlp.{gate, experts.E.gate_proj/up_proj/down_proj}.
  bool mixtral_names = false;
};

struct model_config {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // explicit, or hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  rope_config rope;
  std::string torch_dtype = "float32";  // `dtype` or `torch_dtype`
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;  // config.json plus generation_config.json
  quant_config quantization;           // quantization_config (model/quantization.h)
  moe_config moe;
};

bool is_moe_layer(const model_config& c, int64_t layer);
// Whether any layer has a dense MLP (not is_moe_layer).
bool has_dense_mlp(const model_config& c);

// The architectures this build can run, for error messages.
const std::vector<std::string>& supported_architectures();

// Reads DIR/config.json (required) and DIR/generation_config.json (optional).
// Errors name the file and the key: a missing folder, a malformed file, an
// unsupported architecture or RoPE type (listing the supported ones).
result<model_config> load_model_config(const std::filesystem::path& dir);

// Same, from the text of config.json (for tests and dummy configs).
result<model_config> parse_model_config(const std::string& json_text,
                                        const std::string& source_name);

}  // namespace troupe
