// kv_cache_dtype fp8 (the FP8 KV cache, issue 24) on the CPU backend: the
// key's validation, the KV budget (a quarter of float32's bytes: four times
// the blocks; on cuda half of bf16's, and head dims of multiples of 16), the
// per-layer scales read from a checkpoint (vLLM's k_scale / v_scale names;
// a malformed one is an error naming it), and the logits' consistency with
// the float cache through `troupe eval kl` (tiny-llama: KL mean 5.2e-3,
// argmax agreement 0.96 when written; the bounds are a few times looser).
#include <gtest/gtest.h>

#include <simdjson.h>

#include "actors/engine.h"
#include "config/config_loader.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "tests/cli/cli_runner.h"
#include "tests/model/checkpoint_copy.h"

namespace troupe {
namespace {

namespace sw = safetensors_writing;
namespace fs = std::filesystem;

bool has_problem(const std::vector<std::string>& problems, const std::string& text) {
  for (const std::string& p : problems) {
    if (p.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(fp8_kv_cache, validation_and_budgets) {
  engine_config c;
  c.model = testing::model_dir("tiny-llama");
  c.kv_cache_dtype = "fp8_e5m2";
  EXPECT_TRUE(has_problem(validate_config(c, nullptr), "kv_cache_dtype: 'fp8_e5m2' is not supported"));
  c.kv_cache_dtype = "int8";
  EXPECT_TRUE(has_problem(validate_config(c, nullptr), "kv_cache_dtype: 'int8' is not one of auto, fp8, fp8_e4m3"));
  for (const char* ok : {"auto", "fp8", "fp8_e4m3"}) {
    c.kv_cache_dtype = ok;
    EXPECT_FALSE(has_problem(validate_config(c, nullptr), "kv_cache_dtype")) << ok;
  }

  model_config m;
  m.num_hidden_layers = 2;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.max_position_embeddings = 4096;
  c.cpu_kvcache_space = 1.0 / 1024;  // 1 MiB
  c.max_num_seqs = 256;
  c.max_model_len = 200;
  c.kv_cache_dtype = "auto";
  auto f32 = derive_engine_limits(c, m);
  ASSERT_TRUE(f32.ok()) << f32.error_message();
  c.kv_cache_dtype = "fp8";
  auto fp8 = derive_engine_limits(c, m);
  ASSERT_TRUE(fp8.ok()) << fp8.error_message();
  EXPECT_EQ(f32->kv_bytes_per_block, 8192);  // 2 x 2 layers x 16 tokens x 2 heads x 16 x 4 bytes
  EXPECT_EQ(fp8->kv_bytes_per_block, 2048);
  EXPECT_EQ(fp8->num_blocks - 1, 4 * (f32->num_blocks - 1));
  EXPECT_TRUE(fp8->fp8_kv_cache);
  // The cuda backend: one byte an element against bf16's two (the memory
  // plan then holds twice the tokens); head dims of multiples of 16 only.
  c.dtype = "bfloat16";
  auto cuda = derive_engine_limits(c, m, /*cuda=*/true);
  ASSERT_TRUE(cuda.ok()) << cuda.error_message();
  EXPECT_EQ(cuda->kv_bytes_per_block, 2048);
  c.kv_cache_dtype = "auto";
  auto cuda_bf16 = derive_engine_limits(c, m, /*cuda=*/true);
  ASSERT_TRUE(cuda_bf16.ok()) << cuda_bf16.error_message();
  EXPECT_EQ(cuda_bf16->kv_bytes_per_block, 2 * cuda->kv_bytes_per_block);
  c.kv_cache_dtype = "fp8";
  m.head_dim = 40;
  auto odd = derive_engine_limits(c, m, /*cuda=*/true);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error_message().find("kv_cache_dtype: 'fp8' on the cuda backend needs head_dim a multiple of 16 "
                                     "(this model's is 40"),
            std::string::npos)
      << odd.error_message();
}

// tiny-llama with a scale tensor for layer 0's K and V (float32 copies of
// every tensor), and `extra` tensors.
void write_scaled(const fs::path& dir, const std::vector<sw::raw_tensor>& extra) {
  const std::string fixture = testing::model_dir("tiny-llama");
  std::vector<sw::raw_tensor> tensors = sw::float32_copy(fixture);
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  fs::create_directories(dir);
  sw::write_safetensors(dir / "model.safetensors", tensors);
  fs::copy_file(fs::path(fixture) / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
}

result<std::unique_ptr<llama_model>> load(const fs::path& dir, cpu_ops& backend) {
  auto cfg = load_model_config(dir);
  if (!cfg) return std::move(cfg).take_error();
  auto ckpt = checkpoint::open(dir);
  if (!ckpt) return std::move(ckpt).take_error();
  weight_source source;
  source.ckpt = &ckpt.value();
  return llama_model::create(cfg.value(), backend, source, 16, 64);
}

TEST(fp8_kv_cache, scales_come_from_the_checkpoint) {
  const testing::temp_dir dir("fp8-kv");
  write_scaled(dir.path() / "scaled", {{"model.layers.0.self_attn.k_scale", "F32", {}, sw::f32_bytes({0.5f})},
                                       {"model.layers.0.self_attn.v_scale", "F32", {1}, sw::f32_bytes({2.0f})}});
  cpu_ops backend;
  auto model = load(dir.path() / "scaled", backend);
  ASSERT_TRUE(model.ok()) << model.error_message();
  EXPECT_EQ((*model)->kv_scales(0), std::make_pair(0.5f, 2.0f));
  EXPECT_EQ((*model)->kv_scales(1), std::make_pair(1.0f, 1.0f));  // none in the checkpoint

  write_scaled(dir.path() / "two", {{"model.layers.1.self_attn.v_scale", "F32", {2}, sw::f32_bytes({1.0f, 2.0f})}});
  auto two = load(dir.path() / "two", backend);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error_message(), "tensor 'model.layers.1.self_attn.v_scale' in model.safetensors should hold one scale");
  write_scaled(dir.path() / "negative", {{"model.layers.0.self_attn.k_scale", "F32", {}, sw::f32_bytes({-1.0f})}});
  auto negative = load(dir.path() / "negative", backend);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error_message(),
            "tensor 'model.layers.0.self_attn.k_scale' in model.safetensors is not a positive scale");
}

TEST(fp8_kv_cache, logits_stay_close_to_the_float_cache) {
  const testing::temp_dir dir("fp8-kv-eval");
  const std::string json = (dir.path() / "kl.json").string();
  auto r = testing::run_troupe({"eval", "kl", "--model", testing::model_dir("tiny-llama"), "--compare",
                                "kv_cache_dtype=fp8", "--num-prompts", "16", "--input-len", "64",
                                "--output-len", "32", "--json-out", json});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(json);
  const double mean = doc["kl_mean"], agree = doc["argmax_agreement"];
  EXPECT_GT(mean, 0.0);  // the cache is rounded: not the same numbers
  EXPECT_LT(mean, 0.03) << r.out;
  EXPECT_GT(agree, 0.85) << r.out;
}

}  // namespace
}  // namespace troupe
