// token_budget_scheduler: vLLM v1's scheduling algorithm as a plain class.
// There are no prefill and decode phases, only computed versus needed
// tokens: each step gives running requests their tokens first (one for a
// decode, a chunk for a prefill), then admits waiting ones, all under
// `max_num_batched_tokens` and `max_num_seqs`. A prompt longer than the
// remaining budget is chunked when chunked prefill is on.
//
// KV blocks: the scheduler keeps the block manager's free-block count from
// the last grant (the pool changes only through this scheduler's
// transactions) and plans against it: a running request's growth is counted
// exactly, an admission as if the prefix cache had nothing, and a release as
// the blocks no other request of this scheduler still holds (it counts the
// holders of every block). Hits on cached free blocks can still make the
// block manager short; it then refuses the grows or admissions that do not
// fit, those requests sit the step out, and the grant corrects the count. The block manager looks admissions up in the prefix
// cache; a hit starts the request with num_computed_tokens > 0. When a
// running request cannot grow, the newest running request is preempted
// (token_budget_scheduler_preempt.cpp) by recompute (blocks freed, state reset, back to the front of the waiting
// queue); it resumes with exactly the tokens it had (its full blocks are
// likely prefix-cache hits), and its sampling is keyed by (seed, output
// index), so its output is unchanged. With swap space (num_cpu_blocks > 0) a
// victim whose blocks fit in the free host blocks is swapped out instead: its
// KV is copied to host memory and copied back when it is admitted again,
// so nothing is recomputed.
//
// A step is three calls, always in this order: schedule() -> commit(grant)
// -> update(output). Lockstep: one step at a time. With async_scheduling, a
// second step may be scheduled and committed while one is in flight
// (can_schedule_ahead()), vLLM's async scheduling: every request of the
// in-flight step that samples there gets a placeholder token, which the
// next step computes (the worker takes its id on the device). Planning
// ahead is limited to what needs no host knowledge of that token: no
// preemption (all running requests must fit), no penalties or bad words of
// several tokens (the sampler reads output tokens), no parallel-sampling forks, no request verifying
// drafts in flight or with a drafter match (its next step waits for its
// tokens: actors/scheduler/token_budget_scheduler_spec.cpp), nothing past
// max_tokens or max_model_len. A request the in-flight step finishes (EOS,
// stop, abort) has its ahead-planned work dropped when that step returns;
// its blocks are freed in the next transaction, which is applied after the
// step that last used them on the device stream. Updates come in step
// order; a transaction is never open across an update.
//
// Pipeline micro-batches (pipeline_depth P > 1, async_scheduling off): up
// to P steps are in flight, each of requests no other in-flight step holds
// (a request's next input is sampled by the last stage, so it waits for its
// step), so every stage has a step to run (vLLM's batch queue). A step
// takes at most ceil(running / P) running requests; the ones in flight are
// skipped, so the micro-batches rotate through the running set. As with
// async scheduling, a step planned while others are in flight never
// preempts, and forks and copy-on-write wait for lockstep. Plain class, no
// CAF: the scheduler actor's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/messages.h"
#include "actors/scheduler/fair_share.h"
#include "actors/scheduler/kv_admission.h"
#include "actors/scheduler/spec_control.h"

