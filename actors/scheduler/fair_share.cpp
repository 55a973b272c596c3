#include "actors/scheduler/fair_share.h"

#include <algorithm>

#include "common/check.h"

namespace troupe {

fair_share::fair_share(const fair_share_limits& limits) : limits_(limits) {
  TROUPE_CHECK(limits.max_num_seqs > 0 && limits.max_num_batched_tokens > 0);
  limits_.max_num_seqs_per_request =
      std::clamp<int64_t>(limits.max_num_seqs_per_request, 1, limits.max_num_seqs);
  // The same fraction of the token budget as of the slots, at least one token.
  token_share_ = std::max<int64_t>(
      1, limits_.max_num_batched_tokens * limits_.max_num_seqs_per_request / limits_.max_num_seqs);
}

void fair_share::begin_step() {
  slots_.clear();
  tokens_.clear();
  allot_.clear();
  capped_ = false;
}

void fair_share::allot_tokens(const std::vector<std::pair<request_id, int64_t>>& demands,
                              int64_t budget) {
  allot_.clear();
  capped_ = false;
  if (!limits_.enable_chunked_prefill || limits_.priority_policy) return;
  std::vector<std::pair<request_id, int64_t>> groups;  // first appearance order
  std::unordered_map<request_id, size_t> index;
  int64_t total = 0;
  for (const auto& [group, tokens] : demands) {
    auto [it, fresh] = index.emplace(group, groups.size());
    if (fresh) groups.emplace_back(group, 0);
    groups[it->second].second += tokens;
    total += tokens;
  }
  if (groups.size() <= 1 || total <= budget) return;
  capped_ = true;
  // In order, each group up to its share of what is left; then the rest in
  // order to those that want more.
  int64_t left = budget;
  for (const auto& [group, want] : groups) {
    const int64_t a = std::min({want, token_share_, left});
    allot_[group] = a;
    left -= a;
  }
  for (const auto& [group, want] : groups) {
    if (left <= 0) break;
    const int64_t extra = std::min(want - allot_[group], left);
    allot_[group] += extra;
    left -= extra;
  }
}

int64_t fair_share::slots_used(request_id group) const {
  auto it = slots_.find(group);
  return it == slots_.end() ? 0 : it->second;
}

int64_t fair_share::tokens_left(request_id group) const {
  if (!capped_) return std::numeric_limits<int64_t>::max();
  auto used = tokens_.find(group);
  auto a = allot_.find(group);
  // A group that asked for nothing this step gets its plain share.
  const int64_t allowed = a == allot_.end() ? token_share_ : a->second;
  return allowed - (used == tokens_.end() ? 0 : used->second);
}

}  // namespace troupe
