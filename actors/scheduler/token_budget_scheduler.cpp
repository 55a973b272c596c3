#include "actors/scheduler/token_budget_scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "common/check.h"

namespace troupe {

token_budget_scheduler::token_budget_scheduler(const scheduler_limits& limits)
    : limits_(limits),
      seed_rng_(limits.seed),
      num_blocks_free_(limits.num_blocks_usable),
      num_cpu_blocks_free_(limits.num_cpu_blocks) {
  TROUPE_CHECK(limits.block_size > 0 && limits.num_blocks_usable > 0);
  stats_.num_blocks_total = limits.num_blocks_usable;
  stats_.num_cpu_blocks_total = limits.num_cpu_blocks;
}

std::string token_budget_scheduler::add_request(request_id id, std::vector<int32_t> prompt_ids,
                                                const sampling_params& params,
                                                request_id fork_of) {
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
  r->arrival = next_arrival_++;
  TROUPE_CHECK(requests_.emplace(id, r).second);
  stats_.num_prompt_tokens += prompt_len;
  auto leader = fork_of != 0 ? requests_.find(fork_of) : requests_.end();
  if (leader != requests_.end() && leader->second->output_ids.empty() &&
      leader->second->num_cpu_blocks == 0 && leader->second->prompt_ids == r->prompt_ids &&
      leader->second->params.prompt_logprobs < 0 && !leader->second->aborted) {
    leader->second->children.push_back(r);  // parked until the leader's prompt is done
    r->parked_in = leader->second;
    return "";
  }
  waiting_.push_back(r);
  return "";
}

void token_budget_scheduler::abort_request(request_id id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const request_ptr r = it->second;
  // A waiting request is in no step: it can finish now unless a transaction
  // is open (the block mirror must not change between schedule and commit).
  const bool txn_open = in_flight_ > static_cast<int>(committed_.size());
  const bool waiting = std::find(waiting_.begin(), waiting_.end(), r) != waiting_.end();
  if (in_flight_ == 0 || (waiting && !txn_open && r->inflight_tokens == 0)) {
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
  const int64_t tokens = r.computed_eff() + num_new_tokens;
  const int64_t blocks = (tokens + limits_.block_size - 1) / limits_.block_size;
  const bool cow = r.may_copy_on_write && r.computed_eff() % limits_.block_size != 0;
  return std::max<int64_t>(0, blocks - static_cast<int64_t>(r.block_ids.size())) + (cow ? 1 : 0);
}

namespace {

bool penalized(const sampling_params& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

}  // namespace

bool token_budget_scheduler::schedulable_ahead(const request_state& r) const {
  if (r.aborted || r.done || r.num_tokens_eff() <= r.computed_eff()) return false;
  if (r.placeholders > 0) {
    // Its next input is the in-flight step's token: not when that token may
    // end it (max_tokens, max_model_len), nor when its sampler needs it.
    if (static_cast<int64_t>(r.output_ids.size()) + r.placeholders >= r.params.max_tokens) {
      return false;
    }
    if (r.num_tokens_eff() >= limits_.max_model_len) return false;
  }
  return true;
}

bool token_budget_scheduler::can_schedule_ahead() const {
  if (!limits_.async_scheduling || in_flight_ != 1 || committed_.size() != 1) return false;
  if (!has_unfinished()) return false;
  // Forks share blocks and sample from their leader's logits; a penalized
  // request's sampler needs the token still out (planning around it would
  // run it every other step): lockstep for those.
  for (const request_ptr& r : running_) {
    if (!r->children.empty() || r->fork_pending || r->may_copy_on_write) return false;
    if (r->placeholders > 0 && !r->aborted && penalized(r->params)) return false;
  }
  // Every running request that can go must fit without a preemption (the
  // order of schedule_running; priority order is kept by the last schedule).
  int64_t budget = limits_.max_num_batched_tokens, free = num_blocks_free_;
  bool any = false;
  for (const request_ptr& r : running_) {
    if (budget <= 0) break;
    if (!schedulable_ahead(*r)) continue;
    const int64_t num_new = std::min(r->num_tokens_eff() - r->computed_eff(), budget);
    const int64_t need = blocks_needed(*r, num_new);
    if (need > free) return false;  // would preempt: wait for the step
    free -= need;
    budget -= num_new;
    any = true;
  }
  if (any) return true;
  // Only admissions: worth a transaction when the first waiting one fits.
  if (waiting_.empty() || budget <= 0 ||
      static_cast<int64_t>(running_.size()) >= limits_.max_num_seqs) {
    return false;
  }
  const request_state& head = *waiting_.front();
  const int64_t num_new = std::min(head.num_tokens() - head.num_computed_tokens, budget);
  return limits_.enable_chunked_prefill || num_new == head.num_tokens() - head.num_computed_tokens
             ? blocks_needed(head, num_new) <= free
             : false;
}

kv_transaction token_budget_scheduler::schedule() {
  ahead_ = in_flight_ > 0;
  TROUPE_CHECK(!ahead_ || can_schedule_ahead());
  kv_transaction txn;
  txn.free_ids = std::move(pending_free_);
  pending_free_.clear();
  scheduled_.clear();
  admitting_.clear();
  if (limits_.priority_policy) order_by_priority();
  int64_t budget = limits_.max_num_batched_tokens;
  const bool preempted = schedule_running(txn, budget);
  // As vLLM: a step that had to preempt admits nobody new.
  if (!preempted) schedule_waiting(txn, budget);
  ++in_flight_;
  return txn;
}

void token_budget_scheduler::hold(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) ++block_holders_[b];
}

int64_t token_budget_scheduler::release(std::vector<int32_t>& blocks) {
  int64_t freed = 0;
  for (int32_t b : blocks) {
    auto it = block_holders_.find(b);
    TROUPE_CHECK(it != block_holders_.end() && it->second > 0);
    if (--it->second == 0) {
      block_holders_.erase(it);
      ++freed;
    }
  }
  blocks.clear();
  return freed;
}

void token_budget_scheduler::order_by_priority() {
  // Running first by (priority, arrival): victims come from the back, so the
  // lowest priority (latest among equals) is preempted first, as vLLM does.
  auto before = [](const request_ptr& a, const request_ptr& b) {
    return a->params.priority != b->params.priority ? a->params.priority < b->params.priority
                                                    : a->arrival < b->arrival;
  };
  std::stable_sort(running_.begin(), running_.end(), before);
  std::stable_sort(waiting_.begin(), waiting_.end(), before);
}

bool token_budget_scheduler::schedule_running(kv_transaction& txn, int64_t& budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const request_ptr r = running_[i];
    if (ahead_ && !schedulable_ahead(*r)) continue;
    const int64_t num_new = std::min(r->num_tokens_eff() - r->computed_eff(), budget);
    TROUPE_CHECK(num_new > 0);
    if (ahead_ && blocks_needed(*r, num_new) > num_blocks_free_) break;  // never preempts
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
         static_cast<int64_t>(running_.size() + admitting_.size()) < limits_.max_num_seqs) {
    const request_ptr r = waiting_.front();
    if (r->aborted) break;  // finished when the step in flight returns
    int64_t num_new = r->num_tokens() - r->num_computed_tokens;
    if (!limits_.enable_chunked_prefill && num_new > budget) break;
    num_new = std::min(num_new, budget);
    // Counted as if nothing were cached: the block manager needs at most this.
    const int64_t need = blocks_needed(*r, num_new);
    if (need > num_blocks_free_) break;
    waiting_.pop_front();
    num_blocks_free_ -= need;
    budget -= num_new;
    r->num_scheduled_tokens = num_new;
    kv_admit item;
    item.id = r->id;
    item.token_ids = r->prompt_ids;
    item.token_ids.insert(item.token_ids.end(), r->output_ids.begin(), r->output_ids.end());
    item.num_new_tokens = num_new;
    // Prompt logprobs need every prompt position computed (as vLLM does).
    item.use_prefix_cache = r->params.prompt_logprobs < 0;
    item.swap_in = r->num_cpu_blocks > 0;
    item.num_computed_tokens = r->num_computed_tokens;
    txn.admits.push_back(std::move(item));
    admitting_.push_back(r);
  }
}

void token_budget_scheduler::reserve(request_state& r, int64_t num_new_tokens,
                                     kv_transaction& txn, int64_t& budget) {
  const int64_t need = blocks_needed(r, num_new_tokens);
  r.num_scheduled_tokens = num_new_tokens;
  r.num_new_blocks = static_cast<int32_t>(need);
  num_blocks_free_ -= need;
  budget -= num_new_tokens;
  if (r.fork_pending) {
    hold(r.block_ids);  // the leader's prompt blocks, shared from this transaction on
    txn.forks.push_back({r.leader->id, r.id, {}});
    txn.forks.back().token_ids = r.prompt_ids;
    txn.forks.back().token_ids.insert(txn.forks.back().token_ids.end(), r.output_ids.begin(),
                                      r.output_ids.end());
    r.fork_pending = false;
    r.leader.reset();
    r.num_tokens_sent_to_kv = r.num_tokens();
  }
  kv_grow grow;
  grow.id = r.id;
  const int64_t known = r.num_tokens();
  for (int64_t t = r.num_tokens_sent_to_kv; t < known; ++t) {
    const size_t prompt_len = r.prompt_ids.size();
    grow.new_token_ids.push_back(t < static_cast<int64_t>(prompt_len)
                                     ? r.prompt_ids[static_cast<size_t>(t)]
                                     : r.output_ids[static_cast<size_t>(t) - prompt_len]);
  }
  r.num_tokens_sent_to_kv = known;
  grow.num_tokens_after = r.computed_eff() + num_new_tokens;
  txn.grows.push_back(std::move(grow));
  scheduled_.push_back(requests_.at(r.id));
}

std::vector<size_t> token_budget_scheduler::apply_grows(const kv_grant& grant) {
  TROUPE_CHECK(grant.grow_block_ids.size() == scheduled_.size());
  TROUPE_CHECK(grant.grow_ok.size() == scheduled_.size());
  std::vector<request_ptr> kept;
  std::vector<size_t> kept_index;
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    const request_ptr& r = scheduled_[i];
    if (!grant.grow_ok[i]) {
      // The block manager had fewer free blocks than estimated: this request
      // sits the step out, keeping what it has.
      r->num_scheduled_tokens = 0;
      continue;
    }
    if (grant.grow_cow_index[i] >= 0) {
      int32_t& slot = r->block_ids[static_cast<size_t>(grant.grow_cow_index[i])];
      std::vector<int32_t> old = {slot};
      release(old);
      slot = grant.grow_cow_block[i];
      hold({slot});
    }
    r->may_copy_on_write = false;
    const std::vector<int32_t>& fresh = grant.grow_block_ids[i];
    hold(fresh);
    r->block_ids.insert(r->block_ids.end(), fresh.begin(), fresh.end());
    kept.push_back(r);
    kept_index.push_back(i);
  }
  scheduled_ = std::move(kept);
  return kept_index;
}