namespace troupe {

struct scheduler_limits {
  int64_t max_num_batched_tokens = 2048;
  // The actor's stats line is followed by the experts' load (the core
  // ignores it).
  bool log_expert_counts = false;
  int64_t max_num_seqs = 256;
  // Running slots one group (API request) may hold; 0: max_num_seqs / 2.
  int64_t max_num_seqs_per_request = 0;
  int64_t max_model_len = 4096;
  int64_t block_size = 16;
  int64_t num_blocks_usable = 0;  // excluding the null block
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = false;
  int64_t num_cpu_blocks = 0;  // swap space in blocks; 0: preempt by recompute
  int64_t kv_bytes_per_block = 0;  // for the swap byte counts (engine_stats)
  bool fp8_kv_cache = false;       // (engine_stats: the cache's configuration)
  // scheduling_policy priority: running and waiting requests are kept in
  // (priority, arrival) order, so the lowest priority is preempted first.
  bool priority_policy = false;
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0;  // seeds requests that bring none
  bool async_scheduling = false;  // plan a step while the previous one runs
  // Pipeline parallelism: up to this many steps (micro-batches) in flight at
  // once, no request in two of them; each takes at most ceil(running /
  // pipeline_depth) running requests, so the micro-batches stay balanced
  // and every stage has one to run. 1: off.
  int64_t pipeline_depth = 1;
  // Speculative decoding: the most draft tokens a request verifies in a step
  // (0: off). Drafts come from the drafter (set_drafts); spec_control picks
  // how many of them each step verifies (spec_adaptive false: all of them).
  int32_t num_speculative_tokens = 0;
  bool spec_adaptive = true;
  // KV pressure (kv_admission.h): admit a waiting request only when the
  // running set, it included, is expected to fit to completion (off: vLLM's
  // rule, its next chunk fits). The engine turns it on (config
  // `kv_admission: reserve`, the default).
  bool reserve_kv = false;
  // LoRA: at most this many distinct adapters among the running requests
  // (the worker's device slots); a waiting request whose adapter would be
  // one too many waits, without holding back requests of resident adapters
  // or of the base. 0: no LoRA.
  int64_t max_loras = 0;
};

// The LoRA host cache admissions wait for (the engine's lora_registry):
// `prefetch` answers whether an adapter's weights are in host memory
// (ready), being read (loading: the scheduler actor is woken when a read
// ends; `start_read` queues one), neither (absent, without `start_read`)
// or unreadable (failed: the request ends with `error`); `protect` gets the
// adapters of the running and just admitted requests after each step's
// choice, which the cache keeps. Unset: every adapter is ready.
struct lora_host_cache {
  enum class state { ready, loading, absent, failed };
  std::function<state(int64_t lora_id, std::string& error, bool start_read)> prefetch;
  std::function<void(std::vector<int64_t> lora_ids)> protect;
};

class token_budget_scheduler {
 public:
  explicit token_budget_scheduler(const scheduler_limits& limits);
  void set_lora_cache(lora_host_cache cache) { lora_cache_ = std::move(cache); }
  // The last schedule left a request waiting for its adapter's read.
  bool waiting_for_adapters() const { return waiting_for_adapters_; }

  // Queues a request; "" on success, else why it can never run (too long for
  // max_model_len or for the whole KV cache). With fork_of naming a waiting
  // request (not yet admitted) with the same prompt (parallel sampling,
  // n > 1), this request is parked with it, admitted with it as far as
  // slots allow (else unparked), and waits until its prompt is computed:
  // its first token is sampled from the same logits, then it shares the
  // prompt's blocks (copy-on-write for a partly filled last block). `group` names the
  // API request the sequence belongs to (0: its own id; a fork joins its
  // leader's group).
  std::string add_request(request_id id, std::vector<int32_t> prompt_ids,
                          const sampling_params& params, request_id fork_of = 0,
                          request_id group = 0);

  // Finishes requests with finish_reason::abort now, or, those in a step in
  // flight, when that step returns (so the block mirror never changes between
  // schedule() and commit()). All of them are marked first, so a leader's
  // parked samples aborted with it never start on their own. Unknown ids
  // are ignored.
  void abort_requests(const std::vector<request_id>& ids);
  void abort_request(request_id id) { abort_requests({id}); }

  // "" when every invariant above holds, else the first one broken (for
  // tests and debugging; O(requests + blocks)).
  std::string check_invariants() const;

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  // Transactions open or steps committed and not yet updated.
  bool step_in_flight() const { return in_flight_ > 0; }
  int steps_in_flight() const { return in_flight_; }
  bool async_scheduling() const { return limits_.async_scheduling; }
  // Steps that may be in flight at once: 1 (lockstep), 2 (async
  // scheduling) or pipeline_depth (micro-batches).
  int max_steps_in_flight() const;
  // With steps in flight (fewer than max_steps_in_flight): whether a next
  // step can be planned now without their results (see above).
  bool can_schedule_ahead() const;
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

  // Speculative decoding (actors/scheduler/token_budget_scheduler_spec.cpp).
  // Whether the drafter has news: tokens emitted or requests finished since
  // the last take_draft_sync (always false with speculation off).
  bool wants_draft_sync() const { return draft_news_; }
  // What the drafter must learn, and whose drafts to propose: decoding
  // requests the control expects a gain from (spec_control::worth_drafting),
  // each limited by max_tokens and max_model_len. `blocking`: one of them
  // had a match at its last probe and can verify drafts in the next step (no
  // step in flight for it), so that step should wait for the proposals; the
  // others' only tell whether a match is there now. Empty (the tokens kept
  // for later) when no proposal is wanted: the drafter learns a history
  // when it is next asked about it.
  draft_sync take_draft_sync(bool& blocking);
  // Proposals for the requests' current histories; a request that has
  // emitted tokens since (a stale proposal) ignores its own.
  void set_drafts(const draft_proposals& proposals);

