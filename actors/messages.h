// Every message exchanged by troupe's actors, in one CAF type-ID block.
// PROTOCOL.md beside this file says who sends what to whom, when, and who
// owns the payload. Most messages are local to the process; with pipeline
// stages in several processes, the plans, outputs and the stages' messages
// below cross CAF's network layer, serialized by the inspect functions.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/sampling_params.h"
#include "kernels/cpu/sampler.h"  // token_logprobs
#include "model/expert_counts.h"

namespace troupe {

using request_id = uint64_t;

enum class finish_reason : uint8_t { none, stop, length, abort, error };
const char* finish_reason_name(finish_reason r);

// One request to admit: an element of add_request_batch (engine ->
// scheduler; never sent alone). `client` is the request's actor.
struct add_request_msg {
  request_id id = 0;
  std::vector<int32_t> prompt_ids;
  sampling_params params;
  caf::actor client;  // receives request_output
  // Parallel sampling: the request (same prompt, submitted just before) whose
  // prefill this one shares, if that request is still waiting (not admitted,
  // no prompt logprobs): its first token is sampled from that request's last
  // prompt logits, then it forks the prompt's KV blocks (copy-on-write). Else,
  // or when admission leaves it no running slot, it prefills on its own, in
  // that request's group.
  request_id fork_of = 0;
  // The API request this sequence belongs to, for fair sharing (0: its own
  // id; a fork is in its leader's group).
  request_id group = 0;
};

// engine -> scheduler: requests submitted together (engine::submit_batch;
// engine::submit sends a batch of one), admitted in one go (so an offline
// batch is scheduled as a batch, whatever the thread timing). No reply; a
// request rejected at admission gets one request_output with
// finish_reason::error.
struct add_request_batch {
  std::vector<add_request_msg> requests;
};

// -> scheduler: stop these requests; each one not yet finished finishes with
// finish_reason::abort (no reply). Senders: the engine (engine::abort: client
// gone, caller aborts), one message for all the sequences of an API request
// so they are released together; and a request actor, with its own id, when
// a stop string ended its output (it has already delivered that output as
// its final one, finish_reason::stop, and quit). Unknown or finished ids are
// ignored.
struct abort_request_msg {
  std::vector<request_id> ids;
};

// scheduler -> request actor: after each step that produced tokens or prompt
// logprobs for it, and a final one (finish != none), which may carry no
// tokens (an abort; an error at admission). The request actor fills `text`
// and `stop_reason`, hands it to its request_sink, and quits after the final
// one.
struct request_output {
  request_id id = 0;
  std::vector<int32_t> new_token_ids;
  std::vector<token_logprobs> logprobs;         // parallel to new_token_ids when asked
  std::vector<token_logprobs> prompt_logprobs;  // new prompt positions (>= 1) when asked
  finish_reason finish = finish_reason::none;
  std::string error;  // finish == error: why
  // finish == error because the engine's workers are gone (a lost rank):
  // the server answers 503, not 400.
  bool unavailable = false;
  int64_t num_prompt_tokens = 0;
  // Filled by the request actor when the engine has a tokenizer: the text
  // these tokens add (complete UTF-8, stop strings removed).
  std::string text;
  std::string stop_reason;  // the stop string that ended the request, if any
};

// A request whose last step rejected draft tokens (speculative decoding;
// part of a kv_transaction, applied first): only its first num_tokens
// tokens' KV is valid, and its blocks past ceil(num_tokens / block_size)
// (they held only rejected drafts, never registered in the prefix cache)
// go back to the pool.
struct kv_rollback {
  request_id id = 0;
  int64_t num_tokens = 0;
};

// A running request's growth this step (part of a kv_transaction).
struct kv_grow {
  request_id id = 0;
  std::vector<int32_t> new_token_ids;  // tokens learnt since the last transaction
  // Tokens computed once this step is done, draft tokens included (their
  // ids never travel here: the prefix cache registers only blocks of known,
  // verified tokens).
  int64_t num_tokens_after = 0;
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
  int64_t lora_id = 0;  // its LoRA adapter (0: base): keys its prefix-cache hashes
};

// scheduler -> block manager: one transaction a step (or a request-less one
// that only returns the blocks of finished requests); the reply is a
// kv_grant. kv_ledger::apply applies, in this order: rollbacks, swap-outs,
// forks (before frees, so a leader that has just finished still lends its
// blocks), frees, grows, then admissions in order (each looks up the prefix
// cache once; a swap-in instead gets fresh device blocks for its host
// blocks). Once blocks are shared the scheduler's free count is an estimate:
// a grow that does not fit is refused (kv_grant::grow_ok 0) with every later
// grow and every admission, and the first admission that does not fit is
// refused with all after it. Refused requests sit the step out.
struct kv_transaction {
  std::vector<kv_rollback> rollbacks;    // rejected drafts: applied first
  std::vector<request_id> swap_out_ids;  // preempted by swap: after rollbacks, before forks
  std::vector<kv_fork> forks;
  std::vector<request_id> free_ids;
  std::vector<kv_grow> grows;
  std::vector<kv_admit> admits;
};

// The block manager's answer to one kv_admit (part of a kv_grant).
struct kv_admit_result {
  bool admitted = false;
  // Tokens whose KV the blocks already hold: the prefix-cache hit (a
  // multiple of block_size), or for a swap-in the kv_admit's
  // num_computed_tokens.
  int64_t num_cached_tokens = 0;
  // Hits first, then fresh blocks (a swap-in: fresh blocks only, the first
  // ones receiving its host blocks).
  std::vector<int32_t> block_ids;
};

// block manager -> scheduler: the reply to a kv_transaction.
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

// A sibling to sample from a leader's last prompt logits (parallel sampling;
// part of new_request_data / cached_request_data, on the step that ends the
// leader's prompt).
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
  // Speculative decoding: draft tokens to verify, placed after its last
  // token (num_scheduled_tokens counts them: 1 + spec_token_ids.size()).
  std::vector<int32_t> spec_token_ids;
};

