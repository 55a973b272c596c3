// The quantized and mixture-of-experts fixtures (tests/data/quant and
// tests/data/moe, copied from ../shared/fixtures: GPTQ 4-bit g64
// symmetric, GPTQ 4-bit act-order asymmetric, AWQ 4-bit g64, block FP8;
// Qwen3-MoE 8 experts top-2 and Mixtral 4 experts top-2) through `troupe
// generate` on the CPU backend: transformers' goldens within 1e-3 (after
// exact dequantization; MoE routed in float32), one prompt at a time and
// all batched with chunked prefill, prefix caching and async scheduling
// on; MoE models across tensor-parallel ranks; a quantization_config troupe
// cannot serve, and LoRA with a MoE model (not supported yet), are clear
// errors at start.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"
#include "tests/cli/golden_runs.h"

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
  const auto cases = load_golden(fixture_dir(GetParam()) + "/golden.json");
  const temp_dir dir("golden-formats");
  {
    std::ofstream out(dir / "prompts.jsonl");
    for (const auto& g : cases) out << "{\"prompt_ids\":[" << join_ids(g.prompt_ids) << "]}\n";
  }
  auto args = greedy_args(GetParam());
  for (const std::string& a : {std::string("--prompts-file"), (dir / "prompts.jsonl").string(),
                               std::string("--max-num-batched-tokens"), std::string("48"),
                               std::string("--max-num-seqs"), std::string("3")}) {
    args.push_back(a);
  }
  setenv("TROUPE_DEBUG_ASYNC_ON_CPU", "1", 1);
  const run_result r = run_troupe(args);
  unsetenv("TROUPE_DEBUG_ASYNC_ON_CPU");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), cases.size()) << r.out;
  EXPECT_GT(stats_value(r.err, "steps_ahead"), 10) << r.err;
  simdjson::dom::parser parser;
  for (size_t c = 0; c < cases.size(); ++c) {
    check_golden_line(cases[c], parser.parse(lines[c]), GetParam() + " batched case " + std::to_string(c), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(fixtures, golden_formats,
                         ::testing::Values("quant/tiny-llama-gptq-g64", "quant/tiny-llama-gptq-actorder",
                                           "quant/tiny-qwen2-awq-g64", "quant/tiny-qwen3-fp8-block",
                                           "moe/tiny-qwen3-moe", "moe/tiny-mixtral"),
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

TEST(golden_formats_errors, a_moe_model_with_lora_says_it_is_not_supported_yet) {
  const run_result lora = run_troupe({"generate", "--model", fixture_dir("moe/tiny-mixtral"), "--prompt-ids", "1,2",
                                      "--max-tokens", "2", "--enable-lora"});
  EXPECT_NE(lora.exit_code, 0);
  EXPECT_NE(lora.err.find("enable_lora: not supported yet with a mixture-of-experts model (MixtralForCausalLM)"),
            std::string::npos) << lora.err;
}

// Tensor parallelism over the CPU backend's in-process group: every rank
// holds every expert's slice of the intermediate rows (Qwen3-MoE's 64
// split 32 + 32 and, padded, 22 x 3; Mixtral's 192 as 96 x 2 and 64 x 3),
// the router replicated, the down products' partial sums all-reduced.
TEST(golden_formats_moe, tensor_parallel_ranks_match_transformers) {
  for (const std::string model : {"moe/tiny-qwen3-moe", "moe/tiny-mixtral"}) {
    for (const char* t : {"2", "3"}) {
      auto args = greedy_args(model);
      args.push_back("--tensor-parallel-size");
      args.push_back(t);
      expect_golden_cases_alone(args, fixture_dir(model) + "/golden.json", model + " T=" + t, tol);
    }
  }
}

}  // namespace
}  // namespace troupe::testing
