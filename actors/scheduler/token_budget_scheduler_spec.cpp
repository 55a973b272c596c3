// token_budget_scheduler, speculative decoding: what the drafter learns,
// which drafts a step verifies (spec_control), and giving back the slots of
// rejected drafts.
//
// A request verifies drafts only when every token it has is known here (no
// step in flight for it): the drafts extend its history. With async
// scheduling such a request is therefore not planned ahead of its last
// step (schedulable_ahead): it waits for its tokens, the drafter proposes,
// and its next step verifies. Requests without a match keep being planned
// ahead. The drafter is asked for proposals for every decoding request's
// known history, so a request planned ahead learns when a match appears.
#include <algorithm>

#include "actors/scheduler/token_budget_scheduler.h"
#include "common/check.h"

namespace troupe {

draft_sync token_budget_scheduler::take_draft_sync(bool& blocking) {
  draft_sync s;
  blocking = false;
  draft_news_ = false;
  const int32_t k_max = limits_.num_speculative_tokens;
  // Decoding requests (their first token out, not waiting to fork): the
  // drafter's histories.
  auto decoding = [](const request_state& r) {
    return !r.done && !r.aborted && !r.output_ids.empty() && !r.fork_pending;
  };
  // Whose proposals to ask for: drafts are tokens after the last one, and
  // emitting k + 1 tokens must stay within max_tokens and max_model_len;
  // requests the control expects no gain from do not draft (nor wait).
  for (const request_ptr& r : running_) {
    if (!decoding(*r)) continue;
    const int64_t outputs = static_cast<int64_t>(r->output_ids.size()) + r->placeholders;
    const int64_t limit = std::min<int64_t>({k_max, r->params.max_tokens - outputs - 1,
                                             limits_.max_model_len - r->num_tokens_eff() - 1});
    if (limit <= 0 || r->may_copy_on_write || !r->children.empty() ||
        (limits_.spec_adaptive && !control_.worth_drafting(r->id))) {
      r->wants_spec = false;
      continue;
    }
    s.propose_ids.push_back(r->id);
    s.propose_limits.push_back(static_cast<int32_t>(limit));
    // Worth waiting for: a request whose last probe found a match and whose
    // next step can verify drafts. A request without a match is probed
    // without holding the step (a new match is used one step later).
    blocking = blocking || (r->wants_spec && r->placeholders == 0 && r->inflight_tokens == 0);
    r->drafts.clear();
    r->drafts_for = -1;
  }
  // Nothing to propose: the histories wait for a sync that asks (the
  // drafter needs them only then), unless many finished requests are to go.
  if (s.propose_ids.empty() && drafter_removed_.size() < 256) return s;
  s.removed = std::move(drafter_removed_);
  drafter_removed_.clear();
  for (const request_ptr& r : running_) {
    if (!decoding(*r)) continue;
    const int64_t known = r->num_tokens();
    if (r->num_tokens_drafted < 0) {
      s.ids.push_back(r->id);
      s.tokens.push_back(r->prompt_ids);
      s.tokens.back().insert(s.tokens.back().end(), r->output_ids.begin(), r->output_ids.end());
      s.whole.push_back(1);
    } else if (r->num_tokens_drafted < known) {
      s.ids.push_back(r->id);
      const auto from = static_cast<size_t>(r->num_tokens_drafted) - r->prompt_ids.size();
      s.tokens.emplace_back(r->output_ids.begin() + static_cast<long>(from), r->output_ids.end());
      s.whole.push_back(0);
    }
    r->num_tokens_drafted = known;
  }
  asked_.push_back(s.propose_ids);
  return s;
}

void token_budget_scheduler::set_drafts(const draft_proposals& proposals) {
  // The requests this answer's sync asked about: without a proposal, no
  // match (planned ahead again); with one, a match: it waits for its tokens
  // next time rather than be planned ahead. Answers come in sync order.
  TROUPE_CHECK(!asked_.empty());
  std::vector<request_id> asked = std::move(asked_.front());
  asked_.pop_front();
  for (request_id id : asked) {
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second->wants_spec = false;
  }
  for (size_t i = 0; i < proposals.ids.size(); ++i) {
    auto it = requests_.find(proposals.ids[i]);
    if (it == requests_.end() || proposals.tokens[i].empty()) continue;
    request_state& r = *it->second;
    r.wants_spec = true;
    if (r.num_tokens_drafted != r.num_tokens()) continue;  // it has emitted since
    r.drafts = proposals.tokens[i];
    r.drafts_for = r.num_tokens();
  }
}

int64_t token_budget_scheduler::spec_tokens_for(const request_state& r, int64_t budget) const {
  auto it = spec_choice_.find(r.id);
  if (it == spec_choice_.end()) return 0;
  return std::max<int64_t>(0, std::min<int64_t>(it->second, budget - 1));
}

void token_budget_scheduler::choose_spec_tokens() {
  spec_choice_.clear();
  if (limits_.num_speculative_tokens <= 0) return;
  control_.begin_step();
  std::vector<spec_candidate> candidates;
  int64_t base_tokens = 0, base_emitted = 0;
  size_t taken = 0;
  for (const request_ptr& r : running_) {
    if (taken == running_per_step()) break;
    if (ahead_ && !schedulable_ahead(*r)) continue;
    ++taken;
    const int64_t need = r->num_tokens_eff() - r->computed_eff();
    base_tokens += need;
    if (need == 1) ++base_emitted;
    const bool ready = need == 1 && r->placeholders == 0 && r->inflight_tokens == 0 &&
                       r->drafts_for == r->num_tokens() && !r->drafts.empty() &&
                       !r->may_copy_on_write && !r->fork_pending && r->children.empty() &&
                       !r->aborted;
    if (ready) candidates.push_back({r->id, static_cast<int64_t>(r->drafts.size())});
  }
  if (candidates.empty()) return;
  base_tokens = std::min(base_tokens, limits_.max_num_batched_tokens);
  std::vector<int64_t> k;
  if (limits_.spec_adaptive) {
    k = control_.choose(candidates, base_tokens, base_emitted);
  } else {
    for (const spec_candidate& c : candidates) k.push_back(c.max_drafts);
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    spec_choice_[candidates[i].id] = k[i];
    if (k[i] == 0) requests_.at(candidates[i].id)->wants_spec = false;
  }
}

void token_budget_scheduler::apply_spec_result(request_state& r, int64_t num_drafts,
                                               int64_t num_accepted) {
  TROUPE_CHECK(num_accepted >= 0 && num_accepted <= num_drafts);
  const int64_t rejected = num_drafts - num_accepted;
  r.num_computed_tokens -= rejected;
  stats_.num_computed_tokens -= rejected;
  ++stats_.spec_num_drafts;
  stats_.spec_num_draft_tokens += num_drafts;
  stats_.spec_num_accepted_tokens += num_accepted;
  for (int64_t j = 0; j < num_accepted; ++j) ++stats_.spec_accepted_per_pos.at(static_cast<size_t>(j));
  control_.observe_verification(r.id, num_drafts, num_accepted);
  if (rejected == 0) return;
  // The blocks past the verified tokens held only rejected drafts: given
  // back (the worker drops them from its table by the same rule; the block
  // manager frees them at the next transaction's rollbacks).
  const int64_t keep = (r.num_computed_tokens + limits_.block_size - 1) / limits_.block_size;
  if (static_cast<int64_t>(r.block_ids.size()) > keep) {
    std::vector<int32_t> tail(r.block_ids.begin() + keep, r.block_ids.end());
    num_blocks_free_ += release(tail);
    r.block_ids.resize(static_cast<size_t>(keep));
  }
  pending_rollbacks_.push_back({r.id, r.num_computed_tokens});
}

}  // namespace troupe
