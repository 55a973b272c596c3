// model_runner: the worker's core. Owns the backend (ops), the model, the
// paged KV cache and what the worker remembers of each request (its tokens,
// block table and sampling parameters); turns a step_plan into a forward
// pass, logits and sampled tokens.
//
// Plain class, no CAF. Runs on the worker actor's own (detached) thread.
// Invariant: a request id is held from the plan that brings it as new until
// a plan lists it in finished_ids.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "actors/messages.h"
#include "actors/worker/logits_processors.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/lora_registry.h"

namespace troupe {

struct runner_limits {
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  int64_t max_model_len = 4096;
  int64_t block_size = 16;
  int64_t num_blocks = 0;  // including the null block 0
  int64_t num_cpu_blocks = 0;  // swap space, excluding its reserved block 0
  int64_t num_speculative_tokens = 0;  // K: a verify step has up to K + 1 tokens a sequence
  int64_t max_loras = 0;  // LoRA device slots (the model's enable_lora); 0: no LoRA
  // Rows computed alike whatever the batch (ops::keep_rows_consistent).
  bool batch_invariant = false;
  // Tally each sparse layer's routing per expert (llama_model::enable_expert_counts).
  bool count_experts = false;
  // kv_cache_dtype fp8: the KV cache holds float8 e4m3 codes over the
  // model's per-layer scales (kv_cache_layer); else the compute type.
  bool fp8_kv_cache = false;
};

class model_runner {
 public:
  // With tensor or pipeline parallelism, `groups` are the communicators the
  // model is a member of (the runner keeps them as long as the model;
  // nulls are ignored): every rank's runner gets the same plans, and the
  // last stage's ranks sample the same tokens from the gathered logits.
  model_runner(std::unique_ptr<ops> backend, std::unique_ptr<llama_model> model,
               const runner_limits& limits,
               std::vector<std::unique_ptr<communicator>> groups = {});
  // Logs the device timeline (busy and idle time across steps), if any.
  ~model_runner();

  // Attention "sequences" a step may have: its sequences, or with
  // speculative decoding each token of a verify step (see launch).
  static int64_t max_attention_seqs(const runner_limits& limits);
  // Bytes of backend memory the constructor allocates besides the KV cache
  // (index arrays and the logits chunk): the memory plan reserves them.
  static int64_t buffer_bytes(const runner_limits& limits, int64_t vocab_size);
  // Of which the per-step inputs (token ids, positions, slots, block tables...).
  static int64_t input_bytes(const runner_limits& limits);
  // Logits are computed (and sampled) this many rows at a time.
  static constexpr int64_t logits_chunk_rows = 64;
  // Logits of batches of up to this many rows are offered to the backend's
  // product tuning at start-up (cuda: its decode GEMV's range).
  static constexpr int64_t tuned_logits_rows = 8;

  // One step in lockstep: launch(plan), then finish().
  step_output execute(const step_plan& plan);

  // Overlapped steps (async scheduling). launch runs a plan's swaps and
  // launches its forward pass and sampling without waiting for them (with a
  // backend that samples where the logits are; else sampling happens on the
  // host inside launch). A request whose last token the previous launched
  // step is still sampling (a placeholder: the scheduler planned this step
  // before that one returned) takes it on the device (ops::gather_sampled).
  // At most two steps are launched and not finished. finish waits for the
  // oldest and returns its output; sampled tokens join the requests then.
  void launch(const step_plan& plan);
  step_output finish();
  // Pipeline parallelism: on a stage before the last, finish returns the
  // step's id only (no outputs), and the last stage's output for that step
  // is applied here (its tokens join the requests, rejected drafts rolled
  // back), before the next plan. In step order.
  void apply_stage_results(const step_output& out);
  bool is_last_stage() const { return model_->is_last_stage(); }
  // The model's per-expert routing tallies (empty unless count_experts and
  // the model has experts); waits for the launched steps' kernels.
  expert_counts read_expert_counts() { return model_->read_expert_counts(); }
  // Aborts the model's groups (thread-safe): a call waiting in a collective
  // now, and every later one, throws communicator_aborted with `reason`.
  void abort_groups(const std::string& reason);
  size_t num_launched() const { return launched_.size(); }
  // Whether launched steps overlap: the backend samples where the logits are
  // and launches asynchronously (cuda; on the CPU only with
  // TROUPE_DEBUG_ASYNC_ON_CPU=1, for tests).
  bool can_overlap();