void token_budget_scheduler::apply_admissions(const kv_grant& grant) {
  TROUPE_CHECK(grant.admits.size() == admitting_.size());
  std::vector<request_ptr> refused;
  for (size_t i = 0; i < admitting_.size(); ++i) {
    const request_ptr& r = admitting_[i];
    const kv_admit_result& a = grant.admits[i];
    if (!a.admitted) {
      refused.push_back(r);
      continue;
    }
    r->block_ids = a.block_ids;
    hold(r->block_ids);
    r->num_computed_tokens = a.num_cached_tokens;
    r->num_cpu_blocks = 0;  // swapped in, if it was out
    r->num_scheduled_tokens =
        std::min(r->num_scheduled_tokens, r->num_tokens() - a.num_cached_tokens);
    r->num_new_blocks = static_cast<int32_t>(a.block_ids.size());
    r->num_tokens_sent_to_kv = r->num_tokens();
    running_.push_back(r);
    scheduled_.push_back(r);
  }
  // Refused admissions go back to the front, in their order.
  waiting_.insert(waiting_.begin(), refused.begin(), refused.end());
  admitting_.clear();
}

void token_budget_scheduler::release_blocks(request_state& r, kv_transaction& txn) {
  if (!r.block_ids.empty()) {
    txn.free_ids.push_back(r.id);
    num_blocks_free_ += release(r.block_ids);
  }
}

