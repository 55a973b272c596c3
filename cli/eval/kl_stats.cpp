#include "cli/eval/kl_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::eval {

double log_sum_exp(const float* logits, int64_t n) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    if (std::isfinite(logits[v])) max = std::max(max, static_cast<double>(logits[v]));
  }
  if (!std::isfinite(max)) return std::numeric_limits<double>::quiet_NaN();  // nothing finite: uniform
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) {
    if (std::isfinite(logits[v])) sum += std::exp(static_cast<double>(logits[v]) - max);
  }
  return std::log(sum) + max;
}

double log_prob(const logits_row& r, int64_t v, int64_t n) {
  if (std::isnan(r.lse)) return -std::log(static_cast<double>(n));
  if (!std::isfinite(r.logits[v])) return -std::numeric_limits<double>::infinity();
  return static_cast<double>(r.logits[v]) - r.lse;
}

double kl_divergence(const logits_row& p, const logits_row& q, int64_t n) {
  double kl = 0;
  for (int64_t v = 0; v < n; ++v) {
    const double lp = log_prob(p, v, n);
    if (lp == -std::numeric_limits<double>::infinity()) continue;
    kl += std::exp(lp) * (lp - log_prob(q, v, n));
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative for equal distributions
}

double entropy(const logits_row& p, int64_t n) {
  double h = 0;
  for (int64_t v = 0; v < n; ++v) {
    const double lp = log_prob(p, v, n);
    if (lp != -std::numeric_limits<double>::infinity()) h -= std::exp(lp) * lp;
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
