// request_actor: one actor per request. The engine registers the request
// with the scheduler (naming this actor as the client); the actor receives its request_output messages and hands them to the
// request's sink; quits after the final one. An abort_request_msg sent to
// it is forwarded to the scheduler (client disconnects, stop strings).
// Detokenization and stop strings join it with the tokenizer.
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/messages.h"
#include "actors/request/request_sink.h"

namespace troupe {

caf::behavior request_actor(caf::event_based_actor* self, request_id id,
                            caf::actor scheduler, std::shared_ptr<request_sink> sink);

}  // namespace troupe
