// Speculative decoding at the worker (model_runner on the CPU backend,
// tiny-llama), with the plans written here so that the drafts are chosen by
// the test:
// - the output distribution: sampled tokens with drafts verified keep the
//   target model's distribution (a chi-square bound over the first three
//   tokens), and the test catches a broken acceptance rule (the
//   TROUPE_DEBUG_SPEC_ACCEPT_ALL hook);
// - rollback: after any mix of accepted and rejected drafts, the tokens and
//   the KV cache at every verified position equal a run without drafts,
//   with freed blocks reused (stale KV from rejected drafts in them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "actors/worker/model_runner.h"
#include "tests/actors/fixture_runner.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_config.h"
#include "model/weights.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

constexpr int64_t block_size = 16;

std::unique_ptr<model_runner> make_runner(int64_t num_blocks) {
  runner_limits rl;
  rl.max_num_batched_tokens = 2048;
  rl.max_num_seqs = 128;
  rl.max_model_len = 256;
  rl.block_size = block_size;
  rl.num_blocks = num_blocks;
  rl.num_speculative_tokens = 4;
  return testing::cpu_fixture_runner(std::string(TROUPE_TEST_DATA) + "/models/tiny-llama", rl);
}

const std::vector<int32_t> prompt = {11, 402, 33, 874, 45, 516, 207, 98};

sampling_params sampled_params() {
  sampling_params p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.logprobs = 2;  // the raw distribution's top two: the reference
  p.max_tokens = 16;
  return p;
}

// The sampler's distribution over a row's top two (temperature 1: the
// kept set's softmax), from its logprobs.
std::map<int32_t, double> top2_distribution(const token_logprobs& lp) {
  const double a = std::exp(lp.top_logprobs.at(0)), b = std::exp(lp.top_logprobs.at(1));
  return {{lp.top_ids[0], a / (a + b)}, {lp.top_ids[1], b / (a + b)}};
}

// One sampled token for each history (prompt + prefix), with its logprobs:
// the reference distributions, computed without drafts.
std::vector<token_logprobs> reference_rows(const std::vector<std::vector<int32_t>>& histories) {
  auto runner = make_runner(2 + static_cast<int64_t>(histories.size()));
  step_plan plan;
  plan.step_id = 1;
  for (size_t i = 0; i < histories.size(); ++i) {
    new_request_data d;
    d.id = 1 + i;
    d.token_ids = histories[i];
    d.num_prompt_tokens = static_cast<int64_t>(histories[i].size());
    d.params = sampled_params();
    d.block_ids = {static_cast<int32_t>(1 + i)};
    d.num_scheduled_tokens = d.num_prompt_tokens;
    plan.new_requests.push_back(d);
    plan.total_num_scheduled_tokens += d.num_scheduled_tokens;
  }
  const step_output out = runner->execute(plan);
  std::vector<token_logprobs> rows;
  for (const sampled_output& o : out.outputs) rows.push_back(o.logprobs.at(0));
  return rows;
}

// Samples the first three tokens of `runs` requests (seeds 0..runs-1): the
// first from the prompt, then one step verifying two drafts (chosen from the
// first token: the likelier and the less likely reference token), then, for
// requests that got fewer than three tokens, plain decode steps.
std::map<std::vector<int32_t>, int64_t> sample_paths(
    int64_t runs, const std::map<int32_t, std::pair<int32_t, int32_t>>& drafts_after) {
  constexpr int64_t batch = 125;
  auto runner = make_runner(batch + 2);
  std::map<std::vector<int32_t>, int64_t> counts;
  int64_t step_id = 0;
  std::vector<request_id> last_ids;
  for (int64_t first = 0; first < runs; first += batch) {
    step_plan prefill;
    prefill.step_id = ++step_id;
    prefill.finished_ids = last_ids;
    last_ids.clear();
    for (int64_t i = 0; i < batch; ++i) {
      new_request_data d;
      d.id = static_cast<request_id>(1 + first + i);
      d.token_ids = prompt;
      d.num_prompt_tokens = static_cast<int64_t>(prompt.size());
      d.params = sampled_params();
      d.seed = static_cast<uint64_t>(first + i);
      d.block_ids = {static_cast<int32_t>(1 + i)};
      d.num_scheduled_tokens = d.num_prompt_tokens;
      prefill.new_requests.push_back(d);
      last_ids.push_back(d.id);
    }
    std::map<request_id, std::vector<int32_t>> tokens;
    for (const sampled_output& o : runner->execute(prefill).outputs) tokens[o.id] = o.token_ids;
    step_plan verify;
    verify.step_id = ++step_id;
    for (auto& [id, t] : tokens) {
      cached_request_data d;
      d.id = id;
      const auto& [x1, x2] = drafts_after.at(t.at(0));
      d.spec_token_ids = {x1, x2};
      d.num_scheduled_tokens = 3;
      verify.cached_requests.push_back(d);
    }
    for (const sampled_output& o : runner->execute(verify).outputs) {
      EXPECT_EQ(o.num_draft_tokens, 2);
      auto& t = tokens[o.id];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
    }
    while (true) {
      step_plan decode;
      decode.step_id = ++step_id;
      for (auto& [id, t] : tokens) {
        if (t.size() < 3) decode.cached_requests.push_back({id, {}, 1, {}, {}, {}, {}});
      }
      if (decode.cached_requests.empty()) break;
      for (const sampled_output& o : runner->execute(decode).outputs) {
        tokens[o.id].push_back(o.token_ids.at(0));
      }
    }
    for (auto& [id, t] : tokens) ++counts[{t[0], t[1], t[2]}];
  }
  return counts;
}

