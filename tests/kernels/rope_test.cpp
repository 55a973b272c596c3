// rope_inv_freq / rope_cos_sin against transformers' formulas evaluated here
// in double (_compute_default_rope_parameters, the linear rule, and
// _compute_llama3_parameters).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/rope.h"

namespace troupe {
namespace {

std::vector<double> default_inv_freq(double theta, int64_t head_dim) {
  std::vector<double> out;
  for (int64_t i = 0; i < head_dim; i += 2) {
    out.push_back(1.0 / std::pow(theta, double(i) / head_dim));
  }
  return out;
}

enum class regime { high, medium, low };

// transformers' llama3 rule, in double; also says which regime each falls in.
std::vector<double> llama3_inv_freq(const rope_config& r, int64_t head_dim,
                                    std::vector<regime>* regimes) {
  std::vector<double> out = default_inv_freq(r.theta, head_dim);
  const double old_len = double(r.original_max_position_embeddings);
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  for (double& f : out) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) {
      regimes->push_back(regime::high);
    } else if (wavelen > low_wavelen) {
      f /= r.factor;
      regimes->push_back(regime::low);
    } else {
      const double smooth = (old_len / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      f = (1.0 - smooth) * f / r.factor + smooth * f;
      regimes->push_back(regime::medium);
    }
  }
  return out;
}

void expect_rel_close(const std::vector<float>& got, const std::vector<double>& want,
                      double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i])) << "index " << i;
  }
}

TEST(rope_test, default_inv_freq_matches_transformers) {
  rope_config r;
  r.theta = 10000.0;
  for (int64_t head_dim : {16, 64, 128}) {
    SCOPED_TRACE(head_dim);
    expect_rel_close(rope_inv_freq(r, head_dim), default_inv_freq(1e4, head_dim), 1e-6);
  }
  r.theta = 1e6;
  expect_rel_close(rope_inv_freq(r, 128), default_inv_freq(1e6, 128), 1e-6);
}

TEST(rope_test, linear_divides_every_frequency_by_the_factor) {
  rope_config r;
  r.type = rope_type::linear;
  r.theta = 10000.0;
  r.factor = 4.0;
  std::vector<double> want = default_inv_freq(1e4, 64);
  for (double& f : want) f /= 4.0;
  expect_rel_close(rope_inv_freq(r, 64), want, 1e-6);
}

TEST(rope_test, llama3_matches_transformers_in_all_three_regimes) {
  rope_config r;  // Llama 3.1's rope_scaling
  r.type = rope_type::llama3;
  r.theta = 500000.0;
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 8192;
  std::vector<regime> regimes;
  const std::vector<double> want = llama3_inv_freq(r, 128, &regimes);
  int counts[3] = {0, 0, 0};
  for (regime g : regimes) ++counts[static_cast<int>(g)];
  ASSERT_GT(counts[0], 0);  // the test covers every branch of the rule
  ASSERT_GT(counts[1], 0);
  ASSERT_GT(counts[2], 0);
  const std::vector<float> got = rope_inv_freq(r, 128);
  expect_rel_close(got, want, 2e-6);
  // Spot values worked by hand: j = 0 is untouched, the last is divided by 8.
  EXPECT_FLOAT_EQ(got[0], 1.0f);
  EXPECT_NEAR(got[63], std::pow(500000.0, -126.0 / 128.0) / 8.0, 1e-12);
}

TEST(rope_test, llama3_with_other_factors) {
  rope_config r;
  r.type = rope_type::llama3;
  r.theta = 10000.0;
  r.factor = 32.0;
  r.low_freq_factor = 2.0;
  r.high_freq_factor = 8.0;
  r.original_max_position_embeddings = 1024;
  std::vector<regime> regimes;
  expect_rel_close(rope_inv_freq(r, 64), llama3_inv_freq(r, 64, &regimes), 2e-6);
}

TEST(rope_test, cos_sin_tables_hold_cos_and_sin_of_position_times_frequency) {
  rope_config r;
  r.theta = 10000.0;
  const int64_t head_dim = 32, half = 16, max_pos = 200;
  std::vector<float> c, s;
  rope_cos_sin(r, head_dim, max_pos, c, s);
  ASSERT_EQ(c.size(), static_cast<size_t>(max_pos * half));
  ASSERT_EQ(s.size(), c.size());
  const std::vector<double> inv = default_inv_freq(1e4, head_dim);
  for (int64_t p : {0, 1, 7, 199}) {
    for (int64_t j = 0; j < half; ++j) {
      // The angle is formed in float32 (as transformers does): allow its rounding.
      const double angle = double(p) * inv[j];
      const double tol = 2e-6 + 2.5e-7 * angle;
      EXPECT_NEAR(c[p * half + j], std::cos(angle), tol) << p << "," << j;
      EXPECT_NEAR(s[p * half + j], std::sin(angle), tol) << p << "," << j;
    }
  }
}

}  // namespace
}  // namespace troupe
