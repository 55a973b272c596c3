// The CPU sampler against vLLM's definitions: greedy, logprobs, penalties,
// and the sampled distributions (chi-square over many (seed, step) draws
// against the analytic distribution computed here in double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/cpu/sampler.h"
#include "kernels/philox.h"

namespace troupe {
namespace {

// Distinct logits, not sorted by id, so "best" and "lowest id" differ.
const std::vector<float> base_logits = {0.3f, 2.0f,  -1.0f, 1.2f, 0.0f,  1.5f,
                                        -2.0f, 0.5f, 1.0f,  -0.5f, -3.0f, -0.2f};

sampler_row greedy_row() {
  sampler_row r;
  r.temperature = 0.0f;
  return r;
}

int32_t sample(const std::vector<float>& logits, const sampler_row& row) {
  return sample_row(logits.data(), static_cast<int64_t>(logits.size()), row).token_id;
}

// ---- analytic distribution ---------------------------------------------

struct filters {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
};

// softmax(logits / T) -> min_p -> top_k -> top_p (of the renormalized rest),
// as vLLM's sampler applies them.
std::vector<double> expected_distribution(const std::vector<float>& logits, const filters& f) {
  const size_t n = logits.size();
  std::vector<double> p(n);
  const double m = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += (p[i] = std::exp((logits[i] - m) / f.temperature));
  for (double& x : p) x /= z;
  std::vector<bool> keep(n, true);
  const double pmax = *std::max_element(p.begin(), p.end());
  for (size_t i = 0; i < n; ++i) keep[i] = p[i] >= f.min_p * pmax;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  int rank = 0;
  for (size_t i : order) {
    if (keep[i] && f.top_k > 0 && ++rank > f.top_k) keep[i] = false;
  }
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += keep[i] ? p[i] : 0;
  double before = 0;  // kept mass ranked above this token
  for (size_t i : order) {
    if (!keep[i]) continue;
    if (before >= f.top_p) keep[i] = false;
    before += p[i] / kept;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += (p[i] = keep[i] ? p[i] : 0.0);
  for (double& x : p) x /= total;
  return p;
}

std::vector<int64_t> histogram(const std::vector<float>& logits, sampler_row row, int64_t draws,
                               bool vary_step = false) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < draws; ++i) {
    if (vary_step) {
      row.step = static_cast<uint64_t>(i);
    } else {
      row.seed = static_cast<uint64_t>(i);
    }
    ++counts[static_cast<size_t>(sample(logits, row))];
  }
  return counts;
}

// Upper 0.001 quantiles of chi-square, df = 1 .. 40.
const double chi2_crit_001[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                                27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697, 39.252,
                                40.790, 42.312, 43.820, 45.315, 46.797, 48.268, 49.728, 51.179,
                                52.620, 54.052, 55.476, 56.892, 58.301, 59.703, 61.098, 62.487,
                                63.870, 65.247, 66.619, 67.985, 69.346, 70.703, 72.055, 73.402};

struct chi2_result {
  double statistic = 0;
  int df = 0;
  bool impossible_draw = false;  // a token of probability 0 was drawn
  bool passes() const {
    return !impossible_draw && (df == 0 || statistic < chi2_crit_001[df - 1]);
  }
};

// Pearson's statistic; bins expecting fewer than 5 draws are pooled.
chi2_result chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  chi2_result r;
  double pooled_obs = 0, pooled_exp = 0;
  int bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    if (probs[i] == 0.0) {
      r.impossible_draw |= counts[i] > 0;
    } else if (e < 5.0) {
      pooled_obs += double(counts[i]);
      pooled_exp += e;
    } else {
      r.statistic += (counts[i] - e) * (counts[i] - e) / e;
      ++bins;
    }
  }
  if (pooled_exp > 0) {
    r.statistic += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++bins;
  }
  r.df = std::max(bins - 1, 0);
  EXPECT_LE(r.df, 40);
  return r;
}

constexpr int64_t num_draws = 20000;

void expect_distribution(const std::vector<float>& logits, const sampler_row& row,
                         const filters& f, bool vary_step = false) {
  const std::vector<double> probs = expected_distribution(logits, f);
  const chi2_result r = chi_square(histogram(logits, row, num_draws, vary_step), probs);
  EXPECT_FALSE(r.impossible_draw) << "a filtered-out token was sampled";
  EXPECT_TRUE(r.passes()) << "chi-square " << r.statistic << " with df " << r.df;
}

