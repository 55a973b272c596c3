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
  // Parallel sampling: the request (same prompt, submitted just before) whose
  // prefill this one shares. Its first token is sampled from that request's
  // last prompt logits, then it forks the prompt's KV blocks (copy-on-write).
  request_id fork_of = 0;
  // The API request this sequence belongs to, for fair sharing (0: its own
  // id; a fork is in its leader's group).
  request_id group = 0;
};

// engine -> scheduler: requests submitted together, admitted in one go (so
// an offline batch is scheduled as a batch, whatever the thread timing).
struct add_request_batch {
  std::vector<add_request_msg> requests;
};

// engine or request actor -> scheduler: stop these requests (client gone,
// stop string hit). One message for all the sequences of an API request, so
// they are released together.
struct abort_request_msg {
  std::vector<request_id> ids;
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

// A running request's growth this step (part of a kv_transaction).
struct kv_grow {
  request_id id = 0;
  std::vector<int32_t> new_token_ids;  // tokens learnt since the last transaction
  int64_t num_tokens_after = 0;        // tokens computed once this step is done
};

// A sibling starting to share its leader's prompt blocks (part of a
// kv_transaction; applied before frees, so a leader that has just finished
// still lends its blocks).
struct kv_fork {
  request_id parent = 0;
  request_id child = 0;
  std::vector<int32_t> token_ids;  // the child's known tokens
  // The tokens whose blocks it shares (the prompt): the parent may have
  // grown since the child was sampled, if the child sat a step out.
  int64_t num_shared_tokens = 0;
};

// A waiting request's admission (part of a kv_transaction).
struct kv_admit {
  request_id id = 0;
  std::vector<int32_t> token_ids;  // every known token (prompt + output so far)
  int64_t num_new_tokens = 0;      // the tokens the budget gave it this step
  bool use_prefix_cache = false;   // off for prompt_logprobs requests
  bool swap_in = false;            // a swapped-out request: its host blocks come back
  int64_t num_computed_tokens = 0;  // swap_in: tokens its swapped blocks hold
};

// scheduler -> block manager: one transaction a step. Frees are applied
// first, then grows (which always fit: the scheduler counts exact needs
// against the free count of the last grant), then admissions in order, each
// looking up the prefix cache; the first admission that does not fit and
// all after it are refused.
struct kv_transaction {
  std::vector<request_id> swap_out_ids;  // preempted by swap: applied first
  std::vector<kv_fork> forks;
  std::vector<request_id> free_ids;
  std::vector<kv_grow> grows;
  std::vector<kv_admit> admits;
};

struct kv_admit_result {
  bool admitted = false;
  int64_t num_cached_tokens = 0;  // prefix-cache hit, a multiple of block_size
  std::vector<int32_t> block_ids;  // hits first, then fresh blocks
};

// block manager -> scheduler.
struct kv_grant {
  std::vector<std::vector<int32_t>> grow_block_ids;  // parallel to grows
  // Parallel to grows: 0 when a grow did not fit (the scheduler's free count
  // is an estimate once blocks are shared); it and every later grow and
  // admission are refused, and those requests sit this step out.
  std::vector<uint8_t> grow_ok;
  // Parallel to grows: the block-table index copy-on-write replaced (-1:
  // none) and the block now there.
  std::vector<int32_t> grow_cow_index, grow_cow_block;
  // Copy-on-write: device block copies (a shared, partly filled block about
  // to be written), run before the forward pass, after swaps.
  std::vector<int32_t> copy_src, copy_dst;
  std::vector<kv_admit_result> admits;               // parallel to admits
  int64_t num_blocks_free = 0;                       // after the transaction
  int64_t prefix_cache_queries = 0;  // tokens looked up, since start
  int64_t prefix_cache_hits = 0;     // tokens found, since start
  // Block copies for the worker: device block -> host block, and back.
  std::vector<int32_t> swap_out_src, swap_out_dst, swap_in_src, swap_in_dst;
  int64_t num_cpu_blocks_free = 0;
};

// A sibling to sample from a leader's last prompt logits (parallel sampling).
struct fork_child {
  request_id id = 0;
  uint64_t seed = 0;
  sampling_params params;
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
  std::vector<fork_child> fork_children;  // on the step that ends the prompt
};

// A request the worker already holds: only what changed.
struct cached_request_data {
  request_id id = 0;
  std::vector<int32_t> new_block_ids;
  int64_t num_scheduled_tokens = 0;
  std::vector<fork_child> fork_children;  // on the step that ends the prompt
  // Copy-on-write replaced this block-table entry: (index, new block id).
  std::vector<int32_t> replaced_index, replaced_block;
};

// scheduler -> worker: one step.
struct step_plan {
  int64_t step_id = 0;
  std::vector<new_request_data> new_requests;
  std::vector<cached_request_data> cached_requests;
  std::vector<request_id> finished_ids;  // finished, aborted or preempted: drop state
  int64_t total_num_scheduled_tokens = 0;
  // KV block copies to run before the forward pass, swap-outs first.
  std::vector<int32_t> swap_out_src, swap_out_dst;  // device block -> host block
  std::vector<int32_t> swap_in_src, swap_in_dst;    // host block -> device block
  std::vector<int32_t> copy_src, copy_dst;          // device -> device (copy-on-write)
};

struct fork_sample {
  request_id id = 0;
  int32_t token_id = -1;
  token_logprobs logprobs;
};

struct sampled_output {
  request_id id = 0;
  int32_t token_id = -1;  // -1: nothing sampled (a prefill chunk that is not the last)
  token_logprobs logprobs;
  std::vector<token_logprobs> prompt_logprobs;
  std::vector<fork_sample> fork_samples;  // first tokens of fork_children
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
  int64_t num_steps_ahead = 0;  // steps planned while the previous one ran (async scheduling)
  int64_t num_running = 0;
  int64_t num_waiting = 0;         // sequences, samples parked with a waiting leader included
  int64_t num_waiting_tokens = 0;  // prompt tokens those still have to compute
  int64_t num_blocks_total = 0;
  int64_t num_blocks_free = 0;
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_swap_outs = 0;  // preemptions by swap (included in num_preemptions)
  int64_t num_swapped = 0;    // requests swapped out now
  int64_t num_cpu_blocks_total = 0;
  int64_t num_cpu_blocks_free = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.n, x.temperature, x.top_p, x.top_k,
           x.min_p, x.presence_penalty, x.frequency_penalty, x.repetition_penalty, x.has_seed,
           x.seed, x.max_tokens, x.ignore_eos, x.stop_token_ids, x.stop,
           x.include_stop_str_in_output, x.skip_special_tokens, x.logprobs, x.prompt_logprobs,
           x.priority);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.token_id, x.logprob, x.rank, x.top_ids,
           x.top_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, add_request_msg& x) {
  return f(caf::meta::type_name("add_request_msg"), x.id, x.prompt_ids, x.params, x.client,
           x.fork_of, x.group);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, add_request_batch& x) {
  return f(caf::meta::type_name("add_request_batch"), x.requests);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_request_msg& x) {
  return f(caf::meta::type_name("abort_request_msg"), x.ids);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_output& x) {
  return f(caf::meta::type_name("request_output"), x.id, x.new_token_ids, x.logprobs,
           x.prompt_logprobs, x.finish, x.error, x.num_prompt_tokens, x.text, x.stop_reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_grow& x) {
  return f(caf::meta::type_name("kv_grow"), x.id, x.new_token_ids, x.num_tokens_after);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_fork& x) {
  return f(caf::meta::type_name("kv_fork"), x.parent, x.child, x.token_ids, x.num_shared_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fork_child& x) {
  return f(caf::meta::type_name("fork_child"), x.id, x.seed, x.params);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fork_sample& x) {
  return f(caf::meta::type_name("fork_sample"), x.id, x.token_id, x.logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_admit& x) {
  return f(caf::meta::type_name("kv_admit"), x.id, x.token_ids, x.num_new_tokens,
           x.use_prefix_cache, x.swap_in, x.num_computed_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_transaction& x) {
  return f(caf::meta::type_name("kv_transaction"), x.swap_out_ids, x.forks, x.free_ids, x.grows,
           x.admits);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_admit_result& x) {
  return f(caf::meta::type_name("kv_admit_result"), x.admitted, x.num_cached_tokens, x.block_ids);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_grant& x) {
  return f(caf::meta::type_name("kv_grant"), x.grow_block_ids, x.grow_ok, x.grow_cow_index,
           x.grow_cow_block, x.copy_src,
           x.copy_dst, x.admits, x.num_blocks_free,
           x.prefix_cache_queries, x.prefix_cache_hits, x.swap_out_src, x.swap_out_dst,
           x.swap_in_src, x.swap_in_dst, x.num_cpu_blocks_free);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, new_request_data& x) {
  return f(caf::meta::type_name("new_request_data"), x.id, x.token_ids, x.num_prompt_tokens,
           x.params, x.seed, x.block_ids, x.num_computed_tokens, x.num_scheduled_tokens,
           x.prompt_logprobs_start, x.fork_children);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cached_request_data& x) {
  return f(caf::meta::type_name("cached_request_data"), x.id, x.new_block_ids,
           x.num_scheduled_tokens, x.fork_children, x.replaced_index, x.replaced_block);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.new_requests, x.cached_requests,
           x.finished_ids, x.total_num_scheduled_tokens, x.swap_out_src, x.swap_out_dst,
           x.swap_in_src, x.swap_in_dst, x.copy_src, x.copy_dst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_output& x) {
  return f(caf::meta::type_name("sampled_output"), x.id, x.token_id, x.logprobs,
           x.prompt_logprobs, x.fork_samples);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_output& x) {
  return f(caf::meta::type_name("step_output"), x.step_id, x.outputs, x.execute_seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.num_requests_finished, x.num_prompt_tokens,
           x.num_generated_tokens, x.num_computed_tokens, x.num_preemptions, x.num_steps,
           x.num_steps_ahead, x.num_running, x.num_waiting, x.num_waiting_tokens, x.num_blocks_total, x.num_blocks_free,
           x.prefix_cache_queries, x.prefix_cache_hits, x.num_swap_outs, x.num_swapped,
           x.num_cpu_blocks_total, x.num_cpu_blocks_free);
}

}  // namespace troupe

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(troupe, (troupe::sampling_params))
CAF_ADD_TYPE_ID(troupe, (troupe::token_logprobs))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_batch))
CAF_ADD_TYPE_ID(troupe, (troupe::abort_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::request_output))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_grow))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_fork))
CAF_ADD_TYPE_ID(troupe, (troupe::fork_child))
CAF_ADD_TYPE_ID(troupe, (troupe::fork_sample))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_admit))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_transaction))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_admit_result))
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
CAF_ADD_ATOM(troupe, troupe::atoms, step, "step")
CAF_ADD_ATOM(troupe, troupe::atoms, flush, "flush")
CAF_END_TYPE_ID_BLOCK(troupe)
