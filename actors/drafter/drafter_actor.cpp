#include "actors/drafter/drafter_actor.h"

#include "common/check.h"

namespace troupe {

draft_proposals apply_draft_sync(ngram_proposer& proposer, const draft_sync& sync) {
  TROUPE_CHECK(sync.tokens.size() == sync.ids.size() && sync.whole.size() == sync.ids.size());
  TROUPE_CHECK(sync.propose_limits.size() == sync.propose_ids.size());
  for (request_id id : sync.removed) proposer.remove(id);
  for (size_t i = 0; i < sync.ids.size(); ++i) {
    if (sync.whole[i]) {
      proposer.add(sync.ids[i], sync.tokens[i]);
    } else {
      proposer.append(sync.ids[i], sync.tokens[i]);
    }
  }
  draft_proposals out;
  for (size_t i = 0; i < sync.propose_ids.size(); ++i) {
    std::vector<int32_t> drafts = proposer.propose(sync.propose_ids[i], sync.propose_limits[i]);
    if (drafts.empty()) continue;
    out.ids.push_back(sync.propose_ids[i]);
    out.tokens.push_back(std::move(drafts));
  }
  return out;
}

caf::behavior drafter_actor(caf::stateful_actor<drafter_state>* self, ngram_config config) {
  self->state.proposer = std::make_unique<ngram_proposer>(config);
  return {
      [self](const draft_sync& sync) -> draft_proposals {
        return apply_draft_sync(*self->state.proposer, sync);
      },
  };
}

}  // namespace troupe
