// scheduler_actor: the engine's clock. Holds the token_budget_scheduler and
// drives one step at a time: schedule -> KV transaction to the block manager
// -> step plan to the worker -> outputs to the request actors -> next step.
// Also answers get_stats and prints vLLM's periodic throughput line.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe {

struct scheduler_state {
  std::unique_ptr<token_budget_scheduler> core;
  caf::actor block_manager;
  caf::actor worker;
  std::unordered_map<request_id, caf::actor> clients;
  engine_stats last_logged;
  int empty_steps = 0;  // consecutive transactions that scheduled nothing
  std::chrono::steady_clock::time_point last_log_time;
  static inline const char* name = "scheduler";
};

caf::behavior scheduler_actor(caf::stateful_actor<scheduler_state>* self,
                              scheduler_limits limits, caf::actor block_manager,
                              caf::actor worker);

}  // namespace troupe