// ---- greedy and determinism ------------------------------------------------

TEST(sampler_test, greedy_is_argmax_with_lowest_id_on_ties) {
  EXPECT_EQ(sample(base_logits, greedy_row()), 1);
  std::vector<float> tied = base_logits;
  tied[7] = tied[3] = 9.0f;
  EXPECT_EQ(sample(tied, greedy_row()), 3);
  sampler_row tiny = greedy_row();
  tiny.temperature = 5e-6f;  // below vLLM's 1e-5: still greedy
  EXPECT_EQ(sample(tied, tiny), 3);
}

TEST(sampler_test, temperature_zero_ignores_seed_and_step) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    sampler_row r = greedy_row();
    r.seed = seed;
    r.step = seed * 7;
    ASSERT_EQ(sample(base_logits, r), 1);
  }
}

TEST(sampler_test, top_k_one_equals_greedy) {
  std::vector<float> tied = base_logits;
  tied[5] = 2.0f;  // ties with id 1
  for (uint64_t seed = 0; seed < 200; ++seed) {
    sampler_row r;
    r.top_k = 1;
    r.seed = seed;
    ASSERT_EQ(sample(base_logits, r), 1);
    ASSERT_EQ(sample(tied, r), 1);
  }
}

TEST(sampler_test, a_vocab_of_one_always_gives_token_zero) {
  const std::vector<float> one = {-4.0f};
  sampler_row r;
  r.top_p = 0.5f;
  r.min_p = 0.5f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    r.seed = seed;
    ASSERT_EQ(sample(one, r), 0);
  }
}

TEST(sampler_test, same_seed_and_step_give_the_same_token_steps_vary) {
  const std::vector<float> flat(8, 0.0f);
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 100; ++step) {
    sampler_row r;
    r.seed = 1234;
    r.step = step;
    const int32_t a = sample(flat, r);
    ASSERT_EQ(sample(flat, r), a);
    seen.insert(a);
  }
  EXPECT_EQ(seen.size(), 8u);  // 100 draws over 8 equal tokens hit them all
  EXPECT_EQ(sampling_uniform(1234, 5, 3), sampling_uniform(1234, 5, 3));
  EXPECT_NE(sampling_uniform(1, 0, 0), sampling_uniform(2, 0, 0));
  EXPECT_NE(sampling_uniform(1, 0, 0), sampling_uniform(1, 1, 0));
  EXPECT_NE(sampling_uniform(1, 0, 0), sampling_uniform(1, 0, 1));
  // The high halves of seed and step are part of the key and counter.
  EXPECT_NE(sampling_uniform(1, 0, 0), sampling_uniform(1 + (uint64_t{1} << 32), 0, 0));
  EXPECT_NE(sampling_uniform(1, 0, 0), sampling_uniform(1, uint64_t{1} << 32, 0));
}

// Random123's known-answer vectors (kat_vectors, "philox4x32 10" lines):
// counter, key -> output.
TEST(sampler_test, philox4x32_10_matches_the_known_answers) {
  struct kat {
    philox_block counter;
    uint32_t key[2];
    uint32_t want[4];
  };
  const kat cases[] = {
      {{{0, 0, 0, 0}}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const kat& c : cases) {
    const philox_block out = philox4x32_10(c.counter, c.key[0], c.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], c.want[i]) << "word " << i;
  }
}

TEST(sampler_test, sampling_uniform_is_uniform_on_the_open_unit_interval) {
  std::vector<int64_t> bins(20, 0);
  for (uint64_t i = 0; i < 40000; ++i) {
    const float u = sampling_uniform(i % 7, i / 7 % 50, static_cast<uint32_t>(i / 350));
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ++bins[static_cast<size_t>(u * 20)];
  }
  const chi2_result r = chi_square(bins, std::vector<double>(20, 0.05));
  EXPECT_TRUE(r.passes()) << r.statistic;
}

