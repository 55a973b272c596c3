// fake_worker: answers a step_plan the way model_runner does (a token when a
// request's computed tokens reach its known tokens, fork samples for
// fork_children) without a model: token = 100 + step id, a fork's first
// token = 200 + its id. Records the copy-on-write copies it was asked for.
#pragma once

#include <map>

#include "actors/messages.h"

namespace troupe::testing {

struct fake_worker {
  std::map<request_id, std::pair<int64_t, int64_t>> state;  // id -> (computed, known tokens)
  int64_t copies = 0;

  step_output execute(const step_plan& plan) {
    step_output out;
    out.step_id = plan.step_id;
    copies += static_cast<int64_t>(plan.copy_src.size());
    for (request_id id : plan.finished_ids) state.erase(id);
    auto run = [&](request_id id, int64_t scheduled, const std::vector<fork_child>& forks) {
      auto& [computed, total] = state[id];
      computed += scheduled;
      sampled_output s;
      s.id = id;
      if (computed == total) {
        s.token_ids = {static_cast<int32_t>(100 + plan.step_id)};
        ++total;
        for (const fork_child& c : forks) {
          s.fork_samples.push_back({c.id, static_cast<int32_t>(200 + c.id), {}});
        }
      }
      out.outputs.push_back(s);
    };
    for (const new_request_data& d : plan.new_requests) {
      state[d.id] = {d.num_computed_tokens, static_cast<int64_t>(d.token_ids.size())};
      run(d.id, d.num_scheduled_tokens, d.fork_children);
    }
    for (const cached_request_data& d : plan.cached_requests) {
      run(d.id, d.num_scheduled_tokens, d.fork_children);
    }
    return out;
  }
};

}  // namespace troupe::testing
