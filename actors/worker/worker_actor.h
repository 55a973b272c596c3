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
#include <vector>

#include <caf/all.hpp>

#include "actors/worker/model_runner.h"

namespace troupe {

caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner,
                           bool overlap);

// The workers of a tensor-parallel engine as the scheduler sees one worker:
// each step_plan and flush goes to every rank's worker_actor (in rank
// order, so every rank runs the same plans in the same order), and the
// plan is answered with rank 0's step_output once every rank has answered.
// The ranks sample the same tokens (the gathered logits are the same bits
// on every rank and the sampler is seeded per request); a rank whose
// tokens differ is logged as an error. A rank's error answers the plan.
caf::behavior worker_group_actor(caf::event_based_actor* self, std::vector<caf::actor> ranks);

}  // namespace troupe