TEST(sampler_test, sampling_exponential_is_exp1) {
  // Bins of equal Exp(1) mass: [q_i, q_{i+1}) with q_i = -log(1 - i / 20).
  std::vector<int64_t> bins(20, 0);
  double sum = 0;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    const float e = sampling_exponential(99, static_cast<uint64_t>(i % 100),
                                         static_cast<uint32_t>(i / 100));
    ASSERT_GT(e, 0.0f);
    ASSERT_TRUE(std::isfinite(e));
    sum += e;
    const double cdf = 1.0 - std::exp(-static_cast<double>(e));
    ++bins[std::min<size_t>(static_cast<size_t>(cdf * 20), 19)];
  }
  EXPECT_NEAR(sum / n, 1.0, 0.03);
  const chi2_result r = chi_square(bins, std::vector<double>(20, 0.05));
  EXPECT_TRUE(r.passes()) << r.statistic;
}

// A token's draw depends only on (seed, step, token): tokens the filters
// drop, or that are appended far below, never change the winner.
TEST(sampler_test, the_race_ignores_tokens_outside_the_kept_set) {
  std::vector<float> longer = base_logits;
  for (int i = 0; i < 500; ++i) longer.push_back(-40.0f - 0.01f * static_cast<float>(i));
  for (uint64_t seed = 0; seed < 300; ++seed) {
    sampler_row r;
    r.seed = seed;
    r.step = seed % 5;
    r.top_k = 5;
    const int32_t a = sample(base_logits, r);
    ASSERT_EQ(sample(longer, r), a);
    r.top_k = 0;
    r.min_p = 0.01f;  // drops the appended tail
    ASSERT_EQ(sample(longer, r), sample(base_logits, r));
  }
}

TEST(sampler_test, candidates_are_the_kept_prefix_with_race_weights) {
  sampler_row r;
  r.temperature = 0.8f;
  r.min_p = 0.05f;
  r.top_k = 6;
  r.top_p = 0.7f;
  const sampler_candidate_set c = sampler_candidates(base_logits.data(), 12, r);
  const std::vector<double> p = expected_distribution(base_logits, filters{0.8, 6, 0.7, 0.05});
  ASSERT_EQ(c.ids.size(), static_cast<size_t>(std::count_if(p.begin(), p.end(),
                                                            [](double x) { return x > 0; })));
  ASSERT_EQ(c.weights.size(), c.ids.size());
  EXPECT_EQ(c.ids[0], 1);
  EXPECT_EQ(c.weights[0], 1.0f);  // exp(0) for the best token
  for (size_t j = 0; j < c.ids.size(); ++j) {
    EXPECT_GT(p[static_cast<size_t>(c.ids[j])], 0.0);
    EXPECT_FLOAT_EQ(c.weights[j], std::exp((base_logits[c.ids[j]] - 2.0) / 0.8));
    if (j > 0) {
      EXPECT_LE(c.weights[j], c.weights[j - 1]);
    }
  }
}

// ---- logprobs --------------------------------------------------------------

TEST(sampler_test, logprobs_of_is_log_softmax_with_sorted_top_ids) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37 * i) * 6.0f;
  logits[500] = logits[40] = 9.0f;  // tie at the top: lower id first
  double m = 9.0, z = 0;
  for (float x : logits) z += std::exp(x - m);
  auto lp = [&](size_t i) { return logits[i] - m - std::log(z); };
  const token_logprobs out = logprobs_of(logits.data(), 1000, 17, 5);
  EXPECT_EQ(out.token_id, 17);
  EXPECT_NEAR(out.logprob, lp(17), 1e-5);
  ASSERT_EQ(out.top_ids.size(), 5u);
  ASSERT_EQ(out.top_logprobs.size(), 5u);
  EXPECT_EQ(out.top_ids[0], 40);
  EXPECT_EQ(out.top_ids[1], 500);
  std::vector<size_t> order(1000);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out.top_ids[i], static_cast<int32_t>(order[i]));
    EXPECT_NEAR(out.top_logprobs[i], lp(order[i]), 1e-5);
  }
  EXPECT_TRUE(logprobs_of(logits.data(), 1000, 3, 0).top_ids.empty());
  EXPECT_EQ(logprobs_of(logits.data(), 12, 3, 50).top_ids.size(), 12u);
}