  // Decode steps (every request one token) run as CUDA graphs, one per
  // batch-size bucket (1, 2, 4, then multiples of 8 up to max_num_seqs):
  // the batch is padded to its bucket (pad sequences: token 0 at position
  // 0, one key from the null block, KV writes skipped) and the bucket's
  // graph replays the forward pass with the attention shape fixed at
  // capture (block tables of max_model_len, split count for max_model_len).
  // A verify step (speculative decoding: every sequence a decode, some
  // with drafts) runs as a decode of its tokens: each token attends as a
  // sequence of its own over its sequence's blocks up to its position (the
  // decode kernel, split over the keys), so it replays the graph of its
  // token count.
  // Returns the number of graphs captured (0 where the backend has none).
  // With TROUPE_DEBUG_PAD_DECODE=1 in the environment, backends without
  // graphs pad the same way and run the padded batch eagerly (the tests
  // check the padding on the CPU).
  int64_t capture_graphs();
  const std::vector<int64_t>& graph_sizes() const { return graph_sizes_; }
  std::string tuning_report() const { return ops_->tuning_report(); }

  // LoRA: where the adapters of requests' lora_id come from (the worker
  // copies one into a free device slot when a request brings it).
  void set_lora_registry(std::shared_ptr<lora_registry> loras) { loras_ = std::move(loras); }
  // Structured outputs: the tokens' bytes (the engine's tokenizer), which
  // constrained requests' token masks are made of.
  void set_token_vocabulary(std::shared_ptr<const grammar::token_vocabulary> vocab) {
    vocab_ = std::move(vocab);
  }
  // Prompt logits (`troupe eval kl`): called on this thread with the
  // float32 logits [vocab] that predict prompt token `target` of request
  // `id`, for each prompt logprob row a plan asks for (prompt_logprobs >= 0,
  // from prompt_logprobs_start); those rows are then computed on the host.
  using prompt_logits_tap = std::function<void(request_id id, int64_t target, const float* logits)>;
  void set_prompt_logits_tap(prompt_logits_tap tap) { prompt_logits_tap_ = std::move(tap); }

  size_t num_requests() const { return requests_.size(); }
  // For tests: the paged KV cache (K and V per layer) and its backend.
  const std::vector<kv_cache_layer>& kv_cache() const { return kv_cache_; }
  ops& backend() { return *ops_; }

 private:
  struct request_state {
    std::vector<int32_t> token_ids;
    int64_t num_prompt_tokens = 0;
    sampling_params params;
    uint64_t seed = 0;
    std::vector<int32_t> block_ids;
    int64_t num_computed_tokens = 0;
    int64_t num_scheduled_tokens = 0;
    int64_t prompt_logprobs_start = 1;
    std::vector<fork_child> fork_children;  // sampled with this request's prompt end
    int64_t pending_tokens = 0;      // sampled by launched steps, not yet in token_ids
    int32_t last_sample_index = -1;  // its job index in the last launched step that sampled it
    std::vector<int32_t> drafts;     // this step's draft tokens (after its last token)
    int32_t lora_slot = -1;          // its adapter's device slot, -1: the base model
    std::vector<uint32_t> allowed_mask;  // of params.allowed_token_ids (empty: none)
    std::optional<grammar::matcher> constraint;  // params.structured's, after token_ids' outputs
  };
  // One row of logits to compute and what to do with it.
  struct logit_row {
    size_t batch_index;     // into the step's request order
    int32_t token_row;      // row of the step's hidden states
    int64_t prompt_target;  // >= 0: prompt logprob of this position; -1: sample
    int32_t spec_index = 0;  // a sample after this many of the request's draft tokens
  };
  struct host_batch {
    std::vector<int32_t> token_ids, positions, slot_mapping;
    std::vector<int32_t> query_start_loc, seq_lens, block_tables;
    std::vector<logit_row> logit_rows;
    std::vector<int32_t> gather_rows, gather_src;  // placeholder rows and their sample index
    std::vector<int32_t> lora_slots;               // per token (with LoRA)
    int64_t max_blocks = 0, max_query_len = 0, max_seq_len = 0;
  };
  // A sampled job of a launched step and where its result goes.
  struct job_ref {
    enum kind_t { next_token, prompt_logprob, fork } kind;
    size_t batch_index;
    request_id child = 0;       // fork
    bool wants_logprobs = false;
  };
  struct launched_step {
    int64_t seq = 0;  // the backend's step number
    step_output out;
    std::vector<request_id> order;
    std::vector<bool> samples;  // per order index: a token is sampled for it
    std::vector<job_ref> jobs;  // device-sampled jobs by index
    std::vector<std::vector<int32_t>> drafts;  // per order index: the drafts verified
    std::vector<logit_row> deferred;           // sampled late (sample_deferred)
    std::chrono::steady_clock::time_point start;
  };

