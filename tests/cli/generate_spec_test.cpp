// Speculative decoding keeps sampled outputs exact: every position is drawn
// with the request's own (seed, output index) key and its penalties count
// the drafts before it, so a seeded run gives the same tokens (and the same
// logprobs, up to float32 summation order) with speculation on as off —
// with temperature, top-p, top-k, min-p, presence, frequency and repetition
// penalties, n > 1 and max_tokens, on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

struct sampled {
  std::vector<std::vector<int64_t>> tokens;    // per output
  std::vector<std::vector<double>> logprobs;   // per output, per token
  std::vector<std::string> finish;
};

sampled parse(const std::string& out) {
  sampled s;
  simdjson::dom::parser parser;
  for (const std::string& line : split_lines(out)) {
    simdjson::dom::element doc = parser.parse(line);
    for (simdjson::dom::element o : doc["outputs"].get_array()) {
      s.tokens.emplace_back();
      s.logprobs.emplace_back();
      for (int64_t id : o["token_ids"].get_array()) s.tokens.back().push_back(id);
      for (simdjson::dom::element lp : o["logprobs"].get_array()) {
        s.logprobs.back().push_back(double(lp["logprob"]));
      }
      s.finish.emplace_back(std::string_view(o["finish_reason"]));
    }
  }
  return s;
}

TEST(generate_spec, seeded_sampling_is_the_same_with_speculation) {
  const std::string spec =
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3})";
  for (const std::string model : {"tiny-qwen2", "tiny-llama"}) {
    std::vector<std::string> args = {
        "generate", "--model", model_dir(model), "--prompt-ids", "5,6,7,8,5,6,7,8,5,6",
        "--max-tokens", "80", "--n", "3", "--temperature", "0.7", "--top-p", "0.95",
        "--top-k", "40", "--min-p", "0.01", "--presence-penalty", "0.2",
        "--frequency-penalty", "0.1", "--repetition-penalty", "1.05", "--logprobs", "2",
        "--seed", "11", "--ignore-eos", "--json"};
    const run_result off = run_troupe(args);
    ASSERT_EQ(off.exit_code, 0) << off.err;
    args.insert(args.end(), {"--speculative-config", spec});
    setenv("TROUPE_SPEC_CONTROL", "0", 1);  // every draft verified
    const run_result on = run_troupe(args);
    unsetenv("TROUPE_SPEC_CONTROL");
    ASSERT_EQ(on.exit_code, 0) << on.err;
    EXPECT_GT(stats_value(on.err, "spec_draft_tokens"), 0) << on.err;
    EXPECT_GT(stats_value(on.err, "spec_accepted_tokens"), 0) << on.err;
    const sampled a = parse(off.out), b = parse(on.out);
    ASSERT_EQ(a.tokens.size(), 3u);
    ASSERT_EQ(b.tokens.size(), a.tokens.size());
    for (size_t o = 0; o < a.tokens.size(); ++o) {
      EXPECT_EQ(b.tokens[o], a.tokens[o]) << model << " output " << o;
      EXPECT_EQ(b.finish[o], a.finish[o]);
      ASSERT_EQ(b.logprobs[o].size(), a.logprobs[o].size());
      for (size_t t = 0; t < a.logprobs[o].size(); ++t) {
        EXPECT_NEAR(b.logprobs[o][t], a.logprobs[o][t], 1e-4) << model << " output " << o << " token " << t;
      }
    }
  }
}

// TROUPE_DEBUG_SPEC_REJECT_ALL=1 (the benchmarks' workload of drafts that
// are all proposed and rejected): drafts are verified and none is kept, and
// the greedy output is the one without speculation.
TEST(generate_spec, rejecting_every_draft_keeps_the_output) {
  std::vector<std::string> args = {"generate", "--model", model_dir("tiny-llama"),
                                   "--prompt-ids", "5,6,7,8,5,6,7,8,5,6", "--max-tokens", "40",
                                   "--temperature", "0", "--ignore-eos", "--logprobs", "0", "--json"};
  const run_result off = run_troupe(args);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  args.insert(args.end(), {"--speculative-config",
                           R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1})"});
  setenv("TROUPE_SPEC_CONTROL", "0", 1);
  const run_result accepted = run_troupe(args);
  setenv("TROUPE_DEBUG_SPEC_REJECT_ALL", "1", 1);
  const run_result rejected = run_troupe(args);
  unsetenv("TROUPE_DEBUG_SPEC_REJECT_ALL");
  unsetenv("TROUPE_SPEC_CONTROL");
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err;
  ASSERT_EQ(rejected.exit_code, 0) << rejected.err;
  EXPECT_GT(stats_value(accepted.err, "spec_accepted_tokens"), 0) << accepted.err;
  EXPECT_GT(stats_value(rejected.err, "spec_draft_tokens"), 0) << rejected.err;
  EXPECT_EQ(stats_value(rejected.err, "spec_accepted_tokens"), 0) << rejected.err;
  EXPECT_EQ(parse(rejected.out).tokens, parse(off.out).tokens);
  EXPECT_EQ(parse(accepted.out).tokens, parse(off.out).tokens);
}

}  // namespace
}  // namespace troupe::testing
