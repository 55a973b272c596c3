// worker_actor: one per device. Spawned `detached` (its own thread), so the
// backend's blocking work and, with CUDA, cudaSetDevice and event waits stay
// off CAF's scheduler threads. Answers each step_plan with its step_output.
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/worker/model_runner.h"

namespace troupe {

caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner);

}  // namespace troupe
