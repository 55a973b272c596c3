// token_budget_scheduler: vLLM v1's scheduling algorithm as a plain class.
// There are no prefill and decode phases, only computed versus needed
// tokens: each step gives running requests their tokens first (one for a
// decode, a chunk for a prefill), then admits waiting ones, all under
// `max_num_batched_tokens` and `max_num_seqs`. A prompt longer than the
// remaining budget is chunked when chunked prefill is on.
//
// KV blocks: the scheduler mirrors the block manager's free-block count
// exactly (the block manager changes only through this scheduler's
// transactions), so it decides admission and preemption locally and sends one
// transaction a step that always fits. When a running request cannot grow,
// the newest running request is preempted by recompute (blocks freed, state
// reset, back to the front of the waiting queue); it resumes with exactly the
// tokens it had, and its sampling is keyed by (seed, output index), so its
// output is unchanged.
//
// A step is three calls, always in this order: schedule() -> commit(grant)
// -> update(output). One step at a time (lockstep with the worker). Plain
// class, no CAF: the scheduler actor's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/messages.h"

namespace troupe {

struct scheduler_limits {
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  int64_t max_model_len = 4096;
  int64_t block_size = 16;
  int64_t num_blocks_usable = 0;  // excluding the null block
  bool enable_chunked_prefill = true;
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0;  // seeds requests that bring none
};

class token_budget_scheduler {
 public:
  explicit token_budget_scheduler(const scheduler_limits& limits);

  // Queues a request; "" on success, else why it can never run (too long for
  // max_model_len or for the whole KV cache).
  std::string add_request(request_id id, std::vector<int32_t> prompt_ids,
                          const sampling_params& params);

  // Finishes a request with finish_reason::abort now, or, while a step is in
  // flight, when that step returns (so the block mirror never changes between
  // schedule() and commit()). Unknown ids are ignored.
  void abort_request(request_id id);

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  bool step_in_flight() const { return in_flight_; }
  // Blocks of finished requests not yet returned to the block manager: a
  // transaction (schedule/commit with no requests) should carry them back.
  bool has_pending_frees() const { return !pending_free_.empty(); }

  // Phase 1: choose this step's requests and tokens; the KV transaction.
  kv_transaction schedule();
  // Phase 2: the block manager answered; the worker's plan. Empty plan (no
  // requests) when nothing could be scheduled.
  step_plan commit(const kv_grant& grant);
  // Phase 3: the worker answered; append tokens, apply stop rules.
  void update(const step_output& output);

  // Outputs for request actors produced since the last call.
  std::vector<request_output> take_outputs();

  engine_stats stats() const;
  int64_t num_blocks_free() const { return num_blocks_free_; }

 private:
  struct request_state {
    request_id id = 0;
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> output_ids;
    sampling_params params;
    uint64_t seed = 0;
    int64_t num_computed_tokens = 0;
    int64_t num_scheduled_tokens = 0;  // this step
    std::vector<int32_t> block_ids;
    int32_t num_new_blocks = 0;  // this step
    bool known_to_worker = false;
    bool aborted = false;
    int64_t prompt_logprobs_next = 1;  // first prompt position not yet delivered
    int64_t num_tokens() const {
      return static_cast<int64_t>(prompt_ids.size() + output_ids.size());
    }
  };
  using request_ptr = std::shared_ptr<request_state>;

  int64_t blocks_needed(const request_state& r, int64_t num_new_tokens) const;
  bool schedule_running(kv_transaction& txn, int64_t& budget);
  void schedule_waiting(kv_transaction& txn, int64_t& budget);
  void reserve(request_state& r, int64_t num_new_tokens, kv_transaction& txn, int64_t& budget);
  void preempt(const request_ptr& victim, kv_transaction& txn);
  void release_blocks(request_state& r, kv_transaction& txn);
  void finish(const request_ptr& r, finish_reason reason, std::string error = {});
  finish_reason check_stop(const request_state& r, int32_t token) const;
  void apply_sample(request_state& r, const sampled_output& out, request_output& msg);
  void finish_pending_aborts();

  scheduler_limits limits_;
  std::mt19937_64 seed_rng_;
  std::unordered_map<request_id, request_ptr> requests_;
  std::deque<request_ptr> waiting_;
  std::vector<request_ptr> running_;
  std::vector<request_ptr> scheduled_;  // this step, in plan order
  std::vector<request_id> pending_free_;  // blocks to free in the next transaction
  std::vector<request_id> pending_drop_;  // worker must drop these ids
  std::vector<request_output> outputs_;
  std::vector<request_ptr> pending_aborts_;  // aborted while a step was in flight
  int64_t num_blocks_free_ = 0;
  int64_t step_id_ = 0;
  bool in_flight_ = false;
  engine_stats stats_;
};

}  // namespace troupe
