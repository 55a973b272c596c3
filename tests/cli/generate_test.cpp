// `troupe generate` sampling through the whole engine: the sampled
// distribution against the reference (transformers') distribution, seeds
// that reproduce inside mixed batches, top-k 1 = greedy, n > 1, output shape.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"

namespace troupe::testing {
namespace {

std::vector<std::vector<int64_t>> output_ids(const std::string& out) {
  simdjson::dom::parser parser;
  std::vector<std::vector<int64_t>> all;
  for (const std::string& line : split_lines(out)) {
    simdjson::dom::element doc = parser.parse(line);
    for (simdjson::dom::element o : doc["outputs"].get_array()) {
      std::vector<int64_t> ids;
      for (int64_t id : o["token_ids"].get_array()) ids.push_back(id);
      all.push_back(ids);
    }
  }
  return all;
}

run_result run_file(const std::vector<std::string>& lines, std::vector<std::string> extra) {
  const temp_dir dir("gen");
  {
    std::ofstream out(dir / "p.jsonl");
    for (const auto& l : lines) out << l << "\n";
  }
  std::vector<std::string> args = {"generate", "--model", model_dir("tiny-llama"), "--json",
                                   "--prompts-file", (dir / "p.jsonl").string()};
  args.insert(args.end(), extra.begin(), extra.end());
  run_result r = run_troupe(args);
  return r;
}

// Chi-square of seeded first-token draws (temperature 1, no filters) against
// the reference distribution of tiny-llama case 0's first step: its top-5
// probabilities plus the remaining mass as a sixth bucket.
TEST(generate_sampling, first_token_distribution_matches_reference) {
  const auto cases = load_golden(model_dir("tiny-llama") + "/golden.json");
  const golden_case& g = cases[0];
  ASSERT_EQ(g.prompt_ids.size(), 1u);
  const int draws = 4000;
  std::vector<std::string> lines;
  for (int i = 0; i < draws; ++i) {
    lines.push_back("{\"prompt_ids\":[" + std::to_string(g.prompt_ids[0]) +
                    "],\"seed\":" + std::to_string(1000 + i) +
                    ",\"max_tokens\":1,\"temperature\":1.0}");
  }
  const run_result r = run_file(lines, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int64_t, int> counts;
  for (const auto& ids : output_ids(r.out)) {
    ASSERT_EQ(ids.size(), 1u);
    ++counts[ids[0]];
  }
  const step_logprobs& ref = g.steps[0];
  double chi2 = 0.0, rest_p = 1.0;
  int rest_count = draws;
  for (size_t k = 0; k < ref.top_ids.size(); ++k) {
    const double p = std::exp(ref.top_logprobs[k]);
    const double expected = p * draws;
    const int observed = counts[ref.top_ids[k]];
    chi2 += (observed - expected) * (observed - expected) / expected;
    rest_p -= p;
    rest_count -= observed;
  }
  const double expected_rest = rest_p * draws;
  chi2 += (rest_count - expected_rest) * (rest_count - expected_rest) / expected_rest;
  // 5 degrees of freedom; 20.52 is the p = 0.001 critical value.
  EXPECT_LT(chi2, 20.52) << "chi-square " << chi2;
}

TEST(generate_sampling, top_k_one_equals_greedy) {
  const auto cases = load_golden(model_dir("tiny-llama") + "/golden.json");
  const golden_case& g = cases[2];
  std::string ids;
  for (size_t i = 0; i < g.prompt_ids.size(); ++i) ids += (i ? "," : "") + std::to_string(g.prompt_ids[i]);
  const run_result r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--json",
                                   "--prompt-ids", ids, "--max-tokens", "24", "--temperature",
                                   "1.3", "--top-k", "1", "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto outs = output_ids(r.out);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0], g.greedy_ids);
}

TEST(generate_sampling, same_seed_same_output_inside_mixed_batches) {
  const std::string probe =
      "{\"prompt_ids\":[5,17,300,42],\"seed\":1234,\"max_tokens\":16,\"temperature\":0.9,"
      "\"top_p\":0.95}";
  const run_result alone = run_file({probe}, {});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  std::vector<std::string> mixed;
  mixed.push_back(probe);
  for (int i = 0; i < 12; ++i) {
    std::string prompt;
    for (int t = 0; t <= i * 7; ++t) prompt += (t ? "," : "") + std::to_string((t * 31 + i) % 1024);
    mixed.push_back("{\"prompt_ids\":[" + prompt + "],\"seed\":" + std::to_string(i) +
                    ",\"max_tokens\":" + std::to_string(4 + i) + ",\"temperature\":1.2}");
  }
  mixed.push_back(probe);
  const run_result batched = run_file(mixed, {"--max-num-batched-tokens", "40", "--max-num-seqs", "5"});
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  const auto a = output_ids(alone.out);
  const auto b = output_ids(batched.out);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), mixed.size());
  EXPECT_EQ(a[0].size(), 16u);
  EXPECT_EQ(b.front(), a[0]);
  EXPECT_EQ(b.back(), a[0]);
  // A different seed gives a different continuation (with overwhelming odds).
  const run_result other = run_file(
      {"{\"prompt_ids\":[5,17,300,42],\"seed\":99,\"max_tokens\":16,\"temperature\":0.9,"
       "\"top_p\":0.95}"},
      {});
  EXPECT_NE(output_ids(other.out)[0], a[0]);
}

TEST(generate_sampling, n_samples_are_independent_and_reproducible) {
  const std::vector<std::string> args = {"generate", "--model", model_dir("tiny-llama"), "--json",
                                         "--prompt-ids", "3,4,5", "--max-tokens", "12",
                                         "--temperature", "1.5", "--n", "3", "--seed", "7"};
  const run_result r1 = run_troupe(args);
  const run_result r2 = run_troupe(args);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  const auto o1 = output_ids(r1.out);
  ASSERT_EQ(split_lines(r1.out).size(), 1u);
  ASSERT_EQ(o1.size(), 3u);
  EXPECT_EQ(o1, output_ids(r2.out));
  EXPECT_NE(o1[0], o1[1]);
  EXPECT_EQ(stats_value(r1.err, "requests"), 3);
  EXPECT_EQ(stats_value(r1.err, "generated_tokens"), 36);
}

TEST(generate_output, json_shape_and_stats_line) {
  const run_result r = run_troupe({"generate", "--model", model_dir("tiny-qwen2"), "--json",
                                   "--prompt-ids", "1,2,3", "--max-tokens", "3", "--logprobs",
                                   "2", "--prompt-logprobs", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(split_lines(r.out).at(0));
  EXPECT_EQ(doc["prompt_logprobs"].get_array().size(), 3u);
  EXPECT_TRUE(doc["prompt_logprobs"].at(0).is_null());
  EXPECT_EQ(doc["prompt_logprobs"].at(1)["top_ids"].get_array().size(), 1u);
  simdjson::dom::element out = doc["outputs"].at(0);
  EXPECT_EQ(std::string_view(out["finish_reason"]), "length");
  EXPECT_EQ(out["logprobs"].get_array().size(), 3u);
  EXPECT_EQ(out["logprobs"].at(0)["top_logprobs"].get_array().size(), 2u);
  const std::string stats = stats_line(r.err);
  // Three steps (the prefill and two decodes), none planned ahead: async
  // scheduling is on by default only where launches are asynchronous (cuda).
  EXPECT_EQ(stats.rfind("stats: requests=1 prompt_tokens=3 generated_tokens=3 preemptions=0 "
                        "recomputed_tokens=0 swapped_blocks=0 preempted_s=0.000 prefix_cache_hit_rate=0.0000 "
                        "steps=3 steps_ahead=0 elapsed_s=", 0),
            0u)
      << r.err;
  // The stats line is the last line on stderr.
  EXPECT_EQ(split_lines(r.err).back(), stats);
}

}  // namespace
}  // namespace troupe::testing
