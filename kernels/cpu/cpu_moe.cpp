#include "kernels/cpu/cpu_moe.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace troupe {

void moe_route(const float* logits, int64_t num_experts, int64_t top_k, bool renormalize, int32_t* ids,
               float* weights) {
  // A logit that is not finite (a broken checkpoint) counts as -inf; all
  // of them so: equal weights.
  float max = -INFINITY;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (std::isfinite(logits[e])) max = std::max(max, logits[e]);
  }
  std::vector<float> p(static_cast<size_t>(num_experts));
  float sum = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    sum += p[static_cast<size_t>(e)] = std::isfinite(logits[e]) ? std::exp(logits[e] - max) : 0.0f;
  }
  for (float& v : p) v = sum > 0 ? v / sum : 1.0f / static_cast<float>(num_experts);
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  float chosen = 0;
  for (int64_t k = 0; k < top_k; ++k) {
    ids[k] = order[static_cast<size_t>(k)];
    weights[k] = p[static_cast<size_t>(ids[k])];
    chosen += weights[k];
  }
  if (renormalize) {
    for (int64_t k = 0; k < top_k; ++k) weights[k] /= chosen;
  }
}

void moe_mlp_f32(const float* x, int64_t n, int64_t h, const float* router_logits, const float* gate_up,
                 const float* down, int64_t num_experts, int64_t inter, int64_t top_k, bool renormalize,
                 float* out, int64_t out_stride, uint32_t* counts, const int32_t* token_slots) {
  std::vector<int32_t> ids(static_cast<size_t>(n * top_k));
  std::vector<float> weights(static_cast<size_t>(n * top_k));
  for (int64_t t = 0; t < n; ++t) {
    moe_route(router_logits + t * num_experts, num_experts, top_k, renormalize, ids.data() + t * top_k,
              weights.data() + t * top_k);
  }
  if (counts != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      if (token_slots != nullptr && token_slots[t] < 0) continue;
      for (int64_t k = 0; k < top_k; ++k) ++counts[ids[static_cast<size_t>(t * top_k + k)]];
    }
  }
  // (token, weight) pairs of each expert, in token order.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < top_k; ++k) {
      routed[static_cast<size_t>(ids[static_cast<size_t>(t * top_k + k)])].emplace_back(
          t, weights[static_cast<size_t>(t * top_k + k)]);
    }
  }
  for (int64_t t = 0; t < n; ++t) std::fill_n(out + t * out_stride, h, 0.0f);
  std::vector<float> xs, gu, act, y;
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& tokens = routed[static_cast<size_t>(e)];
    const auto m = static_cast<int64_t>(tokens.size());
    if (m == 0) continue;
    xs.resize(static_cast<size_t>(m * h));
    for (int64_t r = 0; r < m; ++r) std::copy_n(x + tokens[static_cast<size_t>(r)].first * h, h, xs.data() + r * h);
    gu.resize(static_cast<size_t>(m * 2 * inter));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(2 * inter),
                static_cast<int>(h), 1.0f, xs.data(), static_cast<int>(h), gate_up + e * 2 * inter * h,
                static_cast<int>(h), 0.0f, gu.data(), static_cast<int>(2 * inter));
    act.resize(static_cast<size_t>(m * inter));
    for (int64_t r = 0; r < m; ++r) {
      const float* g = gu.data() + r * 2 * inter;
      for (int64_t j = 0; j < inter; ++j) {
        act[static_cast<size_t>(r * inter + j)] = g[j] / (1.0f + std::exp(-g[j])) * g[inter + j];
      }
    }
    y.resize(static_cast<size_t>(m * h));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(h),
                static_cast<int>(inter), 1.0f, act.data(), static_cast<int>(inter), down + e * h * inter,
                static_cast<int>(inter), 0.0f, y.data(), static_cast<int>(h));
    for (int64_t r = 0; r < m; ++r) {
      const auto [t, w] = tokens[static_cast<size_t>(r)];
      float* o = out + t * out_stride;
      for (int64_t j = 0; j < h; ++j) o[j] += w * y[static_cast<size_t>(r * h + j)];
    }
  }
}

}  // namespace troupe
