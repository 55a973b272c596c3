// The LoRA fixtures' golden outputs (transformers + peft, float32) through
// `troupe generate` on the CPU backend: each adapter's greedy tokens and
// top-5 logprobs per case alone, base requests beside them reproducing
// base_greedy_ids, and one batch mixing every adapter of a base with the
// base itself under the scheduler regimes the dense goldens run (chunked
// prefill with a small budget, fewer adapter slots than adapters, async
// scheduling, decode padded to the graph buckets, prefix caching with the
// same prompts under different adapters, speculative decoding).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"

namespace troupe::testing {
namespace {

constexpr double tol = 1e-3;  // float32 CPU, fixtures README

struct adapter_fixture {
  std::string name, dir, base;
};

const std::vector<adapter_fixture>& adapters() {
  static const std::vector<adapter_fixture> all = {
      {"sql", "tiny-llama-lora-sql", "tiny-llama"},
      {"poet", "tiny-llama-lora-poet", "tiny-llama"},
      {"chat", "tiny-qwen2-lora-chat", "tiny-qwen2"},
  };
  return all;
}

std::string lora_dir(const std::string& dir) { return std::string(TROUPE_TEST_DATA) + "/lora/" + dir; }

// generate on `base` with every fixture adapter of that base served.
std::vector<std::string> lora_args(const std::string& base, int max_loras) {
  std::vector<std::string> args = {"generate",  "--model",       model_dir(base), "--max-tokens",
                                   "16",        "--temperature", "0",             "--logprobs",
                                   "5",         "--json",        "--enable-lora", "--max-loras",
                                   std::to_string(max_loras)};
  for (const adapter_fixture& a : adapters()) {
    if (a.base != base) continue;
    args.push_back("--lora-modules");
    args.push_back(a.name + "=" + lora_dir(a.dir));
  }
  return args;
}

std::vector<int64_t> tokens_of(const std::vector<step_logprobs>& steps) {
  std::vector<int64_t> ids;
  for (const step_logprobs& s : steps) ids.push_back(s.token);
  return ids;
}

class golden_lora : public ::testing::TestWithParam<adapter_fixture> {};

TEST_P(golden_lora, each_case_alone_matches_peft) {
  const adapter_fixture& a = GetParam();
  const auto cases = load_golden(lora_dir(a.dir) + "/golden.json");
  ASSERT_EQ(cases.size(), 3u);
  simdjson::dom::parser parser;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (const bool base : {false, true}) {
      auto args = lora_args(a.base, 1);
      args.insert(args.end(), {"--prompt-ids", join_ids(cases[c].prompt_ids)});
      if (!base) args.insert(args.end(), {"--lora", a.name});
      const run_result r = run_troupe(args);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const auto lines = split_lines(r.out);
      ASSERT_EQ(lines.size(), 1u) << r.out;
      const auto steps = parse_output_steps(parser.parse(lines[0]));
      const std::string where = a.name + " case " + std::to_string(c) + (base ? " (base)" : "");
      if (base) {
        EXPECT_EQ(tokens_of(steps), cases[c].base_greedy_ids) << where;
      } else {
        EXPECT_EQ(compare_steps(cases[c].steps, steps, tol), "") << where;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(adapters, golden_lora, ::testing::ValuesIn(adapters()),
                         [](const auto& info) { return info.param.name; });

// Every case of every adapter of `base`, and each prompt again for the base
// model, in one prompts file (adapters interleaved); each line checked
// against its own golden. Returns stderr.
std::string run_mixed(const std::string& base, int max_loras, const std::vector<std::string>& extra) {
  struct expect {
    std::string what;
    const golden_case* g;
    bool base;
  };
  std::vector<std::vector<golden_case>> goldens;
  std::vector<std::string> names;
  for (const adapter_fixture& a : adapters()) {
    if (a.base != base) continue;
    goldens.push_back(load_golden(lora_dir(a.dir) + "/golden.json"));
    names.push_back(a.name);
  }
  const temp_dir dir("lora");
  std::vector<expect> expects;
  {
    std::ofstream out(dir / "prompts.jsonl");
    for (size_t c = 0; c < goldens[0].size(); ++c) {
      for (size_t a = 0; a < goldens.size(); ++a) {
        const golden_case& g = goldens[a][c];
        out << "{\"prompt_ids\":[" << join_ids(g.prompt_ids) << "],\"lora\":\"" << names[a] << "\"}\n";
        expects.push_back({names[a] + " case " + std::to_string(c), &g, false});
      }
      // The base model on the same prompt: prefix caching must not hand it
      // (or another adapter) an adapter's KV blocks.
      out << "{\"prompt_ids\":[" << join_ids(goldens[0][c].prompt_ids) << "]}\n";
      expects.push_back({"base case " + std::to_string(c), &goldens[0][c], true});
    }
  }
  auto args = lora_args(base, max_loras);
  args.insert(args.end(), {"--prompts-file", (dir / "prompts.jsonl").string()});
  args.insert(args.end(), extra.begin(), extra.end());
  const run_result r = run_troupe(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  EXPECT_EQ(lines.size(), expects.size()) << r.out;
  simdjson::dom::parser parser;
  for (size_t i = 0; i < std::min(lines.size(), expects.size()); ++i) {
    const auto steps = parse_output_steps(parser.parse(lines[i]));
    if (expects[i].base) {
      EXPECT_EQ(tokens_of(steps), expects[i].g->base_greedy_ids) << expects[i].what;
    } else {
      EXPECT_EQ(compare_steps(expects[i].g->steps, steps, tol), "") << expects[i].what;
    }
  }
  return r.err;
}

class golden_lora_mixed : public ::testing::TestWithParam<std::string> {};

TEST_P(golden_lora_mixed, adapters_and_base_in_one_batch) {
  const std::string err = run_mixed(GetParam(), 2, {});
  EXPECT_GT(stats_value(err, "requests"), 0) << err;
}

TEST_P(golden_lora_mixed, one_slot_small_budget_async_padded) {
  // One adapter slot: requests of the other adapter wait (base requests do
  // not); chunked prefill in 48-token chunks, 3 sequences.
  run_mixed(GetParam(), 1, {"--max-num-batched-tokens", "48", "--max-num-seqs", "3"});
  setenv("TROUPE_DEBUG_ASYNC_ON_CPU", "1", 1);
  const std::string err = run_mixed(GetParam(), 1, {"--max-num-batched-tokens", "48", "--max-num-seqs", "3"});
  unsetenv("TROUPE_DEBUG_ASYNC_ON_CPU");
  EXPECT_GT(stats_value(err, "steps_ahead"), 0) << err;
  setenv("TROUPE_DEBUG_PAD_DECODE", "1", 1);
  run_mixed(GetParam(), 2, {"--max-num-seqs", "16"});
  unsetenv("TROUPE_DEBUG_PAD_DECODE");
}

TEST_P(golden_lora_mixed, speculative_decoding_and_preemption) {
  setenv("TROUPE_SPEC_CONTROL", "0", 1);
  std::string err = run_mixed(
      GetParam(), 2,
      {"--speculative-config",
       R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3})"});
  unsetenv("TROUPE_SPEC_CONTROL");
  EXPECT_GT(stats_value(err, "spec_draft_tokens"), 0) << err;
  err = run_mixed(GetParam(), 2,
                  {"--num-gpu-blocks-override", "24", "--max-model-len", "320",
                   "--max-num-batched-tokens", "64", "--max-num-seqs", "8", "--kv-admission", "chunk"});
  EXPECT_GT(stats_value(err, "preemptions"), 0) << err;
}

INSTANTIATE_TEST_SUITE_P(bases, golden_lora_mixed, ::testing::Values("tiny-llama", "tiny-qwen2"),
                         model_param_name);

}  // namespace
}  // namespace troupe::testing