// scheduler -> worker: one step; the reply is its step_output, in plan
// order. Not sent when a transaction left nothing to run (no request
// scheduled and no swap copies).
struct step_plan {
  int64_t step_id = 0;
  std::vector<new_request_data> new_requests;
  std::vector<cached_request_data> cached_requests;
  std::vector<request_id> finished_ids;  // finished, aborted or preempted: drop state
  int64_t total_num_scheduled_tokens = 0;
  // KV block copies to run before the forward pass: swap-outs, swap-ins,
  // then copy-on-write copies.
  std::vector<int32_t> swap_out_src, swap_out_dst;  // device block -> host block
  std::vector<int32_t> swap_in_src, swap_in_dst;    // host block -> device block
  std::vector<int32_t> copy_src, copy_dst;          // device -> device (copy-on-write)
};

// A fork child's first token, sampled from its leader's last prompt logits
// with the child's own seed (part of sampled_output).
struct fork_sample {
  request_id id = 0;
  int32_t token_id = -1;
  token_logprobs logprobs;
};

// One request's result in a step (part of step_output).
struct sampled_output {
  request_id id = 0;
  // The tokens this step emits for it: none for a prefill chunk that is not
  // the last; one for a decode; with k draft tokens verified, the accepted
  // drafts and then the target model's own next token (1 to k + 1).
  std::vector<int32_t> token_ids;
  std::vector<token_logprobs> logprobs;  // parallel to token_ids when asked
  int32_t num_draft_tokens = 0;          // drafts verified (token_ids.size() - 1 accepted)
  std::vector<token_logprobs> prompt_logprobs;
  std::vector<fork_sample> fork_samples;  // first tokens of fork_children
};

// worker -> scheduler: the step's results, the reply to its step_plan, in
// plan order (with async scheduling once the next plan has been launched
// behind it, or on flush).
struct step_output {
  int64_t step_id = 0;
  std::vector<sampled_output> outputs;
  double execute_seconds = 0;
};

// scheduler -> whoever asks (get_stats): counters since start and current
// sizes (running, waiting, swapped, free blocks).
struct engine_stats {
  int64_t num_requests_finished = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_computed_tokens = 0;  // tokens run through the model (prefix hits excluded)
  int64_t num_preemptions = 0;
  // KV computed again after preemptions by recompute (the victims' computed
  // tokens when preempted; prefix-cache hits at re-admission spare some).
  int64_t num_recomputed_tokens = 0;
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
  // KV blocks copied to host memory and back (swap-outs, swap-ins), and
  // the bytes a block holds on a rank (all layers, K and V), 0: unknown.
  int64_t num_blocks_swapped_out = 0;
  int64_t num_blocks_swapped_in = 0;
  int64_t kv_bytes_per_block = 0;
  // Seconds requests spent preempted, from each preemption until the
  // request runs again (summed over requests; one still preempted counts
  // when it resumes).
  double preempted_seconds = 0;
  int64_t num_cpu_blocks_total = 0;
  int64_t num_cpu_blocks_free = 0;
  // Speculative decoding (vLLM's spec_decode counters): verifications (one
  // per request and step with drafts), draft tokens, accepted ones, and
  // accepted ones by draft position.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  // LoRA (max_loras > 0): the distinct adapters (lora_registry ids) of the
  // running and of the waiting requests, ascending.
  int64_t max_loras = 0;
  std::vector<int64_t> running_lora_ids, waiting_lora_ids;
  // The cache's configuration (vLLM's cache_config_info): tokens a block,
  // kv_cache_dtype as resolved (auto or fp8_e4m3), prefix caching on.
  int64_t block_size = 0;
  std::string kv_cache_dtype;
  bool enable_prefix_caching = false;
};

