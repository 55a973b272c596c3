#include "actors/worker/worker_actor.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <set>

#include "config/logging.h"

namespace troupe {

namespace {

// TROUPE_DEBUG_FAIL_RANK=R:N: rank R's worker stops at its Nth plan, as a
// worker that died would (tests of the failure handling); 0: never.
int64_t debug_fail_step(int rank) {
  const char* v = std::getenv("TROUPE_DEBUG_FAIL_RANK");
  int r = -1;
  long long n = 0;
  if (v == nullptr || std::sscanf(v, "%d:%lld", &r, &n) != 2 || r != rank) return 0;
  return n;
}

}  // namespace

caf::behavior worker_actor(caf::event_based_actor* self, std::shared_ptr<model_runner> runner,
                           bool overlap, int rank) {
  // Promises of launched steps, oldest first (at most two).
  auto waiting = std::make_shared<std::deque<caf::typed_response_promise<step_output>>>();
  auto finish_until = [runner, waiting](size_t left) {
    while (waiting->size() > left) {
      step_output out = runner->finish();
      waiting->front().deliver(std::move(out));
      waiting->pop_front();
    }
  };
  // A lost peer (communicator_aborted) ends this worker: its plans are
  // answered with the reason, and its exit tells the group.
  auto fail = [self, waiting, rank](const std::string& reason) {
    const caf::error err = caf::make_error(caf::sec::runtime_error,
                                           "rank " + std::to_string(rank) + ": " + reason);
    for (auto& promise : *waiting) promise.deliver(err);
    waiting->clear();
    self->quit(err);
  };
  auto plans = std::make_shared<int64_t>(0);
  const int64_t fail_at = debug_fail_step(rank);
  return {
      [self, runner, waiting, finish_until, overlap, fail, plans, fail_at](const step_plan& plan)
          -> caf::result<step_output> {
        waiting->push_back(self->make_response_promise<step_output>());
        if (++*plans == fail_at) {
          fail("stopped by TROUPE_DEBUG_FAIL_RANK at plan " + std::to_string(fail_at));
          return caf::delegated<step_output>{};
        }
        try {
          runner->launch(plan);
          // The step launched before this one ends now; this one runs on
          // until the next plan or a flush (lockstep: it ends now too).
          finish_until(overlap ? 1 : 0);
        } catch (const communicator_aborted& e) {
          fail(e.what());
        }
        return caf::delegated<step_output>{};
      },
      [finish_until, fail](atoms::flush) {
        try {
          finish_until(0);
        } catch (const communicator_aborted& e) {
          fail(e.what());
        }
      },
      [runner](atoms::stage_results, const step_output& out) { runner->apply_stage_results(out); },
      [runner](atoms::get_expert_counts) { return runner->read_expert_counts(); },
  };
}

namespace {

// The tokens of each output, for comparing ranks.
bool same_tokens(const step_output& a, const step_output& b) {
  if (a.outputs.size() != b.outputs.size()) return false;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    if (a.outputs[i].id != b.outputs[i].id || a.outputs[i].token_ids != b.outputs[i].token_ids) {
      return false;
    }
  }
  return true;
}

// The pipeline stages' expert counts so far (get_expert_counts).
struct gathered_counts {
  caf::typed_response_promise<expert_counts> promise;
  size_t left = 0;
  std::vector<expert_counts> stages;
  bool done = false;
};

// One plan's answers from the ranks so far.
struct gathered_step {
  caf::typed_response_promise<step_output> promise;
  size_t left = 0;
  std::vector<step_output> outputs;  // by rank
  bool failed = false;
};

struct group_state {
  std::vector<caf::actor> ranks;  // stage-major
  size_t answering = 0;           // the last stage's first rank
  size_t ranks_per_stage = 1;
  worker_group_hooks hooks;
  std::set<std::shared_ptr<gathered_step>> pending;
  bool lost = false;
};

// A rank is gone: every step in flight and every later plan fails with
// the reason, the health says so, and the local ranks' groups are aborted
// (ranks waiting in a collective for the lost one give up now).
void lose(group_state& g, const std::string& reason) {
  if (g.lost) return;
  g.lost = true;
  if (g.hooks.health) g.hooks.health->mark_lost(reason);
  get_logger("worker")->error("{}: failing {} step(s) in flight; the server answers 503 from now",
                              reason, g.pending.size());
  if (g.hooks.abort_ranks) g.hooks.abort_ranks(reason);
  for (const auto& step : g.pending) {
    step->failed = true;
    step->promise.deliver(caf::make_error(caf::sec::runtime_error, reason));
  }
  g.pending.clear();
}

}  // namespace