 private:
  struct request_state {
    request_id id = 0;
    request_id group = 0;  // the API request it belongs to (fair_share)
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
    int64_t num_tokens_sent_to_kv = 0;  // tokens the block manager knows
    uint64_t arrival = 0;               // admission order, for fcfs ties
    int64_t num_cpu_blocks = 0;         // > 0: swapped out, holding this many host blocks
    // Set by a preemption until the request is admitted again
    // (engine_stats::preempted_seconds).
    std::optional<std::chrono::steady_clock::time_point> preempted_at;
    std::vector<std::shared_ptr<request_state>> children;  // parked forks (leader)
    std::shared_ptr<request_state> leader;  // set while this fork waits to share blocks
    std::weak_ptr<request_state> parked_in;  // the leader this fork is parked with
    bool fork_pending = false;  // sampled, blocks to be forked in the next transaction
    bool may_copy_on_write = false;  // its next token may land in a shared block
    int64_t prompt_logprobs_next = 1;  // first prompt position not yet delivered
    int64_t inflight_tokens = 0;  // scheduled in steps still in flight
    int64_t placeholders = 0;     // tokens those steps sample (ids not back yet)
    bool done = false;            // finished: later outputs of in-flight steps are dropped
    bool in_waiting = false;      // in waiting_
    // Shared by the samples of one prompt (n > 1): how much of the prompt one
    // of them has computed, so that a sibling admitted later is charged only
    // what the prefix cache will not hold (expected_cached).
    std::shared_ptr<int64_t> prompt_progress;
    // Speculative decoding: the drafter's proposal for the history of
    // drafts_for tokens; this step's share of it (num_spec_tokens drafts).
    std::vector<int32_t> drafts;
    int64_t drafts_for = -1;
    int64_t num_spec_tokens = 0;
    bool spec_inflight = false;        // a step in flight verifies its drafts
    int64_t num_tokens_drafted = -1;   // tokens the drafter holds (-1: unknown to it)
    // The drafter found a match for its history (its next step should wait
    // for its tokens and verify drafts rather than be planned ahead).
    bool wants_spec = false;
    int64_t num_tokens() const {
      return static_cast<int64_t>(prompt_ids.size() + output_ids.size());
    }
    // Running slots it takes: itself and the samples parked with it.
    int64_t num_slots() const { return 1 + static_cast<int64_t>(children.size()); }
    // Counting what in-flight steps compute and sample.
    int64_t computed_eff() const { return num_computed_tokens + inflight_tokens; }
    int64_t num_tokens_eff() const { return num_tokens() + placeholders; }
  };
  using request_ptr = std::shared_ptr<request_state>;
  // A committed step not yet updated: its requests, tokens, and whether it
  // samples a token for each.
  struct step_record {
    int64_t step_id = 0;
    std::vector<request_ptr> requests;
    std::vector<int64_t> tokens;
    std::vector<bool> samples;
    std::vector<int64_t> drafts;  // draft tokens verified
    std::chrono::steady_clock::time_point committed;
  };
  // Whether r can be planned ahead of the in-flight step (and how many tokens).
  bool schedulable_ahead(const request_state& r) const;
  // Running requests one step may take (pipeline micro-batches), else all.
  size_t running_per_step() const;
  // A running request has parked samples, a fork pending or a block it may
  // copy on write (steps then run in lockstep).
  bool forks_in_play() const;