// scheduler -> drafter: what running requests emitted since the last sync
// and whose drafts to propose for the next step.
struct draft_sync {
  std::vector<request_id> ids;               // requests with tokens to add
  std::vector<std::vector<int32_t>> tokens;  // parallel: the tokens
  std::vector<uint8_t> whole;  // parallel: 1: tokens are its whole history (new to the drafter)
  std::vector<request_id> removed;           // finished, aborted: forget them
  std::vector<request_id> propose_ids;       // drafts wanted for these
  std::vector<int32_t> propose_limits;       // parallel: at most this many tokens
};

// drafter -> scheduler: the reply to a draft_sync (only non-empty proposals).
struct draft_proposals {
  std::vector<request_id> ids;
  std::vector<std::vector<int32_t>> tokens;
};

// Pipeline stages in several processes (docs/parallelism.md). A stage's
// activations to the next stage's inbox (actor_pipe, CPU backend): a
// hidden-state or residual tensor of rank `from`, float32.
struct pipe_activations {
  int32_t from = 0;
  std::vector<float> data;
};

// `troupe worker` -> the head's rendezvous: a process that will run a
// pipeline stage. `checks` are "key=value" lines (build, model, sizes and
// limits) the head compares with its own; `inboxes` are the stage's ranks'
// pipe inboxes (actor_pipe), one per tensor-parallel rank.
struct worker_hello {
  int32_t stage = -1;  // asked for (--rank-offset / T); -1: the head picks
  std::vector<std::string> checks;
  std::vector<caf::actor> inboxes;
};

// The rendezvous' reply to worker_hello, once every stage has said hello:
// the stage to run and every rank's inbox (stage-major), or why not. On
// cuda the stages meet in NCCL pipeline groups instead of inboxes:
// `pipeline_ids` are their ids (ncclUniqueId bytes), one per
// tensor-parallel rank t, made by the head.
struct worker_welcome {
  int32_t stage = -1;
  std::vector<caf::actor> inboxes;
  std::string error;  // refused (a mismatch, a stage taken): the worker exits
  std::vector<std::string> pipeline_ids;
};

