// model_config: the four fixture checkpoints (written by transformers 5, so
// independent of this code), hub-style RoPE written as JSON text, and every
// error with its exact message.
#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/temp_dir.h"
#include <unistd.h>

#include <fstream>
#include <map>

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "/work/main/tests/data"
#endif

namespace troupe {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::StartsWith;

const fs::path k_models = fs::path(TROUPE_TEST_DATA) / "models";

// A config as key -> raw JSON value, so tests can drop or replace keys.
using fields = std::map<std::string, std::string>;

fields llama_fields() {
  return {{"architectures", R"(["LlamaForCausalLM"])"},
          {"vocab_size", "1000"},
          {"hidden_size", "64"},
          {"intermediate_size", "128"},
          {"num_hidden_layers", "2"},
          {"num_attention_heads", "4"}};
}

fields with(fields f, const std::string& key, const std::string& value) {
  f[key] = value;
  return f;
}

fields qwen_fields(const std::string& arch) {
  return with(llama_fields(), "architectures", "[\"" + arch + "\"]");
}

std::string to_json(const fields& f) {
  std::string s = "{";
  for (const auto& [k, v] : f) s += (s.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  return s + "}";
}

result<model_config> parse(const fields& f) { return parse_model_config(to_json(f), "m/config.json"); }

std::string parse_error(const fields& f) {
  auto r = parse(f);
  return r.ok() ? std::string("(no error)") : r.error_message();
}

// A fresh folder under the temp dir, removed at the end of the test.
class temp_dir_test : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) { tmp_.write(name, text); }
  testing::temp_dir tmp_{"model-config-test"};
  const fs::path& dir_ = tmp_.path();
};

TEST(model_config_fixture, tiny_llama_gqa) {
  auto c = load_model_config(k_models / "tiny-llama");
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 1024);
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->intermediate_size, 256);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->rope.type, rope_type::default_);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
}

TEST(model_config_fixture, tiny_llama_mha_llama3_rope) {
  auto c = load_model_config(k_models / "tiny-llama-mha");
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->rope.type, rope_type::llama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 512);
}

TEST(model_config_fixture, tiny_qwen2_bias_and_tied) {
  auto c = load_model_config(k_models / "tiny-qwen2");
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->intermediate_size, 320);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
}

TEST(model_config_fixture, tiny_qwen3_qk_norm_head_dim) {
  auto c = load_model_config(k_models / "tiny-qwen3");
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 48);
  EXPECT_NE(c->head_dim, c->hidden_size / c->num_attention_heads);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(model_config, supported_architectures) {
  EXPECT_THAT(supported_architectures(),
              ElementsAre("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                          "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"));
}

TEST(model_config, defaults) {
  auto c = parse(llama_fields());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope.type, rope_type::default_);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(model_config, null_head_dim_and_kv_heads_are_derived) {
  auto c = parse(with(with(llama_fields(), "head_dim", "null"), "num_key_value_heads", "null"));
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 4);
}

TEST(model_config, torch_dtype_and_eos_list) {
  auto f = with(llama_fields(), "torch_dtype", R"("bfloat16")");
  f = with(f, "eos_token_id", "[128001, 128008, 128009]");
  f = with(f, "bos_token_id", "128000");
  auto c = parse(f);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128008, 128009));
}

TEST(model_config, hub_rope_linear) {
  auto f = with(llama_fields(), "rope_theta", "1000000");  // an integer in some configs
  f = with(f, "rope_scaling", R"({"rope_type": "linear", "factor": 2.0})");
  auto c = parse(f);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->rope.type, rope_type::linear);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
}

TEST(model_config, hub_rope_llama3) {  // as in Llama-3.1-8B's config.json
  auto f = with(llama_fields(), "rope_theta", "500000.0");
  f = with(f, "rope_scaling", R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"})");
  auto c = parse(f);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->rope.type, rope_type::llama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
}

TEST(model_config, hub_rope_legacy_type_key) {
  auto c = parse(with(llama_fields(), "rope_scaling", R"({"type": "linear", "factor": 4.0})"));
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->rope.type, rope_type::linear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
}

TEST(model_config, hub_rope_scaling_null) {
  auto c = parse(with(with(llama_fields(), "rope_scaling", "null"), "rope_theta", "5e5"));
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->rope.type, rope_type::default_);
  EXPECT_DOUBLE_EQ(c->rope.theta, 5e5);
}

TEST(model_config, unsupported_rope_type) {
  const std::string expected =
      "unsupported RoPE type 'yarn' in m/config.json (supported: default, linear, llama3)";
  EXPECT_EQ(parse_error(with(llama_fields(), "rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})")),
            expected);
  EXPECT_EQ(parse_error(with(llama_fields(), "rope_parameters", R"({"rope_type": "yarn", "rope_theta": 1e4})")),
            expected);
}

