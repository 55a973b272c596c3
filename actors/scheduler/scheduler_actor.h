// scheduler_actor: the engine's clock. Holds the token_budget_scheduler and
// drives the steps: schedule -> KV transaction to the block manager -> step
// plan to the worker -> outputs to the request actors -> next step. With
// async scheduling the next step is planned and sent while the last one
// runs (token_budget_scheduler::can_schedule_ahead); when it cannot be, the
// worker is told to finish the step it holds (flush). A step's output that
// arrives while a transaction is open waits for the commit (updates never
// interleave with a transaction). With speculative decoding, the drafter
// learns each step's tokens (draft_sync) and its proposals arrive before
// the next step is scheduled. With LoRA, requests whose adapter is being
// read into host memory wait; the registry's lora_read message wakes the
// actor (no polling). Also answers get_stats and prints vLLM's periodic
// throughput line (with log_expert_counts, followed by the experts' load:
// get_expert_counts to the worker). When the worker answers a step with an error (a lost
// rank), every request ends with finish_reason::error and `unavailable`
// set, later requests at once, and no step is planned again.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "actors/scheduler/expert_load.h"
#include "actors/scheduler/token_budget_scheduler.h"
#include "actors/worker/worker_health.h"

namespace troupe {

struct scheduler_state {
  std::unique_ptr<token_budget_scheduler> core;
  caf::actor block_manager;
  caf::actor worker;
  caf::actor drafter;  // speculative decoding; null when off
  bool drafting = false;  // a draft_sync awaits its proposals
  std::unordered_map<request_id, caf::actor> clients;
  engine_stats last_logged;
  int empty_steps = 0;  // consecutive transactions that scheduled nothing
  bool txn_open = false;          // a transaction awaits its grant
  bool adapter_read = false;      // a LoRA adapter's read ended since the last schedule
  bool worker_holding = false;    // the worker holds the last plan's step for a next plan
  bool lost = false;              // the worker failed a step: no more steps
  std::shared_ptr<worker_health> health;  // marked when the worker fails (may be null)
  std::vector<step_output> stashed;  // outputs that arrived while a transaction was open
  std::chrono::steady_clock::time_point last_log_time;
  // log_expert_counts: the last reading and when it was taken; whether a
  // get_expert_counts is unanswered.
  expert_counts last_expert_counts;
  std::chrono::steady_clock::time_point last_expert_time;
  bool expert_query = false;
  bool log_expert_counts = false;
  static inline const char* name = "scheduler";
};

caf::behavior scheduler_actor(caf::stateful_actor<scheduler_state>* self,
                              scheduler_limits limits, caf::actor block_manager,
                              caf::actor worker, caf::actor drafter, lora_host_cache loras,
                              std::shared_ptr<worker_health> health);

}  // namespace troupe
