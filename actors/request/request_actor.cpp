#include "actors/request/request_actor.h"

namespace troupe {

caf::behavior request_actor(caf::event_based_actor* self, request_id id,
                            caf::actor scheduler, std::shared_ptr<request_sink> sink) {
  return {
      [self, sink](const request_output& output) {
        sink->on_output(output);
        if (output.finish != finish_reason::none) self->quit();
      },
      [self, scheduler, id](const abort_request_msg&) {
        self->send(scheduler, abort_request_msg{id});
      },
  };
}

}  // namespace troupe