TEST(model_config, rope_missing_factor) {
  EXPECT_EQ(parse_error(with(llama_fields(), "rope_scaling", R"({"rope_type": "linear"})")),
            "m/config.json: missing 'rope_scaling.factor'");
  EXPECT_EQ(parse_error(with(llama_fields(), "rope_parameters",
                             R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4})")),
            "m/config.json: missing 'rope_parameters.original_max_position_embeddings'");
}

TEST(model_config, missing_required_keys) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    fields f = llama_fields();
    f.erase(key);
    EXPECT_EQ(parse_error(f), std::string("m/config.json: missing '") + key + "'");
  }
}

TEST(model_config, wrong_types) {
  EXPECT_EQ(parse_error(with(llama_fields(), "hidden_size", R"("64")")),
            "m/config.json: 'hidden_size' must be an integer");
  EXPECT_EQ(parse_error(with(llama_fields(), "hidden_size", "64.5")),
            "m/config.json: 'hidden_size' must be an integer");
  EXPECT_EQ(parse_error(with(llama_fields(), "hidden_size", "0")),
            "m/config.json: 'hidden_size' must be positive");
  EXPECT_EQ(parse_error(with(llama_fields(), "tie_word_embeddings", "1")),
            "m/config.json: 'tie_word_embeddings' must be true or false");
  EXPECT_EQ(parse_error(with(llama_fields(), "eos_token_id", R"([2, "x"])")),
            "m/config.json: 'eos_token_id' must be an integer or a list of integers");
}

TEST(model_config, kv_heads_must_divide_heads) {
  EXPECT_EQ(parse_error(with(llama_fields(), "num_key_value_heads", "3")),
            "m/config.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)");
}

TEST(model_config, hidden_act_must_be_silu) {
  EXPECT_EQ(parse_error(with(llama_fields(), "hidden_act", R"("gelu")")),
            "m/config.json: hidden_act 'gelu' is not supported (supported: silu)");
}

TEST(model_config, bias_rules) {
  EXPECT_TRUE(parse(with(llama_fields(), "attention_bias", "true"))->attention_bias);
  EXPECT_TRUE(parse(qwen_fields("Qwen2ForCausalLM"))->attention_bias);
  EXPECT_FALSE(parse(qwen_fields("Qwen3ForCausalLM"))->attention_bias);
  EXPECT_TRUE(parse(with(qwen_fields("Qwen3ForCausalLM"), "attention_bias", "true"))->attention_bias);
  EXPECT_TRUE(parse(with(llama_fields(), "mlp_bias", "false")).ok());
  EXPECT_EQ(parse_error(with(llama_fields(), "mlp_bias", "true")), "m/config.json: mlp_bias is not supported");
  EXPECT_EQ(parse_error(with(qwen_fields("MistralForCausalLM"), "mlp_bias", "true")),
            "m/config.json: mlp_bias is not supported");
}

TEST(model_config, sliding_window) {
  const std::string expected =
      "m/config.json: sliding-window attention is not supported yet "
      "(sliding_window 4096 < max_position_embeddings 32768)";
  fields mistral = with(qwen_fields("MistralForCausalLM"), "max_position_embeddings", "32768");
  EXPECT_EQ(parse_error(with(mistral, "sliding_window", "4096")), expected);
  EXPECT_TRUE(parse(with(mistral, "sliding_window", "null")).ok());
  EXPECT_TRUE(parse(with(mistral, "sliding_window", "32768")).ok());

  fields qwen = with(with(qwen_fields("Qwen2ForCausalLM"), "max_position_embeddings", "32768"),
                     "sliding_window", "4096");
  EXPECT_TRUE(parse(with(qwen, "use_sliding_window", "false")).ok());
  EXPECT_EQ(parse_error(with(qwen, "use_sliding_window", "true")), expected);
  EXPECT_EQ(parse_error(qwen), expected);
}

TEST(model_config, architecture_from_model_type) {
  fields f = llama_fields();
  f.erase("architectures");
  EXPECT_EQ(parse_error(f), "m/config.json: missing 'architectures'");
  auto c = parse(with(f, "model_type", R"("qwen2")"));
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->attention_bias);
}

TEST(model_config, not_an_object) {
  EXPECT_EQ(parse_model_config("[1, 2]", "m/config.json").error_message(), "m/config.json: not a JSON object");
}

using model_config_files = temp_dir_test;

TEST_F(model_config_files, folder_missing) {
  auto r = load_model_config(dir_ / "nope");
  EXPECT_EQ(r.error_message(), "model folder '" + (dir_ / "nope").string() + "' does not exist");
}

TEST_F(model_config_files, no_config_json) {
  EXPECT_EQ(load_model_config(dir_).error_message(), "no config.json in model folder '" + dir_.string() + "'");
}

TEST_F(model_config_files, malformed_json) {
  write("config.json", R"({"vocab_size": 10,)");
  EXPECT_THAT(load_model_config(dir_).error_message(),
              StartsWith((dir_ / "config.json").string() + ": not valid JSON ("));
}