TEST(sampler_test, sampled_logprobs_are_of_the_raw_distribution) {
  sampler_row r;
  r.temperature = 0.5f;
  r.repetition_penalty = 2.0f;
  const int32_t prompt[] = {1};
  r.prompt_ids = prompt;
  r.num_prompt_ids = 1;
  r.num_logprobs = 2;
  r.seed = 9;
  const sample_result s = sample_row(base_logits.data(), 12, r);
  const token_logprobs raw = logprobs_of(base_logits.data(), 12, s.token_id, 2);
  EXPECT_EQ(s.logprobs.token_id, s.token_id);
  EXPECT_FLOAT_EQ(s.logprobs.logprob, raw.logprob);
  EXPECT_EQ(s.logprobs.top_ids, (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(s.logprobs.top_logprobs, raw.top_logprobs);
  r.num_logprobs = -1;
  EXPECT_TRUE(sample_row(base_logits.data(), 12, r).logprobs.top_ids.empty());
}

// ---- penalties -------------------------------------------------------------

TEST(sampler_test, repetition_penalty_divides_positive_and_multiplies_negative_logits) {
  const int32_t seen[] = {0, 0, 0};
  sampler_row r = greedy_row();
  r.repetition_penalty = 2.0f;
  // Applied once per token however often it appears: 4 / 2 = 2 > 1.5.
  r.prompt_ids = seen;
  r.num_prompt_ids = 1;
  r.output_ids = seen;
  r.num_output_ids = 3;
  EXPECT_EQ(sample({4.0f, 1.5f}, r), 0);
  EXPECT_EQ(sample({4.0f, 2.5f}, r), 1);     // 2 < 2.5: flips
  EXPECT_EQ(sample({-0.5f, -0.9f}, r), 1);   // -1.0 < -0.9: flips
  EXPECT_EQ(sample({-0.5f, -1.1f}, r), 0);
  // From the prompt alone, and from the output alone.
  r.num_output_ids = 0;
  EXPECT_EQ(sample({4.0f, 2.5f}, r), 1);
  r.num_prompt_ids = 0;
  r.num_output_ids = 1;
  EXPECT_EQ(sample({4.0f, 2.5f}, r), 1);
  r.num_output_ids = 0;
  EXPECT_EQ(sample({4.0f, 2.5f}, r), 0);
}

TEST(sampler_test, presence_and_frequency_penalties_count_output_tokens_only) {
  const int32_t prompt[] = {0, 0, 0, 0};
  const int32_t output[] = {0, 0, 0};
  sampler_row r = greedy_row();
  r.prompt_ids = prompt;
  r.num_prompt_ids = 4;
  r.presence_penalty = 1.5f;
  EXPECT_EQ(sample({2.0f, 1.0f}, r), 0);  // prompt occurrences do not count
  r.output_ids = output;
  r.num_output_ids = 1;
  EXPECT_EQ(sample({2.0f, 1.0f}, r), 1);  // 2 - 1.5 < 1
  r.presence_penalty = 0.0f;
  r.frequency_penalty = 0.4f;
  r.num_output_ids = 2;
  EXPECT_EQ(sample({2.0f, 1.0f}, r), 0);  // 2 - 0.8 = 1.2
  r.num_output_ids = 3;
  EXPECT_EQ(sample({2.0f, 1.0f}, r), 1);  // 2 - 1.2 = 0.8
  r.presence_penalty = 0.5f;
  r.frequency_penalty = 0.2f;
  r.num_output_ids = 2;
  EXPECT_EQ(sample({2.0f, 1.2f}, r), 1);  // 2 - 0.4 - 0.5 = 1.1
  EXPECT_EQ(sample({2.0f, 1.0f}, r), 0);
  // Negative penalties reward repetition.
  r.presence_penalty = -1.0f;
  r.frequency_penalty = 0.0f;
  EXPECT_EQ(sample({1.0f, 1.5f}, r), 0);
}

TEST(sampler_test, penalized_sampling_follows_the_penalized_distribution) {
  const int32_t prompt[] = {0, 2, 2};
  const int32_t output[] = {1, 1, 4, 7};
  sampler_row r;
  r.repetition_penalty = 1.5f;
  r.presence_penalty = 0.5f;
  r.frequency_penalty = 0.3f;
  r.prompt_ids = prompt;
  r.num_prompt_ids = 3;
  r.output_ids = output;
  r.num_output_ids = 4;
  r.step = 4;
  std::vector<float> penalized = base_logits;
  for (int32_t t : {0, 1, 2, 4, 7}) {
    penalized[t] = penalized[t] > 0 ? penalized[t] / 1.5f : penalized[t] * 1.5f;
  }
  penalized[1] -= 0.5f + 0.3f * 2;
  penalized[4] -= 0.5f + 0.3f;
  penalized[7] -= 0.5f + 0.3f;
  const std::vector<int64_t> counts = histogram(base_logits, r, num_draws);
  const chi2_result right = chi_square(counts, expected_distribution(penalized, filters{}));
  EXPECT_TRUE(right.passes()) << right.statistic;
  // The check can tell: the unpenalized distribution is rejected.
  EXPECT_FALSE(chi_square(counts, expected_distribution(base_logits, filters{})).passes());
}

// ---- logits processors -------------------------------------------------------

TEST(sampler_test, the_mask_bans_every_token_it_does_not_allow) {
  sampler_row r = greedy_row();
  const uint32_t allow_1_and_3 = (1u << 1) | (1u << 3);
  r.allowed_mask = &allow_1_and_3;
  EXPECT_EQ(sample({4.0f, 1.0f, 3.0f, 2.0f}, r), 3);
  EXPECT_EQ(sample({4.0f, 2.5f, 3.0f, 2.0f}, r), 1);
  sampler_row sampled;  // sampling too draws only allowed tokens
  sampled.allowed_mask = &allow_1_and_3;
  for (uint64_t step = 0; step < 200; ++step) {
    sampled.step = step;
    const int32_t t = sample({4.0f, 1.0f, 3.0f, 2.0f}, sampled);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(sampler_test, a_row_with_every_token_banned_is_sampled_unprocessed) {
  sampler_row r = greedy_row();
  const uint32_t allow_2 = 1u << 2;
  const int32_t ids[] = {2};
  const float ban[] = {-std::numeric_limits<float>::infinity()};
  r.allowed_mask = &allow_2;
  r.bias_ids = ids;
  r.bias_values = ban;
  r.num_biases = 1;
  EXPECT_EQ(sample({1.0f, 3.0f, 2.0f}, r), 1);  // as without processors
  sampler_row sampled;
  sampled.allowed_mask = &allow_2;
  sampled.bias_ids = ids;
  sampled.bias_values = ban;
  sampled.num_biases = 1;
  for (uint64_t step = 0; step < 50; ++step) {
    sampled.step = step;
    const int32_t t = sample({1.0f, 3.0f, 2.0f}, sampled);
    ASSERT_TRUE(t >= 0 && t < 3) << t;
  }
}

TEST(sampler_test, biases_add_to_logits_before_the_penalties) {
  sampler_row r = greedy_row();
  const int32_t ids[] = {0, 2};
  const float up[] = {-2.5f, 1.0f};
  r.bias_ids = ids;
  r.bias_values = up;
  r.num_biases = 2;
  EXPECT_EQ(sample({2.0f, 0.0f, 0.5f}, r), 2);  // 2 - 2.5 < 0 < 0.5 + 1
  const float ban[] = {-std::numeric_limits<float>::infinity(), 0.0f};
  r.bias_values = ban;
  EXPECT_EQ(sample({9.0f, 0.0f, -1.0f}, r), 1);
  // vLLM's order: the bias first, then the repetition penalty on the sum
  // (2 + 1 = 3 > 0 is divided: 1.5 < 1.6; penalizing first would give
  // 2 / 2 + 1 = 2 > 1.6).
  const int32_t seen[] = {0};
  const float plus_one[] = {1.0f, 0.0f};
  r.bias_values = plus_one;
  r.repetition_penalty = 2.0f;
  r.output_ids = seen;
  r.num_output_ids = 1;
  EXPECT_EQ(sample({2.0f, 1.6f, 0.0f}, r), 1);
  // The logprobs stay those of the raw logits.
  r.num_logprobs = 1;
  const std::vector<float> logits = {2.0f, 1.6f, 0.0f};
  EXPECT_FLOAT_EQ(sample_row(logits.data(), 3, r).logprobs.logprob,
                  logprobs_of(logits.data(), 3, 1, 1).logprob);
}

// ---- sampled distributions ---------------------------------------------------

TEST(sampler_test, plain_sampling_follows_softmax) {
  expect_distribution(base_logits, sampler_row{}, filters{});
}

TEST(sampler_test, plain_sampling_over_steps_of_one_seed_follows_softmax) {
  sampler_row r;
  r.seed = 77;
  expect_distribution(base_logits, r, filters{}, /*vary_step=*/true);
}

TEST(sampler_test, temperature_half_sharpens_the_distribution) {
  sampler_row r;
  r.temperature = 0.5f;
  filters f;
  f.temperature = 0.5;
  expect_distribution(base_logits, r, f);
  // The same draws do not fit temperature 1.
  EXPECT_FALSE(chi_square(histogram(base_logits, r, num_draws),
                          expected_distribution(base_logits, filters{}))
                   .passes());
}

TEST(sampler_test, top_k_keeps_the_k_most_likely) {
  sampler_row r;
  r.top_k = 3;
  filters f;
  f.top_k = 3;
  expect_distribution(base_logits, r, f);
  r.top_k = -1;  // off
  expect_distribution(base_logits, r, filters{});
}

TEST(sampler_test, top_p_keeps_the_smallest_prefix_reaching_p) {
  sampler_row r;
  r.top_p = 0.8f;  // keeps 5 tokens: the first 4 hold 0.749
  filters f;
  f.top_p = 0.8;
  const std::vector<double> p = expected_distribution(base_logits, f);
  EXPECT_EQ(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }), 5);
  expect_distribution(base_logits, r, f);
}

TEST(sampler_test, min_p_drops_tokens_below_a_share_of_the_best) {
  sampler_row r;
  r.min_p = 0.1f;  // keeps 8 tokens
  filters f;
  f.min_p = 0.1;
  const std::vector<double> p = expected_distribution(base_logits, f);
  EXPECT_EQ(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }), 8);
  expect_distribution(base_logits, r, f);
}

