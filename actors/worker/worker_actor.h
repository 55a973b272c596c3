// worker_actor: one per device. Spawned `detached` (its own thread), so the
// backend's blocking work and, with CUDA, cudaSetDevice and event waits stay
// off CAF's scheduler threads. Answers each step_plan with its step_output,
// in order.
//
// With `overlap` (async scheduling), a plan's step is launched and left
// running: its output is delivered when the next plan has been launched
// behind it, or on `flush`. So while the GPU runs step N the scheduler plans
// N + 1 and this thread prepares and queues it; N + 1's requests that wait
// for N's tokens take them on the device. Without it, each plan is run to
// its end before the reply (lockstep).
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/worker/model_runner.h"

namespace troupe {

caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner,
                           bool overlap);

}  // namespace troupe