  int64_t blocks_needed(const request_state& r, int64_t num_new_tokens) const;
  // KV pressure (kv_admission): r's demands (itself, and `kids` of its
  // parked samples, which share its prompt's blocks), appended to `out`;
  // the running requests' demands; whether r admitted beside `demands`
  // (with `kids` samples) keeps their peak within the cache; whether a
  // request cannot stop before max_tokens (ignore_eos without stops, or
  // min_tokens at max_tokens); the tokens r may still generate.
  void add_demands(const request_state& r, size_t kids, std::vector<kv_admission::demand>& out) const;
  std::vector<kv_admission::demand> running_demands() const;
  bool admits(const request_state& r, std::vector<kv_admission::demand> demands, size_t kids) const;
  static bool runs_to_max_tokens(const sampling_params& p);
  int64_t tokens_left(const request_state& r) const;
  // Tokens a waiting request will find in the prefix cache because a sibling
  // sample computed its prompt (0 when unknown); a smaller hit only makes its
  // first chunk end earlier.
  int64_t expected_cached(const request_state& r) const;
  bool schedule_running(kv_transaction& txn, int64_t& budget);
  void schedule_waiting(kv_transaction& txn, int64_t& budget);
  // The adapters of the running requests (LoRA).
  std::unordered_set<int64_t> running_adapters() const;
  // Whether r may be admitted as far as its adapter goes (LoRA): it runs
  // already, or it brings no adapter beyond max_loras (`adapters`: the
  // running ones and those admitted so far this step) and its weights are
  // in host memory. A read is queued when they are not and max_loras has
  // room for one more beside `adapters` and `reading` (the adapters being
  // read for requests ahead in line), so that reads start only for
  // adapters that can run when they end; ready adapters are admitted
  // regardless of reads in progress (work-conserving).
  enum class adapter_gate { admit, wait, failed };
  adapter_gate gate_adapter(const request_state& r, const std::unordered_set<int64_t>& adapters,
                            std::unordered_set<int64_t>& reading, std::string& error) const;
  // Shares this step's prefill budget among groups (fair_share::allot_tokens);
  // `slots`: the running slots in use (count_slots).
  void allot_prefill_tokens(int64_t budget, int64_t slots);
  // Running slots in use: running sequences and the samples parked with them.
  int64_t count_slots(bool into_fair_share);
  // Moves all but the first `keep` parked samples of a leader into `out`
  // (they will prefill on their own).
  void unpark_extra_children(request_state& leader, size_t keep, std::vector<request_ptr>& out);
  void push_waiting(const request_ptr& r, bool front);
  // Drops finished requests from running_ and waiting_ (finish() marks them).
  void sweep_finished();
  void reserve(request_state& r, int64_t num_new_tokens, kv_transaction& txn, int64_t& budget);
  void apply_admissions(const kv_grant& grant);
  // Returns, for each grow kept (refused ones sit the step out), its index
  // in the grant.
  std::vector<size_t> apply_grows(const kv_grant& grant);
  void order_by_priority();
  void hold(const std::vector<int32_t>& blocks);
  // Drops r's hold on its blocks; returns how many no request holds now.
  int64_t release(std::vector<int32_t>& blocks);
  void start_forks(request_state& leader, const sampled_output& out);
  void unpark_children(request_state& leader);
  void apply_forks(kv_transaction& txn);
  void preempt(const request_ptr& victim, kv_transaction& txn);
  void release_blocks(request_state& r, kv_transaction& txn);
  void finish(const request_ptr& r, finish_reason reason, std::string error = {});
  finish_reason check_stop(const request_state& r, int32_t token) const;
  void apply_sample(request_state& r, const sampled_output& out, request_output& msg);
  void finish_pending_aborts();
  // The draft tokens r can verify in this step (0: none), from the control's
  // choice and the budget left.
  int64_t spec_tokens_for(const request_state& r, int64_t budget) const;
  // Decides this step's draft counts (control_.choose) before running requests are scheduled.
  void choose_spec_tokens();
  // After a verification: the rejected drafts' positions are given back.
  void apply_spec_result(request_state& r, int64_t num_drafts, int64_t num_accepted);

  scheduler_limits limits_;
  fair_share fair_;
  std::mt19937_64 seed_rng_;
  std::unordered_map<request_id, request_ptr> requests_;
  std::deque<request_ptr> waiting_;
  std::vector<request_ptr> running_;
  std::vector<request_ptr> scheduled_;  // this step, in plan order
  std::vector<request_ptr> admitting_;  // this step's admissions, parallel to txn.admits
  std::vector<request_id> pending_free_;  // blocks to free in the next transaction
  std::vector<request_id> pending_drop_;  // worker must drop these ids
  std::unordered_set<request_id> forked_now_;  // parents and children of this txn's forks
  std::vector<request_output> outputs_;
  std::vector<request_ptr> pending_aborts_;  // aborted while a step was in flight
  lora_host_cache lora_cache_;
  bool waiting_for_adapters_ = false;
  std::vector<kv_rollback> pending_rollbacks_;  // rejected drafts, for the next transaction
  std::vector<request_id> drafter_removed_;     // finished requests the drafter holds
  bool draft_news_ = false;
  std::deque<std::vector<request_id>> asked_;  // per sync not yet answered: whose proposals it asked
  std::chrono::steady_clock::time_point last_update_;  // for the step cost (control_)
  spec_control control_;
  kv_admission admission_;
  std::unordered_map<request_id, int64_t> spec_choice_;  // this step: drafts per request
  int64_t num_blocks_free_ = 0;
  int64_t num_cpu_blocks_free_ = 0;
  std::unordered_map<int32_t, int32_t> block_holders_;  // block -> requests holding it
  int64_t step_id_ = 0;
  uint64_t next_arrival_ = 0;
  int in_flight_ = 0;                   // transactions open + steps committed, not updated
  std::deque<step_record> committed_;   // committed steps not yet updated, oldest first
  bool ahead_ = false;                  // the open transaction plans ahead
  engine_stats stats_;
};

}  // namespace troupe
