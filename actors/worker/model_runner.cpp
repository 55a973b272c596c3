#include "actors/worker/model_runner.h"

#include "grammar/constraint_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "config/logging.h"

namespace troupe {


int64_t model_runner::max_attention_seqs(const runner_limits& limits) {
  return std::max(limits.max_num_seqs,
                  std::min(limits.max_num_batched_tokens,
                           limits.max_num_seqs * (1 + limits.num_speculative_tokens)));
}

int64_t model_runner::input_bytes(const runner_limits& limits) {
  const int64_t t = limits.max_num_batched_tokens, s = max_attention_seqs(limits);
  const int64_t max_blocks = (limits.max_model_len + limits.block_size - 1) / limits.block_size;
  const int64_t ints = 4 * t + (s + 1) + s + s * max_blocks +
                       (limits.max_loras > 0 ? 2 * t + limits.max_loras + 1 : 0);  // as allocated below
  return ints * 4;
}

int64_t model_runner::buffer_bytes(const runner_limits& limits, int64_t vocab_size) {
  return input_bytes(limits) + logits_chunk_rows * vocab_size * 4;
}

model_runner::model_runner(std::unique_ptr<ops> backend, std::unique_ptr<llama_model> model,
                           const runner_limits& limits,
                           std::vector<std::unique_ptr<communicator>> groups)
    : ops_(std::move(backend)),
      groups_(std::move(groups)),
      model_(std::move(model)),
      limits_(limits) {
  TROUPE_CHECK(limits.num_blocks >= 2);
  const model_config& cfg = model_->config();
  const int64_t slots = limits.num_blocks * limits.block_size;
  const dtype kv_type = limits.fp8_kv_cache ? dtype::fp8_e4m3 : model_->compute_type();
  for (int64_t l = 0; l < model_->num_layers(); ++l) {  // this pipeline stage's layers
    const auto [k_scale, v_scale] = model_->kv_scales(l);
    kv_cache_.push_back({ops_->alloc(kv_type, slots, model_->kv_cols()),
                         ops_->alloc(kv_type, slots, model_->kv_cols()), k_scale, v_scale});
  }
  if (limits.num_cpu_blocks > 0) {
    const int64_t host_slots = (limits.num_cpu_blocks + 1) * limits.block_size;
    for (int64_t l = 0; l < model_->num_layers(); ++l) {
      swap_cache_.push_back({ops_->alloc_host(kv_type, host_slots, model_->kv_cols()),
                             ops_->alloc_host(kv_type, host_slots, model_->kv_cols()),
                             kv_cache_[static_cast<size_t>(l)].k_scale, kv_cache_[static_cast<size_t>(l)].v_scale});
    }
  }
  const int64_t t = limits.max_num_batched_tokens;
  const int64_t s = max_attention_seqs(limits);
  const int64_t max_blocks = (limits.max_model_len + limits.block_size - 1) / limits.block_size;
  token_ids_dev_ = ops_->alloc_ints(t);
  positions_dev_ = ops_->alloc_ints(t);
  slot_mapping_dev_ = ops_->alloc_ints(t);
  query_start_loc_dev_ = ops_->alloc_ints(s + 1);
  seq_lens_dev_ = ops_->alloc_ints(s);
  block_tables_dev_ = ops_->alloc_ints(s * max_blocks);
  logit_rows_dev_ = ops_->alloc_ints(t);
  if (limits.count_experts) model_->enable_expert_counts();
  TROUPE_CHECK_MSG(model_->max_loras() == limits.max_loras,
                   "the model's LoRA slots differ from runner_limits.max_loras");
  if (limits.max_loras > 0) {
    lora_slots_dev_ = ops_->alloc_ints(t);
    lora_sorted_dev_ = ops_->alloc_ints(t);
    lora_starts_dev_ = ops_->alloc_ints(limits.max_loras + 1);
    slot_adapter_.assign(static_cast<size_t>(limits.max_loras), 0);
  }
  logits_ = ops_->alloc(dtype::f32, logits_chunk_rows, cfg.vocab_size);
  logits_host_.resize(static_cast<size_t>(logits_.numel()));
  const char* accept_all = std::getenv("TROUPE_DEBUG_SPEC_ACCEPT_ALL");
  debug_accept_all_ = accept_all != nullptr && std::strcmp(accept_all, "1") == 0;
  // TROUPE_DEBUG_SPEC_REJECT_ALL=1: every draft rejected (outputs stay the
  // target's; acceptance 0): a workload whose drafts are proposed and all
  // rejected, for measuring what speculation costs there.
  const char* reject_all = std::getenv("TROUPE_DEBUG_SPEC_REJECT_ALL");
  debug_reject_all_ = reject_all != nullptr && std::strcmp(reject_all, "1") == 0;
  // batch_invariant: every row computed as in any other batch (a verify
  // step's rows as decodes compute them), so that greedy outputs do not
  // change with the batch or with speculation; it costs speed, so it is
  // opt-in (docs/gpu.md, "Batch invariance").
  if (limits.batch_invariant) ops_->keep_rows_consistent(true);
}

void model_runner::apply_plan(const step_plan& plan, std::vector<request_id>& order) {
  for (request_id id : plan.finished_ids) requests_.erase(id);
  for (const new_request_data& d : plan.new_requests) {
    request_state r;
    r.token_ids = d.token_ids;
    r.num_prompt_tokens = d.num_prompt_tokens;
    r.params = d.params;
    r.seed = d.seed;
    r.block_ids = d.block_ids;
    r.num_computed_tokens = d.num_computed_tokens;
    r.num_scheduled_tokens = d.num_scheduled_tokens;
    r.prompt_logprobs_start = d.prompt_logprobs_start;
    r.fork_children = d.fork_children;
    if (d.params.lora_id != 0) r.lora_slot = lora_slot_for(d.params.lora_id);
    if (!d.params.allowed_token_ids.empty()) {
      r.allowed_mask = allowed_token_mask(d.params.allowed_token_ids, model_->config().vocab_size);
    }
    if (is_constrained(d.params.structured) && model_->is_last_stage()) {
      // A resumed request (or a fork child) has outputs already: the
      // matcher reads them.
      r.constraint = new_matcher(d.params);
      for (size_t k = static_cast<size_t>(r.num_prompt_tokens); r.constraint && k < r.token_ids.size(); ++k) {
        r.constraint->accept(r.token_ids[k]);
      }
    }
    TROUPE_CHECK(requests_.emplace(d.id, std::move(r)).second);
    order.push_back(d.id);
  }
  for (const cached_request_data& d : plan.cached_requests) {
    auto it = requests_.find(d.id);
    TROUPE_CHECK_MSG(it != requests_.end(), "plan names a request the worker does not hold");
    request_state& r = it->second;
    for (size_t k = 0; k < d.replaced_index.size(); ++k) {  // copy-on-write
      r.block_ids.at(static_cast<size_t>(d.replaced_index[k])) = d.replaced_block[k];
    }
    r.block_ids.insert(r.block_ids.end(), d.new_block_ids.begin(), d.new_block_ids.end());
    r.num_scheduled_tokens = d.num_scheduled_tokens;
    r.fork_children = d.fork_children;
    r.drafts = d.spec_token_ids;
    TROUPE_CHECK_MSG(r.drafts.empty() || r.pending_tokens == 0,
                     "draft tokens for a request whose last token is not back");
    TROUPE_CHECK_MSG(static_cast<int64_t>(r.drafts.size()) <= limits_.num_speculative_tokens,
                     "more draft tokens than num_speculative_tokens");
    order.push_back(d.id);
  }
}

int32_t model_runner::lora_slot_for(int64_t lora_id) {
  for (size_t s = 0; s < slot_adapter_.size(); ++s) {
    if (slot_adapter_[s] == lora_id) return static_cast<int32_t>(s);
  }
  // A slot no held request uses (the scheduler keeps the running requests'
  // adapters within max_loras): an empty one first.
  std::vector<bool> used(slot_adapter_.size(), false);
  for (const auto& [id, r] : requests_) {
    if (r.lora_slot >= 0) used[static_cast<size_t>(r.lora_slot)] = true;
  }
  int32_t slot = -1;
  for (size_t s = 0; s < slot_adapter_.size(); ++s) {
    if (!used[s] && (slot < 0 || slot_adapter_[s] == 0)) slot = static_cast<int32_t>(s);
  }
  TROUPE_CHECK_MSG(slot >= 0, "a request's LoRA adapter finds no free slot (max_loras)");
  TROUPE_CHECK_MSG(loras_ != nullptr, "a request names a LoRA adapter but LoRA is off");
  // In host memory: the scheduler admitted the request after the registry's
  // prefetch said so, and the running requests' adapters are protected.
  // Else (its request was aborted before this plan arrived, and the host
  // cache dropped it since) it is read now, or on failure the slot gets
  // zeros for the aborted request's last step.
  std::string read_now;
  const std::shared_ptr<const lora_adapter> adapter = loras_->weights(lora_id, &read_now);
  if (!read_now.empty()) get_logger("worker")->warn("{}", read_now);
  // A launched step may still read the slot (its requests just finished).
  ops_->synchronize();
  if (adapter == nullptr) {
    model_->clear_lora(slot);
    slot_adapter_[static_cast<size_t>(slot)] = 0;
    return slot;
  }
  model_->load_lora(slot, *adapter);
  slot_adapter_[static_cast<size_t>(slot)] = lora_id;
  return slot;
}

void model_runner::add_logit_rows(const request_state& r, size_t index, int32_t first_row,
                                  host_batch& batch) {
  const int64_t begin = r.num_computed_tokens;
  const int64_t end = begin + r.num_scheduled_tokens;
  if (r.params.prompt_logprobs >= 0) {
    // Row at position p predicts prompt token p + 1.
    for (int64_t p = begin; p < end; ++p) {
      const int64_t target = p + 1;
      if (target < r.prompt_logprobs_start || target >= r.num_prompt_tokens) continue;
      batch.logit_rows.push_back({index, first_row + static_cast<int32_t>(p - begin), target});
    }
  }
  const auto k = static_cast<int64_t>(r.drafts.size());
  if (end == static_cast<int64_t>(r.token_ids.size()) + r.pending_tokens + k) {
    // One sample after the last token, and one after each draft token.
    for (int64_t j = 0; j <= k; ++j) {
      batch.logit_rows.push_back({index, first_row + static_cast<int32_t>(end - 1 - k + j - begin),
                                  -1, static_cast<int32_t>(j)});
    }
  }
}

void model_runner::build_batch(const std::vector<request_id>& order, host_batch& batch) {
  for (request_id id : order) {
    const request_state& r = requests_.at(id);
    batch.max_blocks = std::max<int64_t>(batch.max_blocks, static_cast<int64_t>(r.block_ids.size()));
  }
  batch.query_start_loc.push_back(0);
  for (size_t i = 0; i < order.size(); ++i) {
    const request_state& r = requests_.at(order[i]);
    const int32_t first_row = static_cast<int32_t>(batch.token_ids.size());
    const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
    const auto known = static_cast<int64_t>(r.token_ids.size());
    const auto num_drafts = static_cast<int64_t>(r.drafts.size());
    TROUPE_CHECK(end <= known + r.pending_tokens + num_drafts);
    TROUPE_CHECK(end <= static_cast<int64_t>(r.block_ids.size()) * limits_.block_size);
    for (int64_t p = r.num_computed_tokens; p < end; ++p) {
      if (p >= known && num_drafts > 0) {
        batch.token_ids.push_back(r.drafts[static_cast<size_t>(p - known)]);
      } else if (p >= known) {
        // A placeholder: the previous launched step samples this token; the
        // device copies it into this row before the forward pass.
        TROUPE_CHECK_MSG(p == known && r.pending_tokens == 1 && r.last_sample_index >= 0,
                         "a plan schedules a token the worker has not sampled");
        batch.gather_rows.push_back(static_cast<int32_t>(batch.token_ids.size()));
        batch.gather_src.push_back(r.last_sample_index);
        batch.token_ids.push_back(0);
      } else {
        batch.token_ids.push_back(r.token_ids[static_cast<size_t>(p)]);
      }
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.lora_slots.push_back(r.lora_slot);
      const int32_t block = r.block_ids[static_cast<size_t>(p / limits_.block_size)];
      batch.slot_mapping.push_back(block * static_cast<int32_t>(limits_.block_size) +
                                   static_cast<int32_t>(p % limits_.block_size));
    }
    batch.query_start_loc.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.seq_lens.push_back(static_cast<int32_t>(end));
    for (int64_t b = 0; b < batch.max_blocks; ++b) {
      batch.block_tables.push_back(b < static_cast<int64_t>(r.block_ids.size())
                                       ? r.block_ids[static_cast<size_t>(b)]
                                       : 0);
    }
    batch.max_query_len = std::max(batch.max_query_len, r.num_scheduled_tokens);
    batch.max_seq_len = std::max(batch.max_seq_len, end);
    add_logit_rows(r, i, first_row, batch);
  }
}

void model_runner::upload_if_changed(const std::vector<int32_t>& host, int32_t* dst,
                                     std::vector<int32_t>& uploaded) {
  if (host.size() <= uploaded.size() && std::equal(host.begin(), host.end(), uploaded.begin())) {
    return;  // the device copy holds these values already (no kernel writes it)
  }
  ops_->upload_ints(host.data(), dst, static_cast<int64_t>(host.size()));
  if (uploaded.size() < host.size()) uploaded.resize(host.size());
  std::copy(host.begin(), host.end(), uploaded.begin());
}

forward_inputs model_runner::upload(const host_batch& batch) {
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t s = static_cast<int64_t>(batch.seq_lens.size());
  TROUPE_CHECK(n <= limits_.max_num_batched_tokens && s <= max_attention_seqs(limits_));
  // Each upload is a copy the GPU runs between steps: a decode step of
  // requests whose every token is still being sampled (placeholders,
  // written on the device by gather_sampled) needs no token ids, and
  // query_start_loc and the block tables change only when the batch does or
  // a sequence grows a block.
  if (static_cast<int64_t>(batch.gather_rows.size()) < n) {
    ops_->upload_ints(batch.token_ids.data(), token_ids_dev_, n);
  }
  ops_->upload_ints(batch.positions.data(), positions_dev_, n);
  ops_->upload_ints(batch.slot_mapping.data(), slot_mapping_dev_, n);
  upload_if_changed(batch.query_start_loc, query_start_loc_dev_, uploaded_query_start_loc_);
  ops_->upload_ints(batch.seq_lens.data(), seq_lens_dev_, s);
  upload_if_changed(batch.block_tables, block_tables_dev_, uploaded_block_tables_);
  ops_->gather_sampled(token_ids_dev_, batch.gather_rows.data(), batch.gather_src.data(),
                       static_cast<int64_t>(batch.gather_rows.size()));
  forward_inputs in;
  if (lora_slots_dev_ != nullptr) {
    TROUPE_CHECK(static_cast<int64_t>(batch.lora_slots.size()) == n);
    const auto slots = static_cast<int32_t>(slot_adapter_.size());
    sort_tokens_by_slot(batch.lora_slots, slots, lora_sorted_, lora_starts_);
    ops_->upload_ints(batch.lora_slots.data(), lora_slots_dev_, n);
    ops_->upload_ints(lora_sorted_.data(), lora_sorted_dev_, n);
    ops_->upload_ints(lora_starts_.data(), lora_starts_dev_, slots + 1);
    in.lora = {lora_slots_dev_, lora_sorted_dev_, lora_starts_dev_};
    // A step of base-model tokens only runs without the LoRA kernels
    // (eagerly; graphs captured with them replay them: capture_graphs).
    in.any_lora = std::any_of(batch.lora_slots.begin(), batch.lora_slots.end(), [](int32_t s) { return s >= 0; });
  }
  in.num_tokens = n;
  in.token_ids = token_ids_dev_;
  in.positions = positions_dev_;
  in.slot_mapping = slot_mapping_dev_;
  in.attention.num_seqs = s;
  in.attention.query_start_loc = query_start_loc_dev_;
  in.attention.seq_lens = seq_lens_dev_;
  in.attention.block_tables = block_tables_dev_;
  in.attention.max_blocks_per_seq = batch.max_blocks;
  in.attention.block_size = limits_.block_size;
  in.attention.max_query_len = batch.max_query_len;
  in.attention.max_seq_len = batch.max_seq_len;
  return in;
}

bool model_runner::device_sampling_enabled() const {
  // On where the backend can (cuda, and the CPU backend's synchronous
  // version); TROUPE_DEVICE_SAMPLING=0 downloads the logits rows and samples
  // on the host instead (docs/gpu.md).
  static const bool allowed = [] {
    const char* v = std::getenv("TROUPE_DEVICE_SAMPLING");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return allowed && ops_->samples_async();
}

bool model_runner::can_overlap() {
  // Pipeline stages before the last learn a step's tokens only after it
  // (apply_stage_results): every step runs in lockstep.
  if (model_->num_stages() > 1) return false;
  if (!device_sampling_enabled()) return false;
  if (ops_->launches_async()) return true;
  // The CPU backend computes as it launches: overlapping would only hand
  // each step's output on one step later. TROUPE_DEBUG_ASYNC_ON_CPU=1 does
  // it anyway, so that the tests run the async path without a GPU.
  static const bool forced = [] {
    const char* v = std::getenv("TROUPE_DEBUG_ASYNC_ON_CPU");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return forced;
}

void model_runner::run_swaps(const step_plan& plan) {
  const auto outs = static_cast<int64_t>(plan.swap_out_src.size());
  const auto ins = static_cast<int64_t>(plan.swap_in_src.size());
  if (outs + ins == 0) return run_copies(plan);
  TROUPE_CHECK_MSG(!swap_cache_.empty(), "a plan swaps blocks but there is no swap space");
  for (size_t l = 0; l < kv_cache_.size(); ++l) {
    // Swap-outs first: their device blocks may be the swap-ins' destinations.
    ops_->copy_kv_blocks(kv_cache_[l], swap_cache_[l], plan.swap_out_src.data(),
                         plan.swap_out_dst.data(), outs, limits_.block_size);
    ops_->copy_kv_blocks(swap_cache_[l], kv_cache_[l], plan.swap_in_src.data(),
                         plan.swap_in_dst.data(), ins, limits_.block_size);
  }
  run_copies(plan);
}

void model_runner::run_copies(const step_plan& plan) {
  const auto n = static_cast<int64_t>(plan.copy_src.size());
  if (n == 0) return;
  for (auto& layer : kv_cache_) {
    ops_->copy_kv_blocks(layer, layer, plan.copy_src.data(), plan.copy_dst.data(), n,
                         limits_.block_size);
  }
}

model_runner::~model_runner() {
  if (const std::string profile = ops_->op_profile(); !profile.empty()) {
    get_logger("worker")->info("{}", profile);
  }
  const ops::timeline t = ops_->device_timeline();
  if (t.steps == 0) return;
  const double span = t.busy_seconds + t.idle_seconds;
  get_logger("worker")->info(
      "device timeline: {} steps, busy {:.3f} s, idle between steps {:.3f} s ({:.1f}% of {:.3f} s)",
      t.steps, t.busy_seconds, t.idle_seconds, span > 0 ? 100.0 * t.idle_seconds / span : 0.0, span);
}

void model_runner::accept_drafts(request_state* r, const std::vector<int32_t>& drafts,
                                 sampled_output& out) {
  const size_t k = drafts.size();
  TROUPE_CHECK(out.token_ids.size() == k + 1);
  size_t accepted = 0;
  // Sampling each position as without speculation and keeping a draft only
  // where the sample equals it is rejection sampling for a point-mass
  // proposal: draft x is kept with probability p(x); otherwise the sample
  // is distributed as p without x, renormalised. Greedy is the same rule.
  while (accepted < k && !debug_reject_all_ &&
         (debug_accept_all_ || out.token_ids[accepted] == drafts[accepted])) {
    out.token_ids[accepted] = drafts[accepted];
    ++accepted;
  }
  out.token_ids.resize(accepted + 1);
  if (out.logprobs.size() > accepted + 1) out.logprobs.resize(accepted + 1);
  out.num_draft_tokens = static_cast<int32_t>(k);
  if (r != nullptr) roll_back_drafts(*r, k, accepted);
}

step_output model_runner::execute(const step_plan& plan) {
  launch(plan);
  return finish();
}

void model_runner::launch(const step_plan& plan) {
  TROUPE_CHECK_MSG(launched_.size() < 2, "at most two steps are launched and not finished");
  ops_->bind_thread();  // the worker's thread, on this rank's device
  launched_step step;
  step.start = std::chrono::steady_clock::now();
  step.seq = next_seq_++;
  ops_->step_begin(step.seq);
  run_swaps(plan);
  apply_plan(plan, step.order);
  step.out.step_id = plan.step_id;
  step.out.outputs.resize(step.order.size());
  for (size_t i = 0; i < step.order.size(); ++i) step.out.outputs[i].id = step.order[i];
  step.samples.assign(step.order.size(), false);
  step.drafts.resize(step.order.size());
  if (!step.order.empty()) {
    host_batch batch;
    build_batch(step.order, batch);
    if (is_verify_step(step.order)) attend_per_token(batch);
    for (const logit_row& row : batch.logit_rows) {
      if (row.prompt_target < 0) step.samples[row.batch_index] = true;
    }
    if (const int64_t graph = graph_size_for(batch); graph > 0) {
      pad_for_graph(batch, graph);
      const forward_inputs in = upload(batch);
      if (graphs_replay_) {
        ops_->launch_graph(graph);
        model_->replayed(in.num_tokens);
      } else {
        model_->forward(in, kv_cache_);
      }
    } else {
      model_->forward(upload(batch), kv_cache_);
    }
    if (model_->is_last_stage()) {
      compute_outputs(batch, step);
    } else {
      // The last stage samples (and its forks); apply_stage_results brings
      // the tokens here.
      for (request_id id : step.order) requests_.at(id).fork_children.clear();
    }
  }
  for (size_t i = 0; i < step.order.size(); ++i) {
    request_state& r = requests_.at(step.order[i]);
    r.num_computed_tokens += r.num_scheduled_tokens;
    r.num_scheduled_tokens = 0;
    if (step.samples[i]) ++r.pending_tokens;
    step.drafts[i] = std::move(r.drafts);
    r.drafts.clear();
  }
  ops_->step_launched(step.seq);
  launched_.push_back(std::move(step));
}

step_output model_runner::finish() {
  TROUPE_CHECK_MSG(!launched_.empty(), "finish without a launched step");
  launched_step step = std::move(launched_.front());
  launched_.pop_front();
  ops_->step_end(step.seq);
  if (!model_->is_last_stage()) {
    // Its tokens come from the last stage (apply_stage_results).
    step_output out;
    out.step_id = step.out.step_id;
    awaiting_results_.push_back(std::move(step));
    return out;
  }
  if (!step.jobs.empty()) {
    std::vector<sample_result> results;
    ops_->sample_results(step.seq, 0, static_cast<int64_t>(step.jobs.size()), results);
    for (size_t k = 0; k < step.jobs.size(); ++k) {
      const job_ref& ref = step.jobs[k];
      sampled_output& o = step.out.outputs[ref.batch_index];
      token_logprobs lp = ref.wants_logprobs ? std::move(results[k].logprobs) : token_logprobs{};
      switch (ref.kind) {
        case job_ref::prompt_logprob: o.prompt_logprobs.push_back(std::move(lp)); break;
        case job_ref::next_token:
          o.token_ids.push_back(results[k].token_id);
          if (ref.wants_logprobs) o.logprobs.push_back(std::move(lp));
          break;
        case job_ref::fork: o.fork_samples.push_back({ref.child, results[k].token_id, std::move(lp)}); break;
      }
    }
  }
  // The sampled tokens join their requests (unless a later plan dropped them).
  for (size_t i = 0; i < step.order.size(); ++i) {
    if (!step.samples[i]) continue;
    auto it = requests_.find(step.order[i]);
    sampled_output& o = step.out.outputs[i];
    request_state* r = it == requests_.end() ? nullptr : &it->second;
    if (!step.drafts[i].empty()) accept_drafts(r, step.drafts[i], o);
    join_tokens(r, o);
  }
  // The step launched after this one may wait for these tokens.
  if (!launched_.empty() && !launched_.front().deferred.empty()) sample_deferred(launched_.front());
  step.out.execute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step.start).count();
  return std::move(step.out);
}

void model_runner::join_tokens(request_state* r, const sampled_output& o) {
  if (r == nullptr) return;  // a later plan dropped it
  TROUPE_CHECK(!o.token_ids.empty() && r->pending_tokens > 0);
  r->token_ids.insert(r->token_ids.end(), o.token_ids.begin(), o.token_ids.end());
  --r->pending_tokens;
  if (r->constraint) {
    for (int32_t t : o.token_ids) r->constraint->accept(t);  // an end-of-sequence token: refused, kept
  }
}

void model_runner::apply_stage_results(const step_output& out) {
  TROUPE_CHECK_MSG(!awaiting_results_.empty(), "stage results for no finished step");
  launched_step step = std::move(awaiting_results_.front());
  awaiting_results_.pop_front();
  TROUPE_CHECK_MSG(out.step_id == step.out.step_id && out.outputs.size() == step.order.size(),
                   "stage results of another step");
  for (size_t i = 0; i < step.order.size(); ++i) {
    if (!step.samples[i]) continue;
    const sampled_output& o = out.outputs[i];
    TROUPE_CHECK(o.id == step.order[i]);
    auto it = requests_.find(step.order[i]);
    request_state* r = it == requests_.end() ? nullptr : &it->second;
    // The last stage kept the drafts its samples confirmed, then one token.
    if (!step.drafts[i].empty() && r != nullptr) {
      roll_back_drafts(*r, step.drafts[i].size(), o.token_ids.size() - 1);
    }
    join_tokens(r, o);
  }
}

void model_runner::abort_groups(const std::string& reason) {
  for (const auto& group : groups_) {
    if (group) group->abort(reason);
  }
}

void model_runner::roll_back_drafts(request_state& r, size_t drafts, size_t accepted) {
  r.num_computed_tokens -= static_cast<int64_t>(drafts - accepted);
  const int64_t keep = (r.num_computed_tokens + limits_.block_size - 1) / limits_.block_size;
  if (static_cast<int64_t>(r.block_ids.size()) > keep) r.block_ids.resize(static_cast<size_t>(keep));
}

}  // namespace troupe
