#include "actors/worker/worker_actor.h"

namespace troupe {

caf::behavior worker_actor(caf::event_based_actor*, std::shared_ptr<model_runner> runner) {
  return {
      [runner](const step_plan& plan) -> step_output { return runner->execute(plan); },
  };
}

}  // namespace troupe
