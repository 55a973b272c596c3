// request_actor: one actor per request. The engine registers the request
// with the scheduler (naming this actor as the client); the actor receives
// its request_output messages, detokenizes them incrementally (when the
// engine has a tokenizer), applies stop strings across delta boundaries, and
// hands each output to the request's sink; it quits after the final one. A
// stop string ends the request here and aborts it at the scheduler (a client
// gone is aborted by the engine at the scheduler directly). It
// also times the request (first token, inter-token gaps, end to end) into
// the engine's request_metrics.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.h"
#include "actors/request/request_metrics.h"
#include "actors/request/request_sink.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

struct request_text_setup {
  std::shared_ptr<const tokenizer> tok;  // null: outputs carry no text
  std::vector<int32_t> prompt_ids;
  sampling_params params;
};

// What the actor records into the engine's request_metrics.
struct request_accounting {
  std::shared_ptr<request_metrics> metrics;  // null: nothing recorded
  std::chrono::steady_clock::time_point arrival;
  int64_t num_prompt_tokens = 0;
};

caf::behavior request_actor(caf::event_based_actor* self, request_id id,
                            caf::actor scheduler, std::shared_ptr<request_sink> sink,
                            request_text_setup text, request_accounting accounting);

}  // namespace troupe