  void apply_plan(const step_plan& plan, std::vector<request_id>& order);
  // The device slot holding adapter `lora_id`, copying it into a slot no
  // held request uses when it is not resident (after the steps in flight).
  int32_t lora_slot_for(int64_t lora_id);
  void run_swaps(const step_plan& plan);  // then the copy-on-write copies
  void run_copies(const step_plan& plan);
  void sample_forks(request_state& r, const float* logits, sampled_output& out);
  void build_batch(const std::vector<request_id>& order, host_batch& batch);
  // The graph bucket this batch runs in, 0: eager.
  int64_t graph_size_for(const host_batch& batch) const;
  // Whether this step verifies drafts with every sequence a decode (its
  // last token and its drafts): then it runs as a decode of its tokens.
  bool is_verify_step(const std::vector<request_id>& order) const;
  // Rewrites a verify batch's attention view: one sequence per token, its
  // length the token's position + 1, over its sequence's block table.
  static void attend_per_token(host_batch& batch);
  // Pads a decode batch to `size` sequences with the capture-time shape.
  void pad_for_graph(host_batch& batch, int64_t size) const;
  void add_logit_rows(const request_state& r, size_t index, int32_t first_row,
                      host_batch& batch);
  forward_inputs upload(const host_batch& batch);
  // Uploads `host` to dst unless dst holds exactly these values from the
  // last upload (`uploaded`, its host mirror; only for arrays no kernel
  // writes).
  void upload_if_changed(const std::vector<int32_t>& host, int32_t* dst,
                         std::vector<int32_t>& uploaded);
  void compute_outputs(const host_batch& batch, launched_step& step);
  void handle_row(request_state& r, const logit_row& row, const float* logits,
                  sampled_output& out);
  // What a sampled row's pointers lead to (read while it is sampled): the
  // output ids the penalties and bad words see with drafts, the position's
  // biases and a fork child's allowed mask (actors/worker/logits_processors.h).
  struct row_storage {
    std::vector<int32_t> history;
    position_biases biases;
    std::vector<uint32_t> mask;
  };
  // The sampler's view of r's next token (after `spec_index` of its draft
  // tokens), and of a fork child's first; `storage` backs what the row
  // points to.
  // `pending`: r's tokens still being sampled before this one (its
  // pending_tokens, less this row's own for a row sampled late).
  sampler_row next_token_row(const request_state& r, int32_t spec_index, row_storage& storage,
                             int64_t pending) const;
  // Structured outputs: a matcher at the constraint's start (none when the
  // constraint cannot be had: the edges check it, so only a log line), and
  // the mask of what it allows next (and `allowed`, when not empty), the
  // end-of-sequence and stop tokens included where it may end.
  std::optional<grammar::matcher> new_matcher(const sampling_params& p) const;
  void grammar_mask(const grammar::matcher& m, const sampling_params& p,
                    const std::vector<uint32_t>& allowed, std::vector<uint32_t>& mask) const;
  // Speculative decoding: keeps the longest prefix of the drafts that the
  // samples (one per position, each drawn as without drafts) equal, then
  // the first sample that differs (or the one after the last draft); the
  // rejected drafts' KV positions are given up (the scheduler frees the
  // blocks that held only them, by the same rule).
  void accept_drafts(request_state* r, const std::vector<int32_t>& drafts, sampled_output& out);
  // Gives up the KV positions of `drafts - accepted` rejected drafts.
  void roll_back_drafts(request_state& r, size_t drafts, size_t accepted);
  // A step's sampled tokens join request r (null: a later plan dropped it).
  void join_tokens(request_state* r, const sampled_output& o);
  sampler_row fork_row(const request_state& parent, const fork_child& c,
                       row_storage& storage) const;
  // Computes the logits of `rows` (chunks of logits_chunk_rows; where row
  // i is hidden state i of a step of `batch_tokens` tokens, read in place;
  // 0: never) and samples them.
  void compute_rows(const std::vector<logit_row>& rows, int64_t batch_tokens, launched_step& step, bool late);
  // Samples logits rows [begin, begin + n) of `rows` where they are
  // (ops::sample_async); false when the backend cannot, or with
  // TROUPE_DEVICE_SAMPLING=0 (host sampling, for comparisons). `late`: rows
  // of sample_deferred.
  bool sample_chunk_async(const std::vector<logit_row>& rows, size_t begin, int64_t n,
                          launched_step& step, bool late);
  // A launched step's rows whose sampler needs the token the step before
  // is still sampling (penalties, a constraint; planned ahead with a
  // placeholder input): computed and sampled once that token has joined
  // (finish of the step before), while this step's forward still runs.
  void sample_deferred(launched_step& step);
  bool device_sampling_enabled() const;

