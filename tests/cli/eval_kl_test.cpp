// `troupe eval kl` (cli/eval): the arithmetic on hand-computed cases; the
// runner driver against transformers' goldens (tiny-llama on the CPU in
// float32: its greedy continuations are the golden greedy ids, and the
// distributions it scores teacher forced on prompt + greedy ids give the
// golden top-5 logprobs within 1e-3), with prefills chunked to 16 tokens,
// groups split by max_num_seqs and by the KV cache, and decode batches
// padded as CUDA graphs pad them (TROUPE_DEBUG_PAD_DECODE); and the command:
// a comparison that changes nothing numerically reports KL 0 and full
// agreement, tensor x pipeline parallelism (2 x 2 ranks on threads) a KL
// of float32 rounding, another model a large KL, and bad input is a clear
// error (exit 2; stages in other processes: 1).
#include <gtest/gtest.h>

#include <simdjson.h>

#include <cmath>
#include <cstdlib>

#include "cli/eval/kl_stats.h"
#include "cli/eval/runner_driver.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "actors/worker/load_runners.h"
#include "tests/actors/fixture_runner.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"

namespace troupe {
namespace {

using testing::model_dir;
using testing::run_troupe;

TEST(eval_kl_stats, hand_computed) {
  const int64_t n = 2;
  const float even[] = {0.0f, 0.0f}, skewed[] = {std::log(9.0f), 0.0f};  // [.5, .5], [.9, .1]
  const eval::logits_row p = eval::row_of(even, n), q = eval::row_of(skewed, n);
  EXPECT_NEAR(eval::log_prob(p, 0, n), std::log(0.5), 1e-15);
  EXPECT_NEAR(std::exp(eval::log_prob(q, 0, n)), 0.9, 1e-7);
  EXPECT_NEAR(eval::log_prob(q, 1, n), std::log(0.1), 1e-6);
  // KL([.5, .5] || [.9, .1]) = .5 ln(.5 / .9) + .5 ln(.5 / .1), in double
  // from the float32 logits (ln 9 rounded to float32 moves it by ~1e-8).
  EXPECT_NEAR(eval::kl_divergence(p, q, n), 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(5.0), 1e-7);
  EXPECT_EQ(eval::kl_divergence(p, p, n), 0.0);
  EXPECT_NEAR(eval::entropy(p, n), std::log(2.0), 1e-15);
  // Nearly equal distributions: double sums resolve a KL far below float's
  // resolution of log-probabilities (1e-8): logits 0 and 1e-3 against 0 and
  // 1.001e-3 give KL = (1e-6)^2 / 8 = 1.25e-13 (second order).
  const float a[] = {0.0f, 1e-3f}, b[] = {0.0f, 1.001e-3f};
  const double close = eval::kl_divergence(eval::row_of(a, n), eval::row_of(b, n), n);
  const double d = static_cast<double>(b[1]) - static_cast<double>(a[1]);  // the float32 difference
  EXPECT_NEAR(close, d * d / 8, 1e-15) << close;
  // -inf logits have probability 0; all of them (or NaN): uniform.
  const float some_inf[] = {-INFINITY, 1.0f, 1.0f};
  EXPECT_EQ(eval::log_prob(eval::row_of(some_inf, 3), 0, 3), -INFINITY);
  EXPECT_NEAR(eval::log_prob(eval::row_of(some_inf, 3), 1, 3), std::log(0.5), 1e-15);
  const float all_inf[] = {-INFINITY, NAN};
  EXPECT_NEAR(eval::log_prob(eval::row_of(all_inf, 2), 1, 2), std::log(0.5), 1e-15);
  EXPECT_NEAR(eval::entropy(eval::row_of(all_inf, 2), 2), std::log(2.0), 1e-15);
  EXPECT_EQ(eval::argmax(std::vector<float>{1, 3, 3, 2}.data(), 4), 1);

  eval::kl_report r;
  for (int i = 1; i <= 100; ++i) r.add_position(i, i % 4 != 0, i % 2 == 0 ? 1.0 : 2.0);
  EXPECT_DOUBLE_EQ(r.kl_mean(), 50.5);
  EXPECT_DOUBLE_EQ(r.kl_max(), 100);
  EXPECT_DOUBLE_EQ(r.kl_quantile(0.99), 99);
  EXPECT_DOUBLE_EQ(r.kl_quantile(0.5), 50);
  EXPECT_DOUBLE_EQ(r.argmax_agreement(), 0.75);
  EXPECT_DOUBLE_EQ(r.mean_reference_entropy(), 1.5);
  r.add_sequences({1, 2, 3, 4}, {1, 2, 3, 4});
  r.add_sequences({1, 2, 3, 4}, {1, 2, 9, 4});
  r.add_sequences({1, 2, 3, 4}, {7, 2, 3, 4});
  EXPECT_DOUBLE_EQ(r.first_token_agreement(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.sequence_agreement(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(r.common_prefix_fraction(), (1.0 + 0.5 + 0.0) / 3);
}

TEST(eval_kl_driver, greedy_and_teacher_forced_distributions_match_the_goldens) {
  const std::string dir = model_dir("tiny-llama");
  // Prompts of 1, 7, 517, 33 and 130 tokens (that order: the first group
  // is three sequences, whose decode steps pad to the bucket of 4; the
  // 517-token prompt prefills in 33 chunks).
  const auto golden = testing::load_golden(dir + "/golden.json");
  ASSERT_EQ(golden.size(), 5u);
  const std::vector<testing::golden_case> cases = {golden[0], golden[1], golden[4], golden[2], golden[3]};
  std::vector<std::vector<int32_t>> prompts, sequences;
  std::vector<int64_t> first;
  int64_t steps = 0;
  for (const auto& c : cases) {
    prompts.emplace_back(c.prompt_ids.begin(), c.prompt_ids.end());
    steps = static_cast<int64_t>(c.greedy_ids.size());
    ASSERT_EQ(c.greedy_ids.size(), cases[0].greedy_ids.size());
    first.push_back(static_cast<int64_t>(prompts.back().size()));
    sequences.push_back(prompts.back());
    sequences.back().insert(sequences.back().end(), c.greedy_ids.begin(), c.greedy_ids.end());
  }
  engine_limits limits;
  limits.max_num_batched_tokens = 16;  // prompts prefill in chunks
  limits.max_num_seqs = 4;             // decode graphs of 1, 2 and 4 sequences
  limits.max_model_len = 700;
  limits.block_size = 16;
  limits.num_blocks = 40;  // 39 usable: the 541 tokens of the longest take 34, so it goes with two
                           // short ones (2 blocks each), and the others make a second group
  const std::unique_ptr<model_runner> owned = testing::cpu_fixture_runner(dir, runner_limits_of(limits));
  ASSERT_NE(owned, nullptr);
  model_runner& runner = *owned;
  ::setenv("TROUPE_DEBUG_PAD_DECODE", "1", 1);  // decode batches of 3 run as the bucket of 4
  runner.capture_graphs();
  ::unsetenv("TROUPE_DEBUG_PAD_DECODE");
  ASSERT_EQ(runner.graph_sizes(), (std::vector<int64_t>{1, 2, 4}));
  eval::runner_driver driver({&runner}, 1, limits);

  auto greedy = driver.greedy(prompts, steps);
  ASSERT_TRUE(static_cast<bool>(greedy)) << greedy.error_message();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ((*greedy)[i], std::vector<int32_t>(cases[i].greedy_ids.begin(), cases[i].greedy_ids.end()))
        << "case " << i;
  }
  const int64_t vocab = load_model_config(dir)->vocab_size;
  std::vector<std::vector<bool>> seen(cases.size(), std::vector<bool>(static_cast<size_t>(steps), false));
  double worst = 0;
  status s = driver.score(sequences, first, [&](size_t i, int64_t target, const float* logits) {
    ASSERT_LT(i, cases.size());
    const int64_t step = target - first[i];
    ASSERT_GE(step, 0);
    ASSERT_LT(step, steps);
    seen[i][static_cast<size_t>(step)] = true;
    const eval::logits_row row = eval::row_of(logits, vocab);
    const auto& golden = cases[i].steps[static_cast<size_t>(step)];
    for (size_t k = 0; k < golden.top_ids.size(); ++k) {
      worst = std::max(worst, std::fabs(eval::log_prob(row, golden.top_ids[k], vocab) - golden.top_logprobs[k]));
    }
  });
  ASSERT_TRUE(static_cast<bool>(s)) << s.error_message();
  EXPECT_LT(worst, 1e-3);
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int64_t t = 0; t < steps; ++t) EXPECT_TRUE(seen[i][static_cast<size_t>(t)]) << i << " " << t;
  }
  EXPECT_EQ(runner.num_requests(), 0u);  // every group finished

  // A sequence the KV cache cannot hold is an error, not a hang.
  auto too_long = driver.greedy({std::vector<int32_t>(630, 5)}, 20);
  ASSERT_FALSE(static_cast<bool>(too_long));
  EXPECT_NE(too_long.error_message().find("649 tokens, more than the KV cache holds (624)"), std::string::npos)
      << too_long.error_message();
  auto past_max = driver.greedy({std::vector<int32_t>(690, 5)}, 20);
  ASSERT_FALSE(static_cast<bool>(past_max));
  EXPECT_NE(past_max.error_message().find("more than max_model_len 700"), std::string::npos)
      << past_max.error_message();
}

TEST(eval_kl_command, reports_and_errors) {
  const std::string model = model_dir("tiny-llama");
  const testing::temp_dir dir("eval-kl");
  const std::string json = (dir / "kl.json").string();
  // Prefix caching changes no number: KL 0, full agreement.
  auto same = run_troupe({"eval", "kl", "--model", model, "--compare", "enable_prefix_caching=false",
                          "--num-prompts", "4", "--input-len", "20", "--output-len", "6", "--json-out", json});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("Positions: 24 (4 prompts x 6 tokens"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("mean 0.0000e+00, p99 0.0000e+00, max 0.0000e+00"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("Greedy-sequence agreement: 1.0000 identical"), std::string::npos) << same.out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(json);
  EXPECT_EQ(int64_t(doc["positions"]), 24);
  EXPECT_EQ(double(doc["kl_max"]), 0.0);
  EXPECT_EQ(double(doc["argmax_agreement"]), 1.0);

  // Another model of the same vocabulary: far apart.
  auto other = run_troupe({"eval", "kl", "--model", model, "--compare", "model=" + model_dir("tiny-llama-mha"),
                           "--num-prompts", "4", "--input-len", "20", "--output-len", "6", "--json-out", json});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  doc = parser.load(json);
  EXPECT_GT(double(doc["kl_mean"]), 0.1);
  EXPECT_LT(double(doc["argmax_agreement"]), 0.5);

  // Tensor and pipeline parallelism (ranks on threads, as the engine's):
  // the same model up to the order of float32 sums.
  auto parallel = run_troupe({"eval", "kl", "--model", model_dir("tiny-llama"), "--compare",
                              "tensor_parallel_size=2", "--compare", "pipeline_parallel_size=2", "--num-prompts", "4",
                              "--input-len", "20", "--output-len", "6", "--json-out", json});
  ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
  doc = parser.load(json);
  EXPECT_LT(double(doc["kl_max"]), 1e-6);
  EXPECT_EQ(double(doc["sequence_agreement"]), 1.0);
  // Online FP8 on the CPU (each linear's rows quantized to e4m3 at load,
  // computed in float32): near the float model, not it (measured: KL mean
  // 0.066, argmax agreement 0.79).
  auto fp8 = run_troupe({"eval", "kl", "--model", model, "--compare", "quantization=fp8", "--num-prompts", "4",
                         "--input-len", "20", "--output-len", "6", "--json-out", json});
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  doc = parser.load(json);
  EXPECT_GT(double(doc["kl_mean"]), 1e-3);
  EXPECT_LT(double(doc["kl_mean"]), 0.2);
  EXPECT_GT(double(doc["argmax_agreement"]), 0.6);
  // Refused before the reference runs: no "reference done" line.
  auto remote = run_troupe({"eval", "kl", "--model", model, "--compare", "pipeline_parallel_size=2",
                            "--compare", "distributed_port=29511"});
  EXPECT_EQ(remote.exit_code, 1);
  EXPECT_NE(remote.err.find("compared: eval kl runs every pipeline stage in this process"), std::string::npos)
      << remote.err;
  EXPECT_EQ(remote.err.find("reference done"), std::string::npos) << remote.err;
  auto long_output = run_troupe({"eval", "kl", "--model", model, "--max-model-len", "64", "--compare",
                                 "max_model_len=32", "--input-len", "20", "--output-len", "20"});
  EXPECT_EQ(long_output.exit_code, 1);
  EXPECT_NE(long_output.err.find("compared: a prompt and its --output-len take 40 tokens, more than max_model_len 32"),
            std::string::npos)
      << long_output.err;

  auto none = run_troupe({"eval", "kl", "--model", model});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--compare KEY=VALUE is required"), std::string::npos) << none.err;
  auto bad = run_troupe({"eval", "kl", "--model", model, "--compare", "quantization"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("expected KEY=VALUE"), std::string::npos) << bad.err;
  auto unknown = run_troupe({"eval", "kl", "--model", model, "--compare", "max_num_sqs=4"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown flag '--max_num_sqs'"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("max-num-seqs"), std::string::npos) << unknown.err;  // the suggestion
  auto vocab = run_troupe({"eval", "kl", "--model", model, "--compare", "model=" + model_dir("dummy-llama-32k"),
                           "--load-format", "dummy"});
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_NE(vocab.err.find("vocabulary"), std::string::npos) << vocab.err;
}

}  // namespace
}  // namespace troupe
