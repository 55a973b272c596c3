// Every message exchanged by troupe's actors, in one CAF type-ID block.
// PROTOCOL.md beside this file says who sends what to whom, when, and who
// owns the payload. All messages are local to the process; the inspect
// functions exist for CAF's type system and for readable debug logs.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/sampling_params.h"
#include "kernels/cpu/sampler.h"  // token_logprobs

namespace troupe {

using request_id = uint64_t;

enum class finish_reason : uint8_t { none, stop, length, abort, error };
const char* finish_reason_name(finish_reason r);

// client (request actor) -> scheduler: admit this request.
struct add_request_msg {
  request_id id = 0;
  std::vector<int32_t> prompt_ids;
  sampling_params params;
  caf::actor client;  // receives request_output
};

// engine -> scheduler: requests submitted together, admitted in one go (so
// an offline batch is scheduled as a batch, whatever the thread timing).
struct add_request_batch {
  std::vector<add_request_msg> requests;
};

// anyone -> scheduler: stop this request (client gone, stop string hit).
struct abort_request_msg {
  request_id id = 0;
};

// scheduler -> request actor, once per step that produced something for it.
struct request_output {
  request_id id = 0;
  std::vector<int32_t> new_token_ids;
  std::vector<token_logprobs> logprobs;         // parallel to new_token_ids when asked
  std::vector<token_logprobs> prompt_logprobs;  // new prompt positions (>= 1) when asked
  finish_reason finish = finish_reason::none;
  std::string error;  // finish == error: why
  int64_t num_prompt_tokens = 0;
  // Filled by the request actor when the engine has a tokenizer: the text
  // these tokens add (complete UTF-8, stop strings removed).
  std::string text;
  std::string stop_reason;  // the stop string that ended the request, if any
};

// scheduler -> block manager: one transaction a step. Frees are applied
// first, then grows in order; the scheduler mirrors the free count exactly,
// so a grow never fails unless its mirror is wrong (checked).
struct kv_transaction {
  std::vector<request_id> free_ids;
  std::vector<request_id> grow_ids;
  std::vector<int32_t> grow_num_blocks;  // blocks to append, parallel to grow_ids
};

// block manager -> scheduler: the blocks appended, parallel to grow_ids.
struct kv_grant {
  std::vector<std::vector<int32_t>> new_block_ids;
  int64_t num_blocks_free = 0;
};

// A request the worker has not seen (or lost through preemption): in full.
struct new_request_data {
  request_id id = 0;
  std::vector<int32_t> token_ids;  // prompt + output so far
  int64_t num_prompt_tokens = 0;
  sampling_params params;
  uint64_t seed = 0;  // resolved: the request's or one drawn by the engine
  std::vector<int32_t> block_ids;
  int64_t num_computed_tokens = 0;
  int64_t num_scheduled_tokens = 0;
  int64_t prompt_logprobs_start = 1;  // first prompt position still owed
};

// A request the worker already holds: only what changed.
struct cached_request_data {
  request_id id = 0;
  std::vector<int32_t> new_block_ids;
  int64_t num_scheduled_tokens = 0;
};

// scheduler -> worker: one step.
struct step_plan {
  int64_t step_id = 0;
  std::vector<new_request_data> new_requests;
  std::vector<cached_request_data> cached_requests;
  std::vector<request_id> finished_ids;  // finished, aborted or preempted: drop state
  int64_t total_num_scheduled_tokens = 0;
};

struct sampled_output {
  request_id id = 0;
  int32_t token_id = -1;  // -1: nothing sampled (a prefill chunk that is not the last)
  token_logprobs logprobs;
  std::vector<token_logprobs> prompt_logprobs;
};

// worker -> scheduler: the step's results.
struct step_output {
  int64_t step_id = 0;
  std::vector<sampled_output> outputs;
  double execute_seconds = 0;
};

// scheduler -> whoever asks (get_stats): counters since start.
struct engine_stats {
  int64_t num_requests_finished = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_computed_tokens = 0;  // prompt tokens actually run through the model
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_blocks_total = 0;
  int64_t num_blocks_free = 0;
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.n, x.temperature, x.top_p, x.top_k,
           x.min_p, x.presence_penalty, x.frequency_penalty, x.repetition_penalty, x.has_seed,
           x.seed, x.max_tokens, x.ignore_eos, x.stop_token_ids, x.stop,
           x.include_stop_str_in_output, x.skip_special_tokens, x.logprobs, x.prompt_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.token_id, x.logprob, x.top_ids,
           x.top_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, add_request_msg& x) {
  return f(caf::meta::type_name("add_request_msg"), x.id, x.prompt_ids, x.params, x.client);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, add_request_batch& x) {
  return f(caf::meta::type_name("add_request_batch"), x.requests);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_request_msg& x) {
  return f(caf::meta::type_name("abort_request_msg"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_output& x) {
  return f(caf::meta::type_name("request_output"), x.id, x.new_token_ids, x.logprobs,
           x.prompt_logprobs, x.finish, x.error, x.num_prompt_tokens, x.text, x.stop_reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_transaction& x) {
  return f(caf::meta::type_name("kv_transaction"), x.free_ids, x.grow_ids, x.grow_num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_grant& x) {
  return f(caf::meta::type_name("kv_grant"), x.new_block_ids, x.num_blocks_free);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, new_request_data& x) {
  return f(caf::meta::type_name("new_request_data"), x.id, x.token_ids, x.num_prompt_tokens,
           x.params, x.seed, x.block_ids, x.num_computed_tokens, x.num_scheduled_tokens,
           x.prompt_logprobs_start);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cached_request_data& x) {
  return f(caf::meta::type_name("cached_request_data"), x.id, x.new_block_ids,
           x.num_scheduled_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.new_requests, x.cached_requests,
           x.finished_ids, x.total_num_scheduled_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_output& x) {
  return f(caf::meta::type_name("sampled_output"), x.id, x.token_id, x.logprobs,
           x.prompt_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_output& x) {
  return f(caf::meta::type_name("step_output"), x.step_id, x.outputs, x.execute_seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.num_requests_finished, x.num_prompt_tokens,
           x.num_generated_tokens, x.num_computed_tokens, x.num_preemptions, x.num_steps,
           x.num_running, x.num_waiting, x.num_blocks_total, x.num_blocks_free,
           x.prefix_cache_queries, x.prefix_cache_hits);
}

}  // namespace troupe

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(troupe, (troupe::sampling_params))
CAF_ADD_TYPE_ID(troupe, (troupe::token_logprobs))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_batch))
CAF_ADD_TYPE_ID(troupe, (troupe::abort_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::request_output))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_transaction))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_grant))
CAF_ADD_TYPE_ID(troupe, (troupe::new_request_data))
CAF_ADD_TYPE_ID(troupe, (troupe::cached_request_data))
CAF_ADD_TYPE_ID(troupe, (troupe::step_plan))
CAF_ADD_TYPE_ID(troupe, (troupe::sampled_output))
CAF_ADD_TYPE_ID(troupe, (troupe::step_output))
CAF_ADD_TYPE_ID(troupe, (troupe::engine_stats))
CAF_ADD_ATOM(troupe, troupe::atoms, get_stats, "get_stats")
CAF_ADD_ATOM(troupe, troupe::atoms, log_stats, "log_stats")
CAF_ADD_ATOM(troupe, troupe::atoms, shutdown, "shutdown")
CAF_END_TYPE_ID_BLOCK(troupe)
