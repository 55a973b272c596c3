// request_sink: where a request's results go. The HTTP session, the
// `generate` command and tests each implement it. Called on the request
// actor's thread, one call at a time per request, in order; the last call
// carries finish != none. Implementations must not block for long (post to
// your own thread or strand instead).
#pragma once

#include "actors/messages.h"

namespace troupe {

class request_sink {
 public:
  virtual ~request_sink() = default;
  virtual void on_output(const request_output& output) = 0;
};

}  // namespace troupe