TEST(sampler_test, filters_compose_after_temperature) {
  sampler_row r;
  r.temperature = 0.8f;
  r.min_p = 0.05f;
  r.top_k = 6;
  r.top_p = 0.7f;
  filters f{0.8, 6, 0.7, 0.05};
  expect_distribution(base_logits, r, f);
}

// The race with every filter active over a wider vocabulary: the kept set
// is renormalized, dropped tokens never win. Draws vary the step of one
// seed (the per-token counter), and the seed at a fixed step.
TEST(sampler_test, the_race_with_filters_follows_the_renormalized_kept_set) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>(3.0 * std::sin(1.7 * static_cast<double>(i) + 0.3));
  }
  const struct {
    filters f;
    int expected_kept;
  } cases[] = {
      {{0.9, 12, 1.0, 0.0}, 12},   // top_k
      {{1.1, 0, 0.6, 0.0}, 0},     // top_p
      {{0.7, 0, 1.0, 0.2}, 0},     // min_p
      {{1.3, 15, 0.8, 0.1}, 0},    // all three
  };
  for (const auto& c : cases) {
    sampler_row r;
    r.temperature = static_cast<float>(c.f.temperature);
    r.top_k = c.f.top_k;
    r.top_p = static_cast<float>(c.f.top_p);
    r.min_p = static_cast<float>(c.f.min_p);
    const std::vector<double> p = expected_distribution(logits, c.f);
    const auto kept = std::count_if(p.begin(), p.end(), [](double x) { return x > 0; });
    if (c.expected_kept > 0) {
      EXPECT_EQ(kept, c.expected_kept);
    }
    EXPECT_GT(kept, 3);
    EXPECT_LT(kept, 40);  // the filters do cut
    EXPECT_EQ(static_cast<int64_t>(sampler_candidates(logits.data(), 64, r).ids.size()), kept);
    r.seed = 4242;
    expect_distribution(logits, r, c.f, /*vary_step=*/true);
    r.step = 17;
    expect_distribution(logits, r, c.f);
  }
}

TEST(sampler_test, chi_square_check_rejects_a_skewed_distribution) {
  const std::vector<int64_t> counts = histogram(base_logits, sampler_row{}, num_draws);
  std::vector<double> p = expected_distribution(base_logits, filters{});
  ASSERT_TRUE(chi_square(counts, p).passes());
  std::vector<double> skewed = p;  // 15% more mass on the best token
  skewed[1] *= 1.15;
  const double z = std::accumulate(skewed.begin(), skewed.end(), 0.0);
  for (double& x : skewed) x /= z;
  EXPECT_FALSE(chi_square(counts, skewed).passes());
  std::swap(p[3], p[8]);  // two tokens' probabilities exchanged
  EXPECT_FALSE(chi_square(counts, p).passes());
  std::vector<double> without_one = expected_distribution(base_logits, filters{});
  without_one[10] = 0;  // a token the sampler draws, declared impossible
  EXPECT_TRUE(chi_square(counts, without_one).impossible_draw);
}

}  // namespace
}  // namespace troupe
