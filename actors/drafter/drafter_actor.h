// drafter_actor: the speculative-decoding drafter. Holds an ngram_proposer
// with the token history of every running request the scheduler has told it
// about, and answers each draft_sync (new tokens, finished requests) with
// the proposals asked for. It runs beside the scheduler and the worker: the
// proposals for a request's next step are computed as soon as its tokens
// are back, while the device runs the steps of others. It answers only the
// scheduler.
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/drafter/ngram_proposer.h"
#include "actors/messages.h"

namespace troupe {

struct drafter_state {
  std::unique_ptr<ngram_proposer> proposer;
  static inline const char* name = "drafter";
};

// The reply to one sync: the history updates applied, then the proposals.
draft_proposals apply_draft_sync(ngram_proposer& proposer, const draft_sync& sync);

caf::behavior drafter_actor(caf::stateful_actor<drafter_state>* self, ngram_config config);

}  // namespace troupe
