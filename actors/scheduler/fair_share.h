// fair_share: how much of the engine one API request may take, so that no
// client starves the others. An API request is a group of sequences (its
// prompts times n, offline one prompt line times n); the scheduler admits
// groups first come, first served, under two shares:
//
// - running slots: a group holds at most `max_num_seqs_per_request` of the
//   `max_num_seqs` slots (a running sequence, plus the parked samples that
//   will fork from it, each count). Always applied, so a request that
//   arrives while a huge one runs finds a free slot at once. The slots a
//   group leaves free go to the next groups in arrival order; a group at its
//   share is skipped, not waited for.
// - prefill tokens: when the groups that want prefill tokens in a step want
//   more than its budget, each in scheduling order (running first, then
//   waiting, oldest first) gets up to the same fraction of the budget (its
//   token share: max_num_batched_tokens * max_num_seqs_per_request /
//   max_num_seqs), then what is left goes in the same order to those that
//   want more: first come, first served below the share, and work-conserving
//   (no budget is left unused while some group wants it). A decode token (one per sequence) is never held back:
//   its slot was granted already. Alone, a group may use the whole budget.
//
// Plain class, no CAF: the scheduler actor's thread only. It holds one
// step's counts, reset by begin_step().
#pragma once

#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

using request_id = uint64_t;

struct fair_share_limits {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs_per_request = 256;  // 1..max_num_seqs
  // The token share only applies with chunked prefill (without it a prompt
  // must fit in one step, and a share smaller than the prompt would starve
  // it) and not under the priority policy (priority decides there).
  bool enable_chunked_prefill = true;
  bool priority_policy = false;
};

class fair_share {
 public:
  explicit fair_share(const fair_share_limits& limits);

  // Per step: forget the last step's use, then count this one's.
  void begin_step();
  // Splits this step's prefill budget among the groups that want tokens:
  // `demands` lists (group, tokens) in scheduling order (a group may appear
  // several times). Nobody is capped when one group wants tokens or all
  // demands fit.
  void allot_tokens(const std::vector<std::pair<request_id, int64_t>>& demands, int64_t budget);
  void use_slots(request_id group, int64_t n) { slots_[group] += n; }
  void use_tokens(request_id group, int64_t n) { tokens_[group] += n; }
  int64_t slots_used(request_id group) const;
  // Running slots the group may still take (<= 0: none).
  int64_t slots_left(request_id group) const {
    return limits_.max_num_seqs_per_request - slots_used(group);
  }
  // Prefill tokens the group may still take this step (<= 0: none).
  int64_t tokens_left(request_id group) const;
  bool tokens_capped() const { return capped_; }
  int64_t slot_share() const { return limits_.max_num_seqs_per_request; }
  int64_t token_share() const { return token_share_; }

 private:
  fair_share_limits limits_;
  int64_t token_share_ = 0;
  bool capped_ = false;                             // this step's tokens are allotted
  std::unordered_map<request_id, int64_t> allot_;   // this step: group -> prefill tokens
  std::unordered_map<request_id, int64_t> slots_;   // this step
  std::unordered_map<request_id, int64_t> tokens_;  // this step
};

}  // namespace troupe
