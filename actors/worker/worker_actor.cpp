#include "actors/worker/worker_actor.h"

#include <deque>

namespace troupe {

caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner,
                           bool overlap) {
  // Promises of launched steps, oldest first (at most two).
  auto waiting = std::make_shared<std::deque<caf::typed_response_promise<step_output>>>();
  auto finish_until = [runner, waiting](size_t left) {
    while (waiting->size() > left) {
      step_output out = runner->finish();
      waiting->front().deliver(std::move(out));
      waiting->pop_front();
    }
  };
  return {
      [self, runner, waiting, finish_until, overlap](const step_plan& plan)
          -> caf::result<step_output> {
        waiting->push_back(self->make_response_promise<step_output>());
        runner->launch(plan);
        // The step launched before this one ends now; this one runs on
        // until the next plan or a flush (lockstep: it ends now too).
        finish_until(overlap ? 1 : 0);
        return caf::delegated<step_output>{};
      },
      [finish_until](atoms::flush) { finish_until(0); },
  };
}

}  // namespace troupe