// Pearson's chi-square of the sampled paths against the reference
// probabilities of all top-2 paths (8 cells, 7 degrees of freedom).
struct path_test {
  std::map<std::vector<int32_t>, double> expected;  // path -> probability
  std::map<int32_t, std::pair<int32_t, int32_t>> drafts_after;
};

path_test reference_paths() {
  path_test t;
  const auto p0 = top2_distribution(reference_rows({prompt})[0]);
  std::vector<std::vector<int32_t>> h1;
  for (const auto& [v, _] : p0) {
    h1.push_back(prompt);
    h1.back().push_back(v);
  }
  const auto rows1 = reference_rows(h1);
  std::vector<std::vector<int32_t>> h2;
  for (size_t i = 0; i < h1.size(); ++i) {
    for (const auto& [w, _] : top2_distribution(rows1[i])) {
      h2.push_back(h1[i]);
      h2.back().push_back(w);
    }
  }
  const auto rows2 = reference_rows(h2);
  for (size_t j = 0; j < h2.size(); ++j) {
    const int32_t v = h2[j][prompt.size()], w = h2[j][prompt.size() + 1];
    const auto p1 = top2_distribution(rows1[j / 2]);
    for (const auto& [u, pu] : top2_distribution(rows2[j])) {
      t.expected[{v, w, u}] = p0.at(v) * p1.at(w) * pu;
    }
  }
  // Drafts after v: the likelier second token, then the less likely third.
  for (size_t i = 0; i < h1.size(); ++i) {
    const token_logprobs& r1 = rows1[i];
    const token_logprobs& r2 = rows2[2 * i];  // its history ends with r1's best
    t.drafts_after[h1[i].back()] = {r1.top_ids[0], r2.top_ids[1]};
  }
  return t;
}

double chi_square(const path_test& ref, const std::map<std::vector<int32_t>, int64_t>& counts,
                  int64_t runs) {
  double chi = 0;
  for (const auto& [path, p] : ref.expected) {
    const double e = p * static_cast<double>(runs);
    const auto it = counts.find(path);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    chi += (o - e) * (o - e) / e;
  }
  for (const auto& [path, n] : counts) {
    if (ref.expected.count(path) == 0) chi += 1e9;  // a path the target never produces
  }
  return chi;
}

TEST(spec_decode, sampled_tokens_keep_the_target_distribution) {
  const path_test ref = reference_paths();
  ASSERT_EQ(ref.expected.size(), 8u);
  constexpr int64_t runs = 2000;
  // 7 degrees of freedom: P(chi2 > 24.32) = 0.001. The seeds are fixed, so
  // the statistic is the same every run.
  constexpr double bound = 24.32;
  const auto counts = sample_paths(runs, ref.drafts_after);
  const double chi = chi_square(ref, counts, runs);
  EXPECT_LT(chi, bound);
  std::printf("chi-square %.2f (bound %.2f)\n", chi, bound);
  // Drafts were both accepted and rejected.
  int64_t accepted_first = 0;
  for (const auto& [path, n] : counts) {
    if (path[1] == ref.drafts_after.at(path[0]).first) accepted_first += n;
  }
  EXPECT_GT(accepted_first, runs / 10);
  EXPECT_LT(accepted_first, runs);

  // A broken rule (every draft accepted) must fail the same bound.
  setenv("TROUPE_DEBUG_SPEC_ACCEPT_ALL", "1", 1);
  const auto broken = sample_paths(runs, ref.drafts_after);
  unsetenv("TROUPE_DEBUG_SPEC_ACCEPT_ALL");
  const double chi_broken = chi_square(ref, broken, runs);
  EXPECT_GT(chi_broken, bound);
  std::printf("chi-square with every draft accepted: %.3g\n", chi_broken);
}