TEST_F(model_config_files, unsupported_architecture) {
  write("config.json", to_json(with(llama_fields(), "architectures", R"(["GPT2LMHeadModel"])")));
  EXPECT_EQ(load_model_config(dir_).error_message(),
            "unsupported architecture 'GPT2LMHeadModel' in " + (dir_ / "config.json").string() +
                " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM)");
}

TEST(model_config_fixture, mixture_of_experts) {
  auto q = load_model_config(fs::path(TROUPE_TEST_DATA) / "moe" / "tiny-qwen3-moe");
  ASSERT_TRUE(q.ok()) << q.error_message();
  EXPECT_EQ(q->moe.num_experts, 8);
  EXPECT_EQ(q->moe.top_k, 2);
  EXPECT_EQ(q->moe.intermediate, 64);
  EXPECT_TRUE(q->moe.renormalize);
  EXPECT_FALSE(q->moe.mixtral_names);
  EXPECT_TRUE(q->qk_norm);
  EXPECT_TRUE(is_moe_layer(*q, 0) && is_moe_layer(*q, 2));
  auto m = load_model_config(fs::path(TROUPE_TEST_DATA) / "moe" / "tiny-mixtral");
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_EQ(m->moe.num_experts, 4);
  EXPECT_EQ(m->moe.intermediate, 192);  // Mixtral's experts are intermediate_size wide
  EXPECT_TRUE(m->moe.renormalize && m->moe.mixtral_names);
  EXPECT_FALSE(m->qk_norm);
  EXPECT_EQ(q->moe.shared_intermediate, 0);
  EXPECT_EQ(m->moe.shared_intermediate, 0);
  // Qwen2-MoE (transformers 5's config.json: qkv_bias, sliding_window 0 with
  // use_sliding_window false): q/k/v biases, no q/k norm, top-k weights not
  // renormalised, layer 1 dense (mlp_only_layers), a shared expert of 96.
  auto q2 = load_model_config(fs::path(TROUPE_TEST_DATA) / "moe" / "tiny-qwen2-moe");
  ASSERT_TRUE(q2.ok()) << q2.error_message();
  EXPECT_EQ(q2->model_type, "qwen2_moe");
  EXPECT_TRUE(q2->attention_bias);
  EXPECT_FALSE(q2->qk_norm || q2->moe.renormalize || q2->moe.mixtral_names);
  EXPECT_EQ(q2->moe.num_experts, 8);
  EXPECT_EQ(q2->moe.intermediate, 64);
  EXPECT_EQ(q2->moe.shared_intermediate, 96);
  EXPECT_EQ(q2->intermediate_size, 256);
  EXPECT_TRUE(is_moe_layer(*q2, 0) && !is_moe_layer(*q2, 1) && is_moe_layer(*q2, 2));
  EXPECT_TRUE(has_dense_mlp(*q2));
  // Its shared expert's size is required; a hub config without qkv_bias
  // still has the biases.
  fields f2 = with(with(with(qwen_fields("Qwen2MoeForCausalLM"), "num_experts", "4"), "num_experts_per_tok", "2"),
                   "moe_intermediate_size", "32");
  EXPECT_EQ(parse_error(f2), "m/config.json: missing 'shared_expert_intermediate_size'");
  auto hub = parse(with(f2, "shared_expert_intermediate_size", "48"));
  ASSERT_TRUE(hub.ok()) << hub.error_message();
  EXPECT_TRUE(hub->attention_bias);
  EXPECT_EQ(hub->moe.shared_intermediate, 48);
  EXPECT_FALSE(parse(with(with(f2, "shared_expert_intermediate_size", "48"), "qkv_bias", "false"))->attention_bias);
  // decoder_sparse_step and mlp_only_layers, as transformers reads them.
  model_config c = *q;
  c.moe.sparse_step = 2;
  c.moe.mlp_only_layers = {3};
  EXPECT_FALSE(is_moe_layer(c, 0));
  EXPECT_TRUE(is_moe_layer(c, 1));
  EXPECT_FALSE(is_moe_layer(c, 3));
  EXPECT_TRUE(is_moe_layer(c, 5));
  EXPECT_FALSE(is_moe_layer(*load_model_config(k_models / "tiny-llama"), 0));
}

TEST_F(model_config_files, generation_config_eos_merged) {
  write("config.json", to_json(with(llama_fields(), "eos_token_id", "[2, 5]")));
  write("generation_config.json", R"({"eos_token_id": [5, 7, 2]})");
  auto c = load_model_config(dir_);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 5, 7));

  write("config.json", to_json(with(llama_fields(), "eos_token_id", "128001")));
  write("generation_config.json", R"({"eos_token_id": 128009})");
  c = load_model_config(dir_);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128009));
}

TEST_F(model_config_files, generation_config_malformed) {
  write("config.json", to_json(llama_fields()));
  write("generation_config.json", "{oops");
  EXPECT_THAT(load_model_config(dir_).error_message(),
              StartsWith((dir_ / "generation_config.json").string() + ": not valid JSON ("));
}

}  // namespace
}  // namespace troupe