  std::unique_ptr<ops> ops_;
  std::vector<std::unique_ptr<communicator>> groups_;  // the model's; outlive model_
  std::unique_ptr<llama_model> model_;
  runner_limits limits_;
  std::vector<kv_cache_layer> kv_cache_;
  std::vector<kv_cache_layer> swap_cache_;  // host blocks, when swap space is set
  std::unordered_map<request_id, request_state> requests_;
  // Backend copies of the step's index arrays, sized for the limits.
  int32_t* token_ids_dev_ = nullptr;
  int32_t* positions_dev_ = nullptr;
  int32_t* slot_mapping_dev_ = nullptr;
  int32_t* query_start_loc_dev_ = nullptr;
  int32_t* seq_lens_dev_ = nullptr;
  int32_t* block_tables_dev_ = nullptr;
  int32_t* logit_rows_dev_ = nullptr;
  // With LoRA: each token's adapter slot, the tokens by slot, each slot's
  // first (lora_batch).
  int32_t* lora_slots_dev_ = nullptr;
  int32_t* lora_sorted_dev_ = nullptr;
  int32_t* lora_starts_dev_ = nullptr;
  std::vector<int32_t> lora_sorted_, lora_starts_;  // host side, reused
  std::shared_ptr<lora_registry> loras_;
  std::shared_ptr<const grammar::token_vocabulary> vocab_;
  prompt_logits_tap prompt_logits_tap_;
  std::vector<int64_t> slot_adapter_;  // adapter id per LoRA slot, 0: empty
  std::vector<int32_t> uploaded_query_start_loc_, uploaded_block_tables_;  // upload_if_changed
  std::vector<int64_t> graph_sizes_;  // ascending; empty: eager only
  bool graphs_replay_ = false;        // the backend replays graphs (else: padded eager)
  std::deque<launched_step> launched_;  // launched, not finished (oldest first)
  // Pipeline stages before the last: finished steps waiting for the last
  // stage's tokens (apply_stage_results).
  std::deque<launched_step> awaiting_results_;
  int64_t next_seq_ = 0;
  int device_sampling_ = -1;  // -1: not known yet (asks the backend once)
  // Test hook (TROUPE_DEBUG_SPEC_ACCEPT_ALL=1): accept every draft, a broken
  // rule the distribution test must catch.
  bool debug_accept_all_ = false;
  // Benchmark hook (TROUPE_DEBUG_SPEC_REJECT_ALL=1): reject every draft.
  bool debug_reject_all_ = false;
  tensor logits_;  // [logits_chunk, vocab]
  std::vector<float> logits_host_;
};

}  // namespace troupe
