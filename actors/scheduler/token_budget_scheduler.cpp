#include "actors/scheduler/token_budget_scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "common/check.h"

namespace troupe {

token_budget_scheduler::token_budget_scheduler(const scheduler_limits& limits)
    : limits_(limits), seed_rng_(limits.seed), num_blocks_free_(limits.num_blocks_usable) {
  TROUPE_CHECK(limits.block_size > 0 && limits.num_blocks_usable > 0);
  stats_.num_blocks_total = limits.num_blocks_usable;
}

std::string token_budget_scheduler::add_request(request_id id, std::vector<int32_t> prompt_ids,
                                                const sampling_params& params) {
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len == 0) return "the prompt is empty";
  if (prompt_len > limits_.max_model_len) {
    return "the prompt has " + std::to_string(prompt_len) +
           " tokens, more than max_model_len " + std::to_string(limits_.max_model_len);
  }
  // The longest this request can get must fit in the whole cache, or it
  // could only ever be preempted by itself.
  const int64_t longest = std::min<int64_t>(prompt_len + params.max_tokens, limits_.max_model_len);
  const int64_t max_blocks = (longest + limits_.block_size - 1) / limits_.block_size;
  if (max_blocks > limits_.num_blocks_usable) {
    return "the request needs up to " + std::to_string(max_blocks) +
           " KV blocks but the cache has only " + std::to_string(limits_.num_blocks_usable);
  }
  auto r = std::make_shared<request_state>();
  r->id = id;
  r->prompt_ids = std::move(prompt_ids);
  r->params = params;
  // Drawn in arrival order, so a fixed engine seed reproduces unseeded runs.
  const uint64_t drawn = seed_rng_();
  r->seed = params.has_seed ? static_cast<uint64_t>(params.seed) : drawn;
  TROUPE_CHECK(requests_.emplace(id, r).second);
  waiting_.push_back(r);
  stats_.num_prompt_tokens += prompt_len;
  return "";
}

void token_budget_scheduler::abort_request(request_id id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const request_ptr r = it->second;
  if (!in_flight_) {
    finish(r, finish_reason::abort);
  } else if (!r->aborted) {
    r->aborted = true;  // finished when the step is back
    pending_aborts_.push_back(r);
  }
}

void token_budget_scheduler::finish_pending_aborts() {
  std::vector<request_ptr> aborts = std::move(pending_aborts_);
  pending_aborts_.clear();
  for (const request_ptr& r : aborts) {
    if (requests_.count(r->id) != 0) finish(r, finish_reason::abort);
  }
}

int64_t token_budget_scheduler::blocks_needed(const request_state& r,
                                              int64_t num_new_tokens) const {
  const int64_t tokens = r.num_computed_tokens + num_new_tokens;
  const int64_t blocks = (tokens + limits_.block_size - 1) / limits_.block_size;
  return std::max<int64_t>(0, blocks - static_cast<int64_t>(r.block_ids.size()));
}

kv_transaction token_budget_scheduler::schedule() {
  TROUPE_CHECK(!in_flight_);
  kv_transaction txn;
  txn.free_ids = std::move(pending_free_);
  pending_free_.clear();
  scheduled_.clear();
  int64_t budget = limits_.max_num_batched_tokens;
  const bool preempted = schedule_running(txn, budget);
  // As vLLM: a step that had to preempt admits nobody new.
  if (!preempted) schedule_waiting(txn, budget);
  in_flight_ = true;
  return txn;
}

bool token_budget_scheduler::schedule_running(kv_transaction& txn, int64_t& budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const request_ptr r = running_[i];
    const int64_t num_new = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    TROUPE_CHECK(num_new > 0);
    bool self_preempted = false;
    while (blocks_needed(*r, num_new) > num_blocks_free_) {
      const request_ptr victim = running_.back();
      running_.pop_back();
      preempt(victim, txn);
      preempted = true;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    reserve(*r, num_new, txn, budget);
  }
  return preempted;
}

void token_budget_scheduler::schedule_waiting(kv_transaction& txn, int64_t& budget) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < limits_.max_num_seqs) {
    const request_ptr r = waiting_.front();
    int64_t num_new = r->num_tokens() - r->num_computed_tokens;
    if (!limits_.enable_chunked_prefill && num_new > budget) break;
    num_new = std::min(num_new, budget);
    if (blocks_needed(*r, num_new) > num_blocks_free_) break;
    waiting_.pop_front();
    running_.push_back(r);
    reserve(*r, num_new, txn, budget);
  }
}

void token_budget_scheduler::reserve(request_state& r, int64_t num_new_tokens,
                                     kv_transaction& txn, int64_t& budget) {
  const int64_t need = blocks_needed(r, num_new_tokens);
  r.num_scheduled_tokens = num_new_tokens;
  r.num_new_blocks = static_cast<int32_t>(need);
  num_blocks_free_ -= need;
  budget -= num_new_tokens;
  txn.grow_ids.push_back(r.id);
  txn.grow_num_blocks.push_back(static_cast<int32_t>(need));
  scheduled_.push_back(requests_.at(r.id));
}

void token_budget_scheduler::release_blocks(request_state& r, kv_transaction& txn) {
  if (!r.block_ids.empty()) {
    txn.free_ids.push_back(r.id);
    num_blocks_free_ += static_cast<int64_t>(r.block_ids.size());
    r.block_ids.clear();
  }
}

void token_budget_scheduler::preempt(const request_ptr& victim, kv_transaction& txn) {
  release_blocks(*victim, txn);
  victim->num_computed_tokens = 0;
  if (victim->known_to_worker) {
    pending_drop_.push_back(victim->id);
    victim->known_to_worker = false;
  }
  waiting_.push_front(victim);
  ++stats_.num_preemptions;
}