void token_budget_scheduler::preempt(const request_ptr& victim, kv_transaction& txn) {
  if (victim->fork_pending) {  // its blocks are still only its leader's
    victim->fork_pending = false;
    victim->leader.reset();
    victim->block_ids.clear();
  }
  victim->may_copy_on_write = false;
  const auto held = static_cast<int64_t>(victim->block_ids.size());
  if (held > 0 && held <= num_cpu_blocks_free_ && victim->num_computed_tokens > 0) {
    // Swap out: the KV goes to host memory; the device blocks are free for
    // this very step (the copy runs before the forward pass).
    txn.swap_out_ids.push_back(victim->id);
    num_cpu_blocks_free_ -= held;
    num_blocks_free_ += release(victim->block_ids);
    victim->num_cpu_blocks = held;
    ++stats_.num_swap_outs;
  } else {
    release_blocks(*victim, txn);
    victim->num_computed_tokens = 0;
    victim->num_tokens_sent_to_kv = 0;
  }
  if (victim->known_to_worker) {
    pending_drop_.push_back(victim->id);
    victim->known_to_worker = false;
  }
  waiting_.push_front(victim);
  ++stats_.num_preemptions;
}

step_plan token_budget_scheduler::commit(const kv_grant& grant) {
  TROUPE_CHECK(in_flight_ > static_cast<int>(committed_.size()));
  TROUPE_CHECK(grant.grow_block_ids.size() == scheduled_.size());
  // Grows first (scheduled_ holds the running requests so far), then the
  // admissions the block manager granted.
  // grow_index[i]: the grant's entry for scheduled_[i], for the grows kept.
  const std::vector<size_t> grow_index = apply_grows(grant);
  apply_admissions(grant);
  num_blocks_free_ = grant.num_blocks_free;
  num_cpu_blocks_free_ = grant.num_cpu_blocks_free;
  stats_.prefix_cache_queries = grant.prefix_cache_queries;
  stats_.prefix_cache_hits = grant.prefix_cache_hits;
  step_plan plan;
  // A step with no request still runs when it carries swap copies.
  ahead_ = false;
  if (scheduled_.empty() && grant.swap_out_src.empty() && grant.swap_in_src.empty()) {
    --in_flight_;
    if (in_flight_ == 0) finish_pending_aborts();
    return plan;
  }
  plan.step_id = ++step_id_;
  plan.swap_out_src = grant.swap_out_src;
  plan.swap_out_dst = grant.swap_out_dst;
  plan.swap_in_src = grant.swap_in_src;
  plan.swap_in_dst = grant.swap_in_dst;
  plan.copy_src = grant.copy_src;
  plan.copy_dst = grant.copy_dst;
  plan.finished_ids = std::move(pending_drop_);
  pending_drop_.clear();
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    request_state& r = *scheduled_[i];
    plan.total_num_scheduled_tokens += r.num_scheduled_tokens;
    std::vector<fork_child>* forks = nullptr;
    if (!r.known_to_worker) {
      TROUPE_CHECK(r.inflight_tokens == 0 && r.placeholders == 0);
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
      forks = &plan.new_requests.back().fork_children;
      r.known_to_worker = true;
    } else {
      TROUPE_CHECK(i < grow_index.size());  // a known request here is a grow
      const size_t g = grow_index[i];
      cached_request_data d;
      d.id = r.id;
      d.new_block_ids = grant.grow_block_ids[g];
      d.num_scheduled_tokens = r.num_scheduled_tokens;
      if (grant.grow_cow_index[g] >= 0) {
        d.replaced_index.push_back(grant.grow_cow_index[g]);
        d.replaced_block.push_back(grant.grow_cow_block[g]);
      }
      plan.cached_requests.push_back(std::move(d));
      forks = &plan.cached_requests.back().fork_children;
    }
    // The step that ends a leader's prompt samples its parked forks too.
    const bool ends_prompt = r.output_ids.empty() && r.placeholders == 0 &&
                             r.computed_eff() + r.num_scheduled_tokens == r.num_tokens();
    if (ends_prompt) {
      for (const request_ptr& c : r.children) forks->push_back({c->id, c->seed, c->params});
    }
  }
  if (in_flight_ > 1) ++stats_.num_steps_ahead;
  // The step is in flight: what it computes and samples counts from now on.
  step_record rec;
  rec.step_id = plan.step_id;
  for (const request_ptr& r : scheduled_) {
    const int64_t tokens = r->num_scheduled_tokens;
    const bool samples = r->computed_eff() + tokens == r->num_tokens_eff();
    rec.requests.push_back(r);
    rec.tokens.push_back(tokens);
    rec.samples.push_back(samples);
    r->inflight_tokens += tokens;
    r->num_scheduled_tokens = 0;
    if (samples) ++r->placeholders;
  }
  scheduled_.clear();
  committed_.push_back(std::move(rec));
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
  TROUPE_CHECK(!committed_.empty() && output.step_id == committed_.front().step_id);
  TROUPE_CHECK_MSG(in_flight_ == static_cast<int>(committed_.size()),
                   "an update while a transaction is open");
  const step_record rec = std::move(committed_.front());
  committed_.pop_front();
  --in_flight_;
  ++stats_.num_steps;
  std::unordered_map<request_id, const sampled_output*> by_id;
  for (const sampled_output& out : output.outputs) by_id[out.id] = &out;
  for (size_t k = 0; k < rec.requests.size(); ++k) {
    const request_ptr& r = rec.requests[k];
    r->inflight_tokens -= rec.tokens[k];
    if (rec.samples[k]) --r->placeholders;
    r->num_computed_tokens += rec.tokens[k];
    stats_.num_computed_tokens += rec.tokens[k];
    // Finished (its output dropped) or to be finished below.
    if (r->aborted || r->done) continue;
    auto it = by_id.find(r->id);
    TROUPE_CHECK_MSG(it != by_id.end(), "worker returned no output for a scheduled request");
    request_output msg;
    msg.id = r->id;
    msg.num_prompt_tokens = static_cast<int64_t>(r->prompt_ids.size());
    if (!it->second->fork_samples.empty()) start_forks(*r, *it->second);
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
  // No transaction is open here: aborts can finish (their blocks are freed
  // by the next transaction, after any step still using them).
  finish_pending_aborts();
}

