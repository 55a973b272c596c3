#include "actors/scheduler/spec_control.h"

#include <algorithm>
#include <cmath>

namespace troupe {

namespace {

constexpr double token_scale = 1.0 / 1024;  // n in units of 1024 tokens (conditioning)
constexpr int64_t min_measured = 3;         // steps of a kind before the model is trusted

}  // namespace

double spec_control::global_acceptance() const {
  return (global_.kept + 0.5) / (global_.tested + 1.0);  // prior: one half, weight one
}

double spec_control::acceptance(request_id id) const {
  const double prior = global_acceptance();
  auto it = requests_.find(id);
  if (it == requests_.end()) return prior;
  return (it->second.kept + prior_weight_ * prior) / (it->second.tested + prior_weight_);
}

void spec_control::observe_verification(request_id id, int64_t num_drafts, int64_t num_accepted) {
  if (num_drafts <= 0) return;
  // Positions tested: the accepted ones and the first rejected one.
  const double tested = static_cast<double>(std::min(num_accepted + 1, num_drafts));
  const auto kept = static_cast<double>(num_accepted);
  counts& r = requests_[id];
  r.kept = r.kept * forget_ + kept;
  r.tested = r.tested * forget_ + tested;
  global_.kept = global_.kept * forget_step_ + kept;
  global_.tested = global_.tested * forget_step_ + tested;
}

void spec_control::observe_step(int64_t num_tokens, bool with_drafts, double seconds) {
  if (!(seconds > 0) || num_tokens <= 0) return;
  // The first step of each kind pays one-time costs (allocations, kernel
  // loading): not a sample of the cost.
  if (!warm_[with_drafts ? 1 : 0]) {
    warm_[with_drafts ? 1 : 0] = true;
    return;
  }
  const double x[3] = {1.0, static_cast<double>(num_tokens) * token_scale, with_drafts ? 1.0 : 0.0};
  for (int i = 0; i < 3; ++i) {
    xy_[i] = xy_[i] * forget_step_ + x[i] * seconds;
    for (int j = 0; j < 3; ++j) xx_[i][j] = xx_[i][j] * forget_step_ + x[i] * x[j];
  }
  ++steps_[with_drafts ? 1 : 0];
  fit();
}

void spec_control::fit() {
  // (X'WX + ridge) c = X'Wy; the ridge keeps c1 and c2 near 0 while only
  // one kind of step (or one size) has been seen.
  double a[3][4];
  const double ridge = 1e-3 * std::max(xx_[0][0], 1e-9);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a[i][j] = xx_[i][j] + (i == j && i > 0 ? ridge : 0.0);
    a[i][3] = xy_[i];
  }
  a[0][0] += 1e-12;
  for (int c = 0; c < 3; ++c) {  // Gaussian elimination with partial pivoting
    int p = c;
    for (int r = c + 1; r < 3; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    }
    if (std::fabs(a[p][c]) < 1e-18) return;
    for (int j = 0; j < 4; ++j) std::swap(a[c][j], a[p][j]);
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int j = c; j < 4; ++j) a[r][j] -= f * a[c][j];
    }
  }
  for (int i = 0; i < 3; ++i) coef_[i] = a[i][3] / a[i][i];
}

double spec_control::step_seconds(int64_t num_tokens, bool with_drafts) const {
  const double c1 = std::max(coef_[1], 0.0);
  const double t = coef_[0] + c1 * static_cast<double>(num_tokens) * token_scale +
                   (with_drafts ? coef_[2] : 0.0);
  return std::max(t, 0.0);
}

bool spec_control::trusted() const {
  return steps_[0] >= min_measured && steps_[1] >= min_measured;
}

bool spec_control::worth_drafting(request_id id) const {
  if (!trusted() || exploring(steps_seen_ + 1)) return true;
  return last_on_ && acceptance(id) > last_cutoff_;
}

std::vector<int64_t> spec_control::choose(const std::vector<spec_candidate>& candidates,
                                          int64_t base_tokens, int64_t base_emitted) {
  std::vector<int64_t> k(candidates.size(), 0);
  if (candidates.empty()) return k;
  // Every draft position's marginal gain (alpha^(j+1)), best first.
  struct gain {
    double g;
    size_t i;
  };
  std::vector<gain> gains;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double alpha = acceptance(candidates[i].id);
    double g = 1.0;
    for (int64_t j = 0; j < candidates[i].max_drafts; ++j) {
      g *= alpha;
      gains.push_back({g, i});
    }
  }
  std::stable_sort(gains.begin(), gains.end(), [](const gain& a, const gain& b) { return a.g > b.g; });
  const bool model = trusted() && step_seconds(base_tokens, false) > 0 &&
                     step_seconds(base_tokens, true) > 0;
  const double c1 = std::max(coef_[1], 0.0) * token_scale;  // seconds per token
  const double base = static_cast<double>(std::max<int64_t>(base_emitted, 1));
  double emitted = base;
  int64_t n = base_tokens;
  last_cutoff_ = model ? c1 * emitted / step_seconds(n, true) : 0.0;
  for (const gain& g : gains) {
    // Adding a position raises goodput iff its gain beats c1 x goodput.
    const double t = step_seconds(n, true);
    if (model && g.g * t <= c1 * emitted) break;
    last_cutoff_ = model ? c1 * emitted / t : 0.0;
    emitted += g.g;
    ++n;
    ++k[g.i];
  }
  // The model's choice (optimistic until it is trusted) decides who drafts
  // next; this step may measure or explore instead.
  last_on_ = !model || emitted / step_seconds(n, true) > base / step_seconds(base_tokens, false);
  bool on = last_on_;
  if (steps_[1] < min_measured) {
    on = true;
  } else if (steps_[0] < min_measured) {
    on = false;
  }
  if (trusted() && exploring(steps_seen_)) {
    // Measure the other choice: one draft a candidate when exploring on.
    on = !on;
    if (on) {
      for (size_t i = 0; i < k.size(); ++i) k[i] = std::min<int64_t>(1, candidates[i].max_drafts);
    }
  }
  if (!on) std::fill(k.begin(), k.end(), 0);
  return k;
}

}  // namespace troupe
