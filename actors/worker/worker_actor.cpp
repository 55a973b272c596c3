#include "actors/worker/worker_actor.h"

#include <deque>

#include "config/logging.h"

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

// One plan's answers from the ranks so far.
struct gathered_step {
  caf::typed_response_promise<step_output> promise;
  size_t left = 0;
  step_output first;  // rank 0's
  std::vector<step_output> others;
  bool failed = false;
};

}  // namespace

caf::behavior worker_group_actor(caf::event_based_actor* self, std::vector<caf::actor> ranks) {
  return {
      [self, ranks](const step_plan& plan) -> caf::result<step_output> {
        auto step = std::make_shared<gathered_step>();
        step->promise = self->make_response_promise<step_output>();
        step->left = ranks.size();
        for (size_t r = 0; r < ranks.size(); ++r) {
          self->request(ranks[r], caf::infinite, plan)
              .then(
                  [step, r](step_output& out) {
                    if (step->failed) return;
                    if (r == 0) {
                      step->first = std::move(out);
                    } else {
                      step->others.push_back(std::move(out));
                    }
                    if (--step->left > 0) return;
                    for (const step_output& o : step->others) {
                      if (!same_tokens(step->first, o)) {
                        get_logger("worker")->error(
                            "step {}: tensor-parallel ranks sampled different tokens",
                            step->first.step_id);
                      }
                    }
                    step->promise.deliver(std::move(step->first));
                  },
                  [step](caf::error& err) {
                    if (step->failed) return;
                    step->failed = true;
                    step->promise.deliver(std::move(err));
                  });
        }
        return step->promise;
      },
      [self, ranks](atoms::flush) {
        for (const caf::actor& rank : ranks) self->send(rank, atoms::flush_v);
      },
  };
}

}  // namespace troupe
