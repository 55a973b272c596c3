#include "actors/scheduler/kv_admission.h"

#include <algorithm>
#include <cmath>

namespace troupe {

kv_admission::kv_admission(const kv_admission_config& config)
    : config_(config), learned_(config.initial_ratio - config.margin) {}

double kv_admission::ratio() const {
  return std::clamp(learned_ + config_.margin + bump_, config_.min_ratio, 1.0);
}

int64_t kv_admission::expected_tokens(int64_t remaining, bool certain) const {
  const int64_t left = std::max<int64_t>(remaining, 0);
  if (certain) return left;
  return static_cast<int64_t>(std::ceil(ratio() * static_cast<double>(std::min(left, config_.clip_tokens))));
}

int64_t kv_admission::capacity_blocks() const {
  const auto watermark = static_cast<int64_t>(std::ceil(config_.watermark * static_cast<double>(config_.num_blocks)));
  return config_.num_blocks - watermark;
}

int64_t kv_admission::peak_blocks(std::vector<demand> demands) const {
  // Longest-remaining first: just before the demand of `remaining` r ends
  // (r steps on), the ones still there are those ahead of it, each holding
  // tokens + r (a demand ending at the same step included). Blocks: the
  // sum of the tokens over the block size, plus one a demand (a bound of
  // the blocks each demand's rounding up takes).
  std::sort(demands.begin(), demands.end(),
            [](const demand& a, const demand& b) { return a.remaining > b.remaining; });
  const int64_t bs = config_.block_size;
  int64_t tokens = 0, peak = 0;
  for (size_t i = 0; i < demands.size(); ++i) {
    tokens += demands[i].tokens;
    const auto count = static_cast<int64_t>(i + 1);
    // Only where the next demand ends sooner (equal ones are counted together).
    if (i + 1 < demands.size() && demands[i + 1].remaining == demands[i].remaining) continue;
    const int64_t held = tokens + count * demands[i].remaining;
    peak = std::max(peak, held / bs + count);
  }
  return peak;
}

void kv_admission::on_step(bool preempted) {
  bump_ *= config_.bump_decay;
  if (preempted) bump_ = std::min(1.0, bump_ + config_.preempt_bump);
}

void kv_admission::on_finished(int64_t generated, int64_t allowance) {
  if (allowance <= 0) return;
  const double used = std::clamp(static_cast<double>(generated) / static_cast<double>(allowance), 0.0, 1.0);
  learned_ += config_.learn_weight * (used - learned_);
}

}  // namespace troupe