caf::behavior worker_group_actor(caf::event_based_actor* self, std::vector<caf::actor> ranks,
                                 int stages, worker_group_hooks hooks) {
  auto g = std::make_shared<group_state>();
  g->ranks = std::move(ranks);
  g->ranks_per_stage = g->ranks.size() / static_cast<size_t>(stages);
  g->answering = g->ranks.size() - g->ranks_per_stage;
  g->hooks = std::move(hooks);
  for (const caf::actor& rank : g->ranks) self->monitor(rank);
  self->set_down_handler([g](caf::down_msg& msg) {
    // A local rank's shutdown is the engine's (it stops this group first);
    // a rank in a worker process that shuts down (SIGTERM) is lost too.
    const bool local = [&] {
      for (size_t r = 0; r < g->hooks.num_local_ranks && r < g->ranks.size(); ++r) {
        if (msg.source == g->ranks[r].address()) return true;
      }
      return false;
    }();
    if (local && msg.reason == caf::exit_reason::user_shutdown) return;
    const std::string why = msg.reason == caf::exit_reason::remote_link_unreachable
                                ? "its process is unreachable (it exited or was killed, or "
                                  "stopped answering the heartbeat)"
                                : caf_error_text(msg.reason);
    for (size_t r = 0; r < g->ranks.size(); ++r) {
      if (msg.source != g->ranks[r].address()) continue;
      lose(*g, "rank " + std::to_string(r) + " (pipeline stage " +
                   std::to_string(r / g->ranks_per_stage) + ") was lost: " + why);
    }
  });
  return {
      [self, g](const step_plan& plan) -> caf::result<step_output> {
        if (g->lost) {
          return caf::make_error(caf::sec::runtime_error,
                                 g->hooks.health ? g->hooks.health->reason() : "a rank was lost");
        }
        auto step = std::make_shared<gathered_step>();
        step->promise = self->make_response_promise<step_output>();
        step->left = g->ranks.size();
        step->outputs.resize(g->ranks.size());
        g->pending.insert(step);
        for (size_t r = 0; r < g->ranks.size(); ++r) {
          self->request(g->ranks[r], caf::infinite, plan)
              .then(
                  [self, g, step, r](step_output& out) {
                    if (step->failed) return;
                    step->outputs[r] = std::move(out);
                    if (--step->left > 0) return;
                    g->pending.erase(step);
                    step_output& answer = step->outputs[g->answering];
                    for (size_t o = g->answering + 1; o < g->ranks.size(); ++o) {
                      if (!same_tokens(answer, step->outputs[o])) {
                        get_logger("worker")->error(
                            "step {}: tensor-parallel ranks sampled different tokens",
                            answer.step_id);
                      }
                    }
                    // The earlier stages' requests take the tokens before
                    // the next plan reaches them (this actor sends both).
                    for (size_t e = 0; e < g->answering; ++e) {
                      self->send(g->ranks[e], atoms::stage_results_v, answer);
                    }
                    step->promise.deliver(std::move(answer));
                  },
                  [g, r](caf::error& err) {
                    lose(*g, "rank " + std::to_string(r) + " failed a step: " + caf_error_text(err));
                  });
        }
        return step->promise;
      },
      [self, g](atoms::flush) {
        for (const caf::actor& rank : g->ranks) self->send(rank, atoms::flush_v);
      },
      // Each stage's first rank counts its layers (the tensor-parallel
      // ranks route alike); the answer has the stages' layers in order.
      [self, g](atoms::get_expert_counts) -> caf::result<expert_counts> {
        if (g->lost) {
          return caf::make_error(caf::sec::runtime_error,
                                 g->hooks.health ? g->hooks.health->reason() : "a rank was lost");
        }
        auto counts = std::make_shared<gathered_counts>();
        counts->promise = self->make_response_promise<expert_counts>();
        counts->left = g->ranks.size() / g->ranks_per_stage;
        counts->stages.resize(counts->left);
        for (size_t s = 0; s < counts->stages.size(); ++s) {
          self->request(g->ranks[s * g->ranks_per_stage], caf::infinite, atoms::get_expert_counts_v)
              .then(
                  [counts, s](expert_counts& part) {
                    counts->stages[s] = std::move(part);
                    if (--counts->left > 0 || counts->done) return;
                    counts->done = true;
                    expert_counts all;
                    for (const expert_counts& stage : counts->stages) all.append(stage);
                    counts->promise.deliver(std::move(all));
                  },
                  [counts](caf::error& err) {
                    if (counts->done) return;
                    counts->done = true;
                    counts->promise.deliver(std::move(err));
                  });
        }
        return counts->promise;
      },
  };
}

}  // namespace troupe