void token_budget_scheduler::start_forks(request_state& leader, const sampled_output& out) {
  const bool partial_block = leader.prompt_ids.size() % static_cast<size_t>(limits_.block_size) != 0;
  for (const fork_sample& f : out.fork_samples) {
    auto it = std::find_if(leader.children.begin(), leader.children.end(),
                           [&](const request_ptr& c) { return c->id == f.id; });
    if (it == leader.children.end()) continue;  // aborted meanwhile
    const request_ptr child = *it;
    leader.children.erase(it);
    child->parked_in.reset();
    // The child's prompt KV is the leader's: it shares those blocks from the
    // next transaction on (kv_fork), so it starts with the prompt computed.
    child->num_computed_tokens = static_cast<int64_t>(child->prompt_ids.size());
    child->block_ids = leader.block_ids;
    child->fork_pending = true;
    child->leader = requests_.at(leader.id);
    child->may_copy_on_write = partial_block;
    leader.may_copy_on_write = partial_block;
    running_.push_back(child);
    request_output msg;
    msg.id = child->id;
    msg.num_prompt_tokens = static_cast<int64_t>(child->prompt_ids.size());
    sampled_output as_own;
    as_own.id = child->id;
    as_own.token_id = f.token_id;
    as_own.logprobs = f.logprobs;
    apply_sample(*child, as_own, msg);
    if (msg.finish != finish_reason::none) {
      finish(child, msg.finish);
      outputs_.back().new_token_ids = std::move(msg.new_token_ids);
      outputs_.back().logprobs = std::move(msg.logprobs);
    } else {
      outputs_.push_back(std::move(msg));
    }
  }
}

