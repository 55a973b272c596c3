#include "cli/eval/kl_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::eval {

void log_softmax(const float* logits, int64_t n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    if (std::isfinite(logits[v])) max = std::max(max, static_cast<double>(logits[v]));
  }
  if (!std::isfinite(max)) {  // nothing finite: uniform
    std::fill(out.begin(), out.end(), static_cast<float>(-std::log(static_cast<double>(n))));
    return;
  }
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) {
    if (std::isfinite(logits[v])) sum += std::exp(static_cast<double>(logits[v]) - max);
  }
  const double log_sum = std::log(sum) + max;
  for (int64_t v = 0; v < n; ++v) {
    out[static_cast<size_t>(v)] = std::isfinite(logits[v])
                                      ? static_cast<float>(static_cast<double>(logits[v]) - log_sum)
                                      : -std::numeric_limits<float>::infinity();
  }
}

double kl_divergence(const float* log_p, const float* log_q, int64_t n) {
  double kl = 0;
  for (int64_t v = 0; v < n; ++v) {
    if (log_p[v] == -std::numeric_limits<float>::infinity()) continue;
    const double p = std::exp(static_cast<double>(log_p[v]));
    if (p == 0) continue;
    kl += p * (static_cast<double>(log_p[v]) - static_cast<double>(log_q[v]));
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative for equal distributions
}

double entropy(const float* log_p, int64_t n) {
  double h = 0;
  for (int64_t v = 0; v < n; ++v) {
    if (log_p[v] == -std::numeric_limits<float>::infinity()) continue;
    h -= std::exp(static_cast<double>(log_p[v])) * static_cast<double>(log_p[v]);
  }
  return h;
}

int64_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

void kl_report::add_position(double kl, bool argmax_agrees, double reference_entropy) {
  kl_.push_back(kl);
  entropy_sum_ += reference_entropy;
  if (argmax_agrees) ++argmax_agree_;
}

void kl_report::add_sequences(const std::vector<int32_t>& reference, const std::vector<int32_t>& compared) {
  ++sequences_;
  if (!reference.empty() && !compared.empty() && reference[0] == compared[0]) ++first_agree_;
  if (reference == compared) ++identical_;
  size_t common = 0;
  while (common < reference.size() && common < compared.size() && reference[common] == compared[common]) {
    ++common;
  }
  prefix_sum_ += reference.empty() ? 1.0 : static_cast<double>(common) / static_cast<double>(reference.size());
}

double kl_report::kl_mean() const {
  if (kl_.empty()) return 0;
  double sum = 0;
  for (double k : kl_) sum += k;
  return sum / static_cast<double>(kl_.size());
}

double kl_report::kl_max() const { return kl_.empty() ? 0 : *std::max_element(kl_.begin(), kl_.end()); }

double kl_report::kl_quantile(double q) const {
  if (kl_.empty()) return 0;
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

double kl_report::argmax_agreement() const {
  return kl_.empty() ? 0 : static_cast<double>(argmax_agree_) / static_cast<double>(kl_.size());
}

double kl_report::mean_reference_entropy() const {
  return kl_.empty() ? 0 : entropy_sum_ / static_cast<double>(kl_.size());
}

double kl_report::first_token_agreement() const {
  return sequences_ == 0 ? 0 : static_cast<double>(first_agree_) / static_cast<double>(sequences_);
}

double kl_report::sequence_agreement() const {
  return sequences_ == 0 ? 0 : static_cast<double>(identical_) / static_cast<double>(sequences_);
}

double kl_report::common_prefix_fraction() const {
  return sequences_ == 0 ? 0 : prefix_sum_ / static_cast<double>(sequences_);
}

}  // namespace troupe::eval
