// The quantized and mixture-of-experts fixtures (tests/data/quant and
// tests/data/moe, copied from ../shared/fixtures: GPTQ 4-bit g64
// symmetric, GPTQ 4-bit act-order asymmetric, AWQ 4-bit g64, block FP8;
// Qwen3-MoE 8 experts top-2 and Mixtral 4 experts top-2) through `troupe
// generate` on the CPU backend: transformers' goldens within 1e-3 (after
// exact dequantization; MoE routed in float32), one prompt at a time and
// all batched with chunked prefill, prefix caching and async scheduling
// on; MoE models across tensor-parallel ranks and with LoRA on their
// attention (against the adapter merged into the weights); a
// quantization_config troupe cannot serve, and LoRA for a MoE model's
// experts, are clear errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"
#include "tests/cli/golden_runs.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tests/model/checkpoint_copy.h"
#include "tests/model/safetensors_writer.h"

namespace troupe::testing {
namespace {

constexpr double tol = 1e-3;  // float32 CPU (../shared/fixtures/QUANT_MOE.md)

// "quant/tiny-..." or "moe/tiny-...".
std::string fixture_dir(const std::string& name) { return std::string(TROUPE_TEST_DATA) + "/" + name; }

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s) {
    if (ch == '-' || ch == '/') ch = '_';
  }
  return s;
}

// The goldens run 24 tokens whatever they are: their greedy paths pass
// through EOS (id 2) here and there.
std::vector<std::string> greedy_args(const std::string& model) {
  return {"generate", "--model", fixture_dir(model), "--max-tokens", "24", "--temperature", "0",
          "--logprobs", "5", "--prompt-logprobs", "0", "--json", "--ignore-eos"};
}

class golden_formats : public ::testing::TestWithParam<std::string> {};

TEST_P(golden_formats, each_case_alone_matches_transformers) {
  expect_golden_cases_alone(greedy_args(GetParam()), fixture_dir(GetParam()) + "/golden.json", GetParam(), tol);
}

// All prompts in one file, a small token budget (prefill in chunks, several
// requests a step), prefix caching (on by default) and async scheduling.
TEST_P(golden_formats, all_cases_batched_with_chunked_prefill_and_async_scheduling) {
  const temp_dir dir("golden-formats");
  expect_golden_cases_chunked_async(greedy_args(GetParam()), fixture_dir(GetParam()) + "/golden.json", dir.path(),
                              GetParam(), tol);
}

INSTANTIATE_TEST_SUITE_P(fixtures, golden_formats,
                         ::testing::Values("quant/tiny-llama-gptq-g64", "quant/tiny-llama-gptq-actorder",
                                           "quant/tiny-qwen2-awq-g64", "quant/tiny-qwen3-fp8-block",
                                           "moe/tiny-qwen3-moe", "moe/tiny-mixtral", "moe/tiny-qwen2-moe"),
                         param_name);

TEST(golden_formats_errors, an_unsupported_quantization_config_is_named_at_start) {
  const temp_dir dir("quant-bad");
  std::ifstream in(fixture_dir("quant/tiny-llama-gptq-g64") + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string bits = "\"bits\": 4";
  ASSERT_NE(config.find(bits), std::string::npos);
  config.replace(config.find(bits), bits.size(), "\"bits\": 3");
  dir.write("config.json", config);
  std::filesystem::create_symlink(fixture_dir("quant/tiny-llama-gptq-g64") + "/model.safetensors",
                                  dir / "model.safetensors");
  const run_result r = run_troupe({"generate", "--model", dir.path().string(), "--prompt-ids", "1,2",
                                   "--max-tokens", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("config.json: 'quantization_config.bits': 3 is not supported (GPTQ: 4 or 8)"),
            std::string::npos) << r.err;
}

// The start-up log says how quantized weights are held (here, on the CPU:
// dequantized, and why), block FP8 and online FP8 each in its words.
TEST(golden_formats_errors, the_start_up_log_names_the_quantization) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", fixture_dir("quant/tiny-qwen3-fp8-block")},
       "fp8 weights (blocks of 128 x 128) dequantized to F32 at load: the backend has no packed products"},
      {{"--model", fixture_dir("models/tiny-llama"), "--quantization", "fp8"},
       "fp8 weights (quantized at load, a scale an output row) dequantized to F32 at load"},
      {{"--model", fixture_dir("quant/tiny-llama-gptq-g64")}, "gptq 4-bit weights dequantized to F32 at load"}};
  for (const auto& [model, line] : cases) {
    std::vector<std::string> args = {"generate", "--prompt-ids", "1,2", "--max-tokens", "2", "--log-level", "info"};
    args.insert(args.end(), model.begin(), model.end());
    const run_result r = run_troupe(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  }
}