step_plan token_budget_scheduler::commit(const kv_grant& grant) {
  TROUPE_CHECK(in_flight_);
  TROUPE_CHECK(grant.new_block_ids.size() == scheduled_.size());
  TROUPE_CHECK(grant.num_blocks_free == num_blocks_free_);
  step_plan plan;
  if (scheduled_.empty()) {
    in_flight_ = false;
    finish_pending_aborts();
    return plan;
  }
  plan.step_id = ++step_id_;
  plan.finished_ids = std::move(pending_drop_);
  pending_drop_.clear();
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    request_state& r = *scheduled_[i];
    const std::vector<int32_t>& fresh = grant.new_block_ids[i];
    TROUPE_CHECK(static_cast<int32_t>(fresh.size()) == r.num_new_blocks);
    r.block_ids.insert(r.block_ids.end(), fresh.begin(), fresh.end());
    plan.total_num_scheduled_tokens += r.num_scheduled_tokens;
    if (!r.known_to_worker) {
      new_request_data d;
      d.id = r.id;
      d.token_ids = r.prompt_ids;
      d.token_ids.insert(d.token_ids.end(), r.output_ids.begin(), r.output_ids.end());
      d.num_prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
      d.params = r.params;
      d.seed = r.seed;
      d.block_ids = r.block_ids;
      d.num_computed_tokens = r.num_computed_tokens;
      d.num_scheduled_tokens = r.num_scheduled_tokens;
      d.prompt_logprobs_start = r.prompt_logprobs_next;
      plan.new_requests.push_back(std::move(d));
      r.known_to_worker = true;
    } else {
      plan.cached_requests.push_back({r.id, fresh, r.num_scheduled_tokens});
    }
  }
  return plan;
}

finish_reason token_budget_scheduler::check_stop(const request_state& r, int32_t token) const {
  const auto& eos = limits_.eos_token_ids;
  if (!r.params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    return finish_reason::stop;
  }
  const auto& stops = r.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return finish_reason::stop;
  if (static_cast<int64_t>(r.output_ids.size()) >= r.params.max_tokens) {
    return finish_reason::length;
  }
  if (r.num_tokens() >= limits_.max_model_len) return finish_reason::length;
  return finish_reason::none;
}

void token_budget_scheduler::apply_sample(request_state& r, const sampled_output& out,
                                          request_output& msg) {
  if (!out.prompt_logprobs.empty()) {
    msg.prompt_logprobs = out.prompt_logprobs;
    r.prompt_logprobs_next += static_cast<int64_t>(out.prompt_logprobs.size());
  }
  if (out.token_id < 0) return;
  r.output_ids.push_back(out.token_id);
  ++stats_.num_generated_tokens;
  msg.new_token_ids.push_back(out.token_id);
  if (r.params.logprobs >= 0) msg.logprobs.push_back(out.logprobs);
  msg.finish = check_stop(r, out.token_id);
}

void token_budget_scheduler::update(const step_output& output) {
  TROUPE_CHECK(in_flight_ && output.step_id == step_id_);
  in_flight_ = false;
  ++stats_.num_steps;
  std::unordered_map<request_id, const sampled_output*> by_id;
  for (const sampled_output& out : output.outputs) by_id[out.id] = &out;
  const std::vector<request_ptr> scheduled = std::move(scheduled_);
  scheduled_.clear();
  for (const request_ptr& r : scheduled) {
    r->num_computed_tokens += r->num_scheduled_tokens;
    stats_.num_computed_tokens += r->num_scheduled_tokens;
    r->num_scheduled_tokens = 0;
    if (r->aborted) continue;  // finished below, its output dropped
    auto it = by_id.find(r->id);
    TROUPE_CHECK_MSG(it != by_id.end(), "worker returned no output for a scheduled request");
    request_output msg;
    msg.id = r->id;
    msg.num_prompt_tokens = static_cast<int64_t>(r->prompt_ids.size());
    apply_sample(*r, *it->second, msg);
    if (msg.finish != finish_reason::none) {
      finish(r, msg.finish);
      outputs_.back().new_token_ids = std::move(msg.new_token_ids);
      outputs_.back().logprobs = std::move(msg.logprobs);
      outputs_.back().prompt_logprobs = std::move(msg.prompt_logprobs);
    } else if (!msg.new_token_ids.empty() || !msg.prompt_logprobs.empty()) {
      outputs_.push_back(std::move(msg));
    }
  }
  finish_pending_aborts();
}

void token_budget_scheduler::finish(const request_ptr& r, finish_reason reason,
                                    std::string error) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  if (!r->block_ids.empty()) {
    pending_free_.push_back(r->id);
    num_blocks_free_ += static_cast<int64_t>(r->block_ids.size());
    r->block_ids.clear();
  }
  if (r->known_to_worker) pending_drop_.push_back(r->id);
  requests_.erase(r->id);
  ++stats_.num_requests_finished;
  request_output msg;
  msg.id = r->id;
  msg.finish = reason;
  msg.error = std::move(error);
  msg.num_prompt_tokens = static_cast<int64_t>(r->prompt_ids.size());
  outputs_.push_back(std::move(msg));
}

std::vector<request_output> token_budget_scheduler::take_outputs() {
  std::vector<request_output> out = std::move(outputs_);
  outputs_.clear();
  return out;
}

engine_stats token_budget_scheduler::stats() const {
  engine_stats s = stats_;
  s.num_running = static_cast<int64_t>(running_.size());
  s.num_waiting = static_cast<int64_t>(waiting_.size());
  s.num_blocks_free = num_blocks_free_;
  return s;
}

}  // namespace troupe
