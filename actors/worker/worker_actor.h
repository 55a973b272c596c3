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

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/worker/model_runner.h"
#include "actors/worker/worker_health.h"

namespace troupe {

//
// `rank` is its place among the engine's ranks (0 with one). A
// communicator_aborted (a peer rank lost) ends the actor with the reason:
// the plans it holds are answered with it.
caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner,
                           bool overlap, int rank);

// What the worker group does when a rank is lost (a rank's actor went down
// other than by the engine's shutdown, or answered a plan with an error):
// marks `health`, and calls `abort_ranks` so that the ranks waiting for the
// lost one in a collective give up at once.
struct worker_group_hooks {
  std::shared_ptr<worker_health> health;
  std::function<void(const std::string&)> abort_ranks;
  // ranks[0 .. num_local_ranks) are this process's: their shutdown is the
  // engine's; any other rank that goes is lost.
  size_t num_local_ranks = 0;
};

// The workers of a parallel engine as the scheduler sees one worker: each
// step_plan and flush goes to every rank's worker_actor (in rank order, so
// every rank runs the same plans in the same order). `ranks` are
// stage-major (pipeline stage s's tensor-parallel rank t at s * T + t, of
// `stages` stages). A plan is answered with the last stage's first rank's
// step_output once every rank has answered, after that output went to
// every rank of the earlier stages (stage_results: their requests take the
// tokens before the next plan). The last stage's ranks sample the same
// tokens (the gathered logits are the same bits on every rank and the
// sampler is seeded per request); a rank whose tokens differ is logged as
// an error. A lost rank (worker_group_hooks) fails the plans in flight and
// every later plan with the reason (the scheduler then fails the requests).
caf::behavior worker_group_actor(caf::event_based_actor* self, std::vector<caf::actor> ranks,
                                 int stages, worker_group_hooks hooks);

}  // namespace troupe