// `troupe worker` -> the rendezvous: its stage is loaded; its ranks'
// worker actors (stage-major within the stage), or why it failed.
// `num_blocks`: the KV blocks its memory plan allows (cuda; the head runs
// every stage with the smallest), 0 on the cpu backend (the limits fix them).
struct worker_ready {
  int32_t stage = -1;
  std::vector<caf::actor> ranks;
  std::string error;
  caf::actor control;  // the worker process's own actor (shutdown)
  int64_t num_blocks = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, output_constraint& x) {
  return f(caf::meta::type_name("output_constraint"), x.kind, x.text, x.choices, x.any_whitespace,
           x.strict);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.n, x.temperature, x.top_p, x.top_k,
           x.min_p, x.presence_penalty, x.frequency_penalty, x.repetition_penalty, x.has_seed,
           x.seed, x.max_tokens, x.ignore_eos, x.stop_token_ids, x.stop,
           x.include_stop_str_in_output, x.skip_special_tokens, x.logprobs, x.prompt_logprobs,
           x.priority, x.lora_id, x.logit_bias, x.min_tokens, x.bad_words_ids,
           x.allowed_token_ids, x.structured);
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
           x.prompt_logprobs, x.finish, x.error, x.unavailable, x.num_prompt_tokens, x.text,
           x.stop_reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_rollback& x) {
  return f(caf::meta::type_name("kv_rollback"), x.id, x.num_tokens);
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
           x.use_prefix_cache, x.swap_in, x.num_computed_tokens, x.lora_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_transaction& x) {
  return f(caf::meta::type_name("kv_transaction"), x.rollbacks, x.swap_out_ids, x.forks, x.free_ids, x.grows,
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
           x.num_scheduled_tokens, x.fork_children, x.replaced_index, x.replaced_block,
           x.spec_token_ids);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.new_requests, x.cached_requests,
           x.finished_ids, x.total_num_scheduled_tokens, x.swap_out_src, x.swap_out_dst,
           x.swap_in_src, x.swap_in_dst, x.copy_src, x.copy_dst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_output& x) {
  return f(caf::meta::type_name("sampled_output"), x.id, x.token_ids, x.logprobs,
           x.num_draft_tokens, x.prompt_logprobs, x.fork_samples);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_output& x) {
  return f(caf::meta::type_name("step_output"), x.step_id, x.outputs, x.execute_seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.num_requests_finished, x.num_prompt_tokens,
           x.num_generated_tokens, x.num_computed_tokens, x.num_preemptions, x.num_recomputed_tokens, x.num_steps,
           x.num_steps_ahead, x.num_running, x.num_waiting, x.num_waiting_tokens, x.num_blocks_total, x.num_blocks_free,
           x.prefix_cache_queries, x.prefix_cache_hits, x.num_swap_outs, x.num_swapped,
           x.num_blocks_swapped_out, x.num_blocks_swapped_in, x.kv_bytes_per_block,
           x.preempted_seconds,
           x.num_cpu_blocks_total, x.num_cpu_blocks_free, x.spec_num_drafts,
           x.spec_num_draft_tokens, x.spec_num_accepted_tokens, x.spec_accepted_per_pos,
           x.max_loras, x.running_lora_ids, x.waiting_lora_ids, x.block_size, x.kv_cache_dtype,
           x.enable_prefix_caching);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_counts& x) {
  return f(caf::meta::type_name("expert_counts"), x.experts, x.layers, x.counts);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_sync& x) {
  return f(caf::meta::type_name("draft_sync"), x.ids, x.tokens, x.whole, x.removed,
           x.propose_ids, x.propose_limits);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_proposals& x) {
  return f(caf::meta::type_name("draft_proposals"), x.ids, x.tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipe_activations& x) {
  return f(caf::meta::type_name("pipe_activations"), x.from, x.data);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_hello& x) {
  return f(caf::meta::type_name("worker_hello"), x.stage, x.checks, x.inboxes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_welcome& x) {
  return f(caf::meta::type_name("worker_welcome"), x.stage, x.inboxes, x.error, x.pipeline_ids);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_ready& x) {
  return f(caf::meta::type_name("worker_ready"), x.stage, x.ranks, x.error, x.control,
           x.num_blocks);
}

}  // namespace troupe

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(troupe, (troupe::sampling_params))
CAF_ADD_TYPE_ID(troupe, (troupe::token_logprobs))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::add_request_batch))
CAF_ADD_TYPE_ID(troupe, (troupe::abort_request_msg))
CAF_ADD_TYPE_ID(troupe, (troupe::request_output))
CAF_ADD_TYPE_ID(troupe, (troupe::kv_rollback))
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
CAF_ADD_TYPE_ID(troupe, (troupe::draft_sync))
CAF_ADD_TYPE_ID(troupe, (troupe::draft_proposals))
CAF_ADD_TYPE_ID(troupe, (troupe::pipe_activations))
CAF_ADD_TYPE_ID(troupe, (troupe::worker_hello))
CAF_ADD_TYPE_ID(troupe, (troupe::worker_welcome))
CAF_ADD_TYPE_ID(troupe, (troupe::worker_ready))
CAF_ADD_TYPE_ID(troupe, (troupe::expert_counts))
// Atoms: get_stats (anyone -> scheduler; reply engine_stats); log_stats
// (scheduler -> itself, every 5 s); step (scheduler -> itself: a retry after a transaction scheduled nothing);
// flush (scheduler -> worker: finish the launched steps and answer them);
// lora_read (the LoRA registry's loader thread -> scheduler: an
// adapter's read ended, requests waiting for it may be admitted);
// stage_results (worker group -> the workers of pipeline stages before the
// last, with the last stage's step_output: its tokens join their requests);
// shutdown (the head's engine, stopping -> each `troupe worker` process;
// reply: shutdown, then the worker exits 0); get_expert_counts (scheduler
// -> worker or worker group, with log_expert_counts; reply expert_counts).
CAF_ADD_ATOM(troupe, troupe::atoms, get_stats, "get_stats")
CAF_ADD_ATOM(troupe, troupe::atoms, log_stats, "log_stats")
CAF_ADD_ATOM(troupe, troupe::atoms, step, "step")
CAF_ADD_ATOM(troupe, troupe::atoms, flush, "flush")
CAF_ADD_ATOM(troupe, troupe::atoms, lora_read, "lora_read")
CAF_ADD_ATOM(troupe, troupe::atoms, stage_results, "stage_res")
CAF_ADD_ATOM(troupe, troupe::atoms, shutdown, "shutdown")
CAF_ADD_ATOM(troupe, troupe::atoms, get_expert_counts, "get_xcount")
CAF_END_TYPE_ID_BLOCK(troupe)