void token_budget_scheduler::unpark_children(request_state& leader) {
  // A leader that stops before its prompt is done (abort, error) lets its
  // forks run on their own: they prefill themselves.
  for (const request_ptr& c : leader.children) {
    c->parked_in.reset();
    waiting_.push_back(c);
  }
  leader.children.clear();
}

void token_budget_scheduler::finish(const request_ptr& r, finish_reason reason,
                                    std::string error) {
  r->done = true;
  unpark_children(*r);
  if (auto parent = r->parked_in.lock()) {
    auto& siblings = parent->children;
    siblings.erase(std::remove(siblings.begin(), siblings.end(), r), siblings.end());
  }
  if (r->fork_pending) {  // never forked: the blocks are the leader's alone
    r->fork_pending = false;
    r->leader.reset();
    r->block_ids.clear();
  }
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  if (!r->block_ids.empty() || r->num_cpu_blocks > 0) {
    pending_free_.push_back(r->id);
    num_blocks_free_ += release(r->block_ids);
    num_cpu_blocks_free_ += r->num_cpu_blocks;
    r->num_cpu_blocks = 0;
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
  s.num_cpu_blocks_free = num_cpu_blocks_free_;
  for (const request_ptr& r : waiting_) s.num_swapped += r->num_cpu_blocks > 0;
  return s;
}

}  // namespace troupe
