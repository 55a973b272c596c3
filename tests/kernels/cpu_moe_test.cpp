// Mixture-of-experts on the CPU (kernels/cpu/cpu_moe.h): the router on
// hand-computed cases (softmax, top-k, ties to the lower expert,
// renormalisation on and off), and the experts' weighted sum on a case
// small enough to write out.
#include "kernels/cpu/cpu_moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace troupe {
namespace {

TEST(cpu_moe, route_picks_the_top_k_of_the_softmax) {
  // Softmax of log(1..4) is 0.1, 0.2, 0.3, 0.4.
  const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  int32_t ids[2];
  float w[2];
  moe_route(logits.data(), 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 0.4f, 1e-6f);
  EXPECT_NEAR(w[1], 0.3f, 1e-6f);
  moe_route(logits.data(), 4, 2, true, ids, w);  // renormalised: 4/7, 3/7
  EXPECT_NEAR(w[0], 4.0f / 7.0f, 1e-6f);
  EXPECT_NEAR(w[1], 3.0f / 7.0f, 1e-6f);
  // Shifting every logit changes nothing (the softmax is taken stably).
  const std::vector<float> shifted = {logits[0] + 80, logits[1] + 80, logits[2] + 80, logits[3] + 80};
  moe_route(shifted.data(), 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_NEAR(w[0], 0.4f, 1e-6f);
}

TEST(cpu_moe, ties_go_to_the_lower_expert) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, 1.0f};
  int32_t ids[2];
  float w[2];
  moe_route(logits.data(), 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  const float p = std::exp(1.0f) / (1.0f + 3.0f * std::exp(1.0f));
  EXPECT_NEAR(w[0], p, 1e-6f);
  EXPECT_NEAR(w[1], p, 1e-6f);
  moe_route(logits.data(), 4, 2, true, ids, w);
  EXPECT_NEAR(w[0], 0.5f, 1e-6f);
  EXPECT_NEAR(w[1], 0.5f, 1e-6f);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

TEST(cpu_moe, experts_are_weighted_and_summed) {
  // h 2, I 1, 3 experts; expert e: gate row g[e], up row u[e], down column d[e].
  const std::vector<float> g = {1, 0, 0, 1, 1, 1}, u = {1, 1, 2, 0, 0, 2}, d = {1, 2, -1, 1, 3, 0};
  std::vector<float> gate_up, down;
  for (int e = 0; e < 3; ++e) {
    gate_up.insert(gate_up.end(), {g[2 * e], g[2 * e + 1], u[2 * e], u[2 * e + 1]});
    down.insert(down.end(), {d[2 * e], d[2 * e + 1]});  // [h, I] = 2 rows of 1
  }
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 1.0f};  // two tokens
  // Token 0 prefers experts 2 then 0; token 1 experts 1 then 2.
  const std::vector<float> router = {std::log(2.0f), std::log(1.0f), std::log(5.0f),
                                     std::log(1.0f), std::log(6.0f), std::log(3.0f)};
  std::vector<float> out(4, 7.0f);
  moe_mlp_f32(x.data(), 2, 2, router.data(), gate_up.data(), down.data(), 3, 1, 2, true, out.data(), 2);
  const auto expert = [&](int e, const float* xt, int j) {
    const float a = silu(g[2 * e] * xt[0] + g[2 * e + 1] * xt[1]) * (u[2 * e] * xt[0] + u[2 * e + 1] * xt[1]);
    return d[2 * e + j] * a;
  };
  for (int j = 0; j < 2; ++j) {
    EXPECT_NEAR(out[j], 5.0f / 7.0f * expert(2, &x[0], j) + 2.0f / 7.0f * expert(0, &x[0], j), 1e-6f);
    EXPECT_NEAR(out[2 + j], 6.0f / 9.0f * expert(1, &x[2], j) + 3.0f / 9.0f * expert(2, &x[2], j), 1e-6f);
  }
  // The routing counts (ops::moe_counts): both tokens, then token 0 alone
  // (token 1's slot -1: a graph's padding), added to what is there.
  std::vector<uint32_t> counts = {1, 0, 0};
  moe_mlp_f32(x.data(), 2, 2, router.data(), gate_up.data(), down.data(), 3, 1, 2, true, out.data(), 2,
              counts.data());
  EXPECT_EQ(counts, (std::vector<uint32_t>{2, 1, 2}));
  const std::vector<int32_t> slots = {5, -1};
  moe_mlp_f32(x.data(), 2, 2, router.data(), gate_up.data(), down.data(), 3, 1, 2, true, out.data(), 2,
              counts.data(), slots.data());
  EXPECT_EQ(counts, (std::vector<uint32_t>{3, 1, 3}));
}

}  // namespace
}  // namespace troupe