// The KV rows of a sequence's first n positions, K then V, every layer.
std::vector<float> kv_rows(model_runner& runner, const std::vector<int32_t>& blocks, int64_t n) {
  std::vector<float> out;
  for (const kv_cache_layer& layer : runner.kv_cache()) {
    for (const tensor* t : {&layer.k, &layer.v}) {
      std::vector<float> all(static_cast<size_t>(t->numel()));
      runner.backend().download(*t, all.data());
      const int64_t cols = t->cols;
      for (int64_t p = 0; p < n; ++p) {
        const int64_t slot = blocks[static_cast<size_t>(p / block_size)] * block_size + p % block_size;
        out.insert(out.end(), all.begin() + slot * cols, all.begin() + (slot + 1) * cols);
      }
    }
  }
  return out;
}

TEST(spec_decode, rollback_leaves_the_kv_cache_as_without_drafts) {
  constexpr int64_t num_outputs = 60;
  sampling_params greedy;
  greedy.temperature = 0;
  greedy.max_tokens = num_outputs;
  // Without drafts: the reference tokens and KV.
  auto plain = make_runner(16);
  std::vector<int32_t> plain_blocks;
  for (int32_t b = 1; b <= 6; ++b) plain_blocks.push_back(b);
  new_request_data d;
  d.id = 1;
  d.token_ids = prompt;
  d.num_prompt_tokens = static_cast<int64_t>(prompt.size());
  d.params = greedy;
  d.block_ids = plain_blocks;
  d.num_scheduled_tokens = d.num_prompt_tokens;
  step_plan plan;
  plan.step_id = 1;
  plan.new_requests = {d};
  std::vector<int32_t> want = plain->execute(plan).outputs.at(0).token_ids;
  while (static_cast<int64_t>(want.size()) < num_outputs) {
    step_plan next;
    next.step_id = static_cast<int64_t>(want.size()) + 1;
    next.cached_requests.push_back({1, {}, 1, {}, {}, {}, {}});
    want.push_back(plain->execute(next).outputs.at(0).token_ids.at(0));
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + num_outputs - 1;  // computed

  // With drafts: random mixes of right and wrong tokens, blocks given back
  // after rejections and handed out again (a LIFO free list, so a block
  // that held rejected drafts comes straight back).
  auto spec = make_runner(16);
  std::mt19937 rng(7);
  std::vector<int32_t> free_list = {12, 11, 10, 9, 8, 7, 6, 5, 4, 3};
  std::vector<int32_t> blocks = {1, 2};
  d.block_ids = blocks;
  plan.new_requests = {d};
  std::vector<int32_t> got = spec->execute(plan).outputs.at(0).token_ids;
  int64_t computed = static_cast<int64_t>(prompt.size());
  int64_t step = 1, accepted_total = 0, rejected_total = 0;
  while (static_cast<int64_t>(got.size()) < num_outputs) {
    const auto left = num_outputs - static_cast<int64_t>(got.size());
    const auto k = std::min<int64_t>(1 + static_cast<int64_t>(rng() % 4), left - 1);
    std::vector<int32_t> drafts;
    const auto right = static_cast<int64_t>(rng() % static_cast<uint32_t>(k + 1));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t truth = want[got.size() + static_cast<size_t>(j)];
      drafts.push_back(j < right ? truth : (truth + 1 + static_cast<int32_t>(rng() % 50)) % 1000);
    }
    cached_request_data c;
    c.id = 1;
    c.num_scheduled_tokens = 1 + k;
    c.spec_token_ids = drafts;
    while (static_cast<int64_t>(blocks.size()) * block_size < computed + 1 + k) {
      c.new_block_ids.push_back(free_list.back());
      blocks.push_back(free_list.back());
      free_list.pop_back();
    }
    step_plan next;
    next.step_id = ++step;
    next.cached_requests = {c};
    const sampled_output o = spec->execute(next).outputs.at(0);
    ASSERT_EQ(o.num_draft_tokens, k);
    const auto accepted = static_cast<int64_t>(o.token_ids.size()) - 1;
    EXPECT_EQ(accepted, std::min(right, k)) << "step " << step;
    accepted_total += accepted;
    rejected_total += k - accepted;
    got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
    computed += 1 + accepted;
    // The scheduler's rule: blocks past the verified tokens are given back.
    while (static_cast<int64_t>(blocks.size()) > (computed + block_size - 1) / block_size) {
      free_list.push_back(blocks.back());
      blocks.pop_back();
    }
  }
  ASSERT_EQ(got, want);
  EXPECT_GT(accepted_total, 10);
  EXPECT_GT(rejected_total, 10);
  ASSERT_EQ(computed, total);
  const std::vector<float> a = kv_rows(*plain, plain_blocks, total);
  const std::vector<float> b = kv_rows(*spec, blocks, total);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  // float32: a verified row's K/V comes from a multi-token pass instead of
  // a one-token one (the same values up to summation order).
  EXPECT_LT(worst, 1e-4);
  std::printf("%lld drafts accepted, %lld rejected; largest KV difference %.3g\n", static_cast<long long>(accepted_total), static_cast<long long>(rejected_total), worst);
}

}  // namespace
}  // namespace troupe