// LoRA on a MoE model's attention: a random float32 adapter on q_proj and
// v_proj against the base model with the adapter merged into its weights
// (W + B A, B with the scaling folded in, computed here from the adapter's
// tensors and written as a checkpoint of its own): the same tokens, top-5
// logprobs within 1e-4 (float32 CPU). An adapter for the experts' MLP
// modules is refused, naming the layer.
TEST(golden_formats_moe, attention_lora_matches_the_merged_weights) {
  namespace fs = std::filesystem;
  const std::string base = fixture_dir("moe/tiny-qwen3-moe");
  const temp_dir dir("moe-lora");
  const fs::path adapter = dir.path() / "adapter", merged = dir.path() / "merged";
  const run_result made = run_troupe({"make-lora", "--model", base, "--out", adapter.string(), "--rank", "8",
                                      "--targets", "q_proj,v_proj", "--dtype", "float32", "--b-scale", "0.05",
                                      "--seed", "5"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto cfg = load_model_config(base);
  ASSERT_TRUE(static_cast<bool>(cfg)) << cfg.error_message();
  auto lora = load_lora_adapter("a", adapter, cfg.value(), 8);
  ASSERT_TRUE(static_cast<bool>(lora)) << lora.error_message();
  // The base's tensors, q_proj and v_proj with B A added.
  const std::regex attention(R"(model\.layers\.(\d+)\.self_attn\.([qv])_proj\.weight)");
  int merged_modules = 0;
  const auto tensors = safetensors_writing::float32_copy(
      base, [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& w, auto&) {
        std::smatch m;
        if (!std::regex_match(name, m, attention)) return false;
        const lora_weights& lw = (*lora)->at(std::stoll(m[1].str()),
                                             m[2].str() == "q" ? lora_target::q_proj : lora_target::v_proj);
        const int64_t out = shape[0], in = shape[1], r = lw.rank;
        EXPECT_EQ(r, 8) << name;
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t i = 0; i < in; ++i) {
            double delta = 0;
            for (int64_t k = 0; k < r; ++k) delta += double(lw.b[o * r + k]) * double(lw.a[k * in + i]);
            w[static_cast<size_t>(o * in + i)] += static_cast<float>(delta);
          }
        }
        ++merged_modules;
        return false;  // written as float32, merged
      });
  EXPECT_EQ(merged_modules, 2 * cfg->num_hidden_layers);
  fs::create_directories(merged);
  safetensors_writing::write_safetensors(merged / "model.safetensors", tensors);
  fs::copy_file(fs::path(base) / "config.json", merged / "config.json");
  simdjson::dom::parser parser;
  for (const auto& g : load_golden(base + "/golden.json")) {
    auto run = [&](std::vector<std::string> args) {
      args.insert(args.end(), {"--max-tokens", "8", "--temperature", "0", "--logprobs", "5", "--json",
                               "--ignore-eos", "--prompt-ids", join_ids(g.prompt_ids)});
      const run_result r = run_troupe(args);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      const auto lines = split_lines(r.out);
      EXPECT_EQ(lines.size(), 1u) << r.out;
      return lines.empty() ? std::vector<step_logprobs>{} : parse_output_steps(parser.parse(lines[0]));
    };
    const auto with_lora = run({"generate", "--model", base, "--enable-lora", "--max-lora-rank", "8",
                                "--lora-modules", "a=" + adapter.string(), "--lora", "a"});
    const auto want = run({"generate", "--model", merged.string()});
    const auto plain = run({"generate", "--model", base});
    EXPECT_EQ(compare_steps(want, with_lora, 1e-4), "");
    EXPECT_NE(compare_steps(want, plain, 1e-4), "") << "the adapter changes nothing";
  }
  // The experts take no LoRA: an adapter with MLP modules is refused.
  const fs::path mlp = dir.path() / "mlp";
  fs::create_directories(mlp);
  std::ifstream in(adapter / "adapter_config.json");
  std::string conf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string targets = R"("q_proj", "v_proj")";
  ASSERT_NE(conf.find(targets), std::string::npos) << conf;
  conf.replace(conf.find(targets), targets.size(), R"("gate_proj")");
  std::ofstream(mlp / "adapter_config.json") << conf;
  const std::string module = "base_model.model.model.layers.0.mlp.gate_proj.";
  safetensors_writing::write_safetensors(
      mlp / "adapter_model.safetensors",
      {{module + "lora_A.weight", "F32", {8, cfg->hidden_size}, safetensors_writing::bytes(8 * cfg->hidden_size * 4)},
       {module + "lora_B.weight", "F32", {64, 8}, safetensors_writing::bytes(64 * 8 * 4)}});
  auto bad = load_lora_adapter("m", mlp, cfg.value(), 8);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(bad.error_message().find("layer 0 of Qwen3MoeForCausalLM is a mixture-of-experts layer, whose "
                                     "experts take no LoRA yet (its attention modules q_proj, k_proj, v_proj, "
                                     "o_proj do)"),
            std::string::npos)
      << bad.error_message();
}

// Tensor parallelism over the CPU backend's in-process group: every rank
// holds every expert's slice of the intermediate rows (Qwen3-MoE's 64
// split 32 + 32 and, padded, 22 x 3; Mixtral's 192 as 96 x 2 and 64 x 3;
// Qwen2-MoE's shared expert's 96 as 48 x 2, 32 x 3 and, padded, 20 x 5, its
// dense layer's 256 as 128 x 2 and, padded, 86 x 3), the routers and the shared expert's
// gate replicated, the down products' partial sums all-reduced.
TEST(golden_formats_moe, tensor_parallel_ranks_match_transformers) {
  for (const std::string model : {"moe/tiny-qwen3-moe", "moe/tiny-mixtral", "moe/tiny-qwen2-moe"}) {
    for (const char* t : {"2", "3"}) {
      auto args = greedy_args(model);
      args.push_back("--tensor-parallel-size");
      args.push_back(t);
      expect_golden_cases_alone(args, fixture_dir(model) + "/golden.json", model + " T=" + t, tol);
    }
  }
  // T = 5 pads the shared expert (96 rows as 20 x 5) and the dense layer's
  // 256 (52 x 5), and the KV heads (2 up to 5).
  auto args = greedy_args("moe/tiny-qwen2-moe");
  args.insert(args.end(), {"--tensor-parallel-size", "5"});
  expect_golden_cases_alone(args, fixture_dir("moe/tiny-qwen2-moe") + "/golden.json", "tiny-qwen2-moe T=5", tol);
}

}  // namespace
}  // namespace troupe::testing
