#include "actors/scheduler/token_budget_scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "common/check.h"

namespace troupe {

namespace {

fair_share_limits share_limits(const scheduler_limits& l) {
  fair_share_limits f;
  f.max_num_seqs = l.max_num_seqs;
  f.max_num_batched_tokens = l.max_num_batched_tokens;
  f.max_num_seqs_per_request = l.max_num_seqs_per_request > 0
                                   ? l.max_num_seqs_per_request
                                   : std::max<int64_t>(1, l.max_num_seqs / 2);
  f.enable_chunked_prefill = l.enable_chunked_prefill;
  f.priority_policy = l.priority_policy;
  return f;
}

}  // namespace

token_budget_scheduler::token_budget_scheduler(const scheduler_limits& limits)
    : limits_(limits),
      fair_(share_limits(limits)),
      seed_rng_(limits.seed),
      admission_([&] {
        kv_admission_config c;
        c.enabled = limits.reserve_kv;
        c.block_size = limits.block_size;
        c.num_blocks = limits.num_blocks_usable;
        return c;
      }()),
      num_blocks_free_(limits.num_blocks_usable),
      num_cpu_blocks_free_(limits.num_cpu_blocks) {
  TROUPE_CHECK(limits.block_size > 0 && limits.num_blocks_usable > 0);
  stats_.num_blocks_total = limits.num_blocks_usable;
  stats_.num_cpu_blocks_total = limits.num_cpu_blocks;
  stats_.kv_bytes_per_block = limits.kv_bytes_per_block;
  stats_.block_size = limits.block_size;
  stats_.kv_cache_dtype = limits.fp8_kv_cache ? "fp8_e4m3" : "auto";
  stats_.enable_prefix_caching = limits.enable_prefix_caching;
  // One counter a draft position from the start (what /metrics shows while
  // nothing has been verified yet).
  stats_.spec_accepted_per_pos.assign(static_cast<size_t>(std::max(limits.num_speculative_tokens, 0)), 0);
}

std::string token_budget_scheduler::add_request(request_id id, std::vector<int32_t> prompt_ids,
                                                const sampling_params& params,
                                                request_id fork_of, request_id group) {
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len == 0) return "the prompt is empty";
  if (params.lora_id < 0 || (params.lora_id > 0 && limits_.max_loras == 0)) {
    return "its LoRA adapter is not served (unloaded before the request started, or LoRA is off)";
  }
  if (prompt_len > limits_.max_model_len) {
    return "the prompt has " + std::to_string(prompt_len) +
           " tokens, more than max_model_len " + std::to_string(limits_.max_model_len);
  }
  // The longest this request can get must fit in the whole cache, or it
  // could only ever be preempted by itself.
  const int64_t longest =
      std::min<int64_t>(prompt_len + std::max<int64_t>(params.max_tokens, 0), limits_.max_model_len);
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
  r->group = group != 0 ? group : id;
  // Parked only with a leader not yet admitted: its admission decides how
  // many samples get slots (a running leader's slots are already counted).
  if (leader != requests_.end() && leader->second->in_waiting &&
      leader->second->output_ids.empty() && leader->second->num_computed_tokens == 0 &&
      leader->second->num_cpu_blocks == 0 && leader->second->prompt_ids == r->prompt_ids &&
      leader->second->params.prompt_logprobs < 0 && !leader->second->aborted) {
    r->group = leader->second->group;
    leader->second->children.push_back(r);  // parked until the leader's prompt is done
    r->parked_in = leader->second;
    if (!leader->second->prompt_progress) leader->second->prompt_progress = std::make_shared<int64_t>(0);
    r->prompt_progress = leader->second->prompt_progress;
  } else {
    if (leader != requests_.end()) r->group = leader->second->group;
    push_waiting(r, false);
  }
  return "";
}

void token_budget_scheduler::push_waiting(const request_ptr& r, bool front) {
  r->in_waiting = true;
  if (front) waiting_.push_front(r); else waiting_.push_back(r);
}

void token_budget_scheduler::abort_requests(const std::vector<request_id>& ids) {
  // A request in no step (waiting, or parked with its leader) can finish now
  // unless a transaction is open (the block mirror must not change between
  // schedule and commit); others finish when the step is back.
  const bool txn_open = in_flight_ > static_cast<int>(committed_.size());
  std::vector<request_ptr> now;
  for (request_id id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->aborted) continue;
    const request_ptr& r = it->second;
    r->aborted = true;
    const bool idle = r->in_waiting || !r->parked_in.expired();
    if (in_flight_ == 0 || (idle && !txn_open && r->inflight_tokens == 0)) {
      now.push_back(r);
    } else {
      pending_aborts_.push_back(r);
    }
  }
  for (const request_ptr& r : now) {
    if (!r->done) finish(r, finish_reason::abort);
  }
  sweep_finished();
}

void token_budget_scheduler::finish_pending_aborts() {
  std::vector<request_ptr> aborts = std::move(pending_aborts_);
  pending_aborts_.clear();
  for (const request_ptr& r : aborts) {
    if (!r->done) finish(r, finish_reason::abort);
  }
}

int64_t token_budget_scheduler::blocks_needed(const request_state& r,
                                              int64_t num_new_tokens) const {
  const int64_t tokens = r.computed_eff() + num_new_tokens;
  const int64_t blocks = (tokens + limits_.block_size - 1) / limits_.block_size;
  const bool cow = r.may_copy_on_write && r.computed_eff() % limits_.block_size != 0;
  return std::max<int64_t>(0, blocks - static_cast<int64_t>(r.block_ids.size())) + (cow ? 1 : 0);
}

bool token_budget_scheduler::runs_to_max_tokens(const sampling_params& p) {
  return (p.ignore_eos && p.stop.empty() && p.stop_token_ids.empty()) || p.min_tokens >= p.max_tokens;
}

int64_t token_budget_scheduler::tokens_left(const request_state& r) const {
  const int64_t generated = static_cast<int64_t>(r.output_ids.size()) + r.placeholders;
  return std::max<int64_t>(0, std::min<int64_t>(r.params.max_tokens - generated,
                                                limits_.max_model_len - r.num_tokens_eff()));
}

void token_budget_scheduler::add_demands(const request_state& r, size_t kids,
                                         std::vector<kv_admission::demand>& out) const {
  const int64_t expected = admission_.expected_tokens(tokens_left(r), runs_to_max_tokens(r.params));
  out.push_back({r.num_tokens_eff(), expected});
  // A parked sample: its own outputs, and a block for copy-on-write.
  for (size_t i = 0; i < kids; ++i) out.push_back({limits_.block_size, expected});
}

int64_t token_budget_scheduler::expected_cached(const request_state& r) const {
  if (!r.prompt_progress || !limits_.enable_prefix_caching || !limits_.enable_chunked_prefill ||
      r.num_computed_tokens > 0 || r.num_cpu_blocks > 0 || r.params.prompt_logprobs >= 0) {
    return 0;
  }
  // Full blocks only, and never the last token (its logits are needed).
  const int64_t known = std::min(*r.prompt_progress, r.num_tokens() - 1);
  return known / limits_.block_size * limits_.block_size;
}

bool token_budget_scheduler::schedulable_ahead(const request_state& r) const {
  if (r.aborted || r.done || r.num_tokens_eff() <= r.computed_eff()) return false;
  // Micro-batches: a request in a step in flight waits for that step's
  // tokens (the last stage samples them); one that is in none has every
  // token known, drafts included.
  if (limits_.pipeline_depth > 1) return r.inflight_tokens == 0;
  // Verifying drafts: its accepted count is not known yet. A drafter match:
  // it waits for its tokens to verify drafts next.
  if (r.spec_inflight || (limits_.num_speculative_tokens > 0 && r.wants_spec)) return false;
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

int token_budget_scheduler::max_steps_in_flight() const {
  if (limits_.pipeline_depth > 1) return static_cast<int>(limits_.pipeline_depth);
  return limits_.async_scheduling ? 2 : 1;
}

bool token_budget_scheduler::forks_in_play() const {
  for (const request_ptr& r : running_) {
    if (!r->children.empty() || r->fork_pending || r->may_copy_on_write) return true;
  }
  return false;
}

size_t token_budget_scheduler::running_per_step() const {
  // While forks or copy-on-write hold steps in lockstep (can_schedule_ahead)
  // nothing rotates the micro-batches: every step takes everyone, so that
  // no request waits behind the first ones.
  if (limits_.pipeline_depth <= 1 || forks_in_play()) return running_.size();
  const auto depth = static_cast<size_t>(limits_.pipeline_depth);
  return (running_.size() + depth - 1) / depth;
}

bool token_budget_scheduler::can_schedule_ahead() const {
  if (in_flight_ == 0 || in_flight_ >= max_steps_in_flight()) return false;
  if (committed_.size() != static_cast<size_t>(in_flight_)) return false;  // a transaction is open
  if (!has_unfinished()) return false;
  // Forks share blocks and sample from their leader's logits: lockstep for
  // those. A request whose sampler needs the token still out (penalties,
  // bad words of several tokens, a constraint) is planned ahead like the
  // others: the worker samples its row once that token is back, while the
  // step's forward runs (model_runner::sample_deferred). (Micro-batches
  // never plan a request whose tokens are out.)
  if (forks_in_play()) return false;
  // Every running request that can go must fit without a preemption (the
  // order of schedule_running; priority order is kept by the last schedule).
  int64_t budget = limits_.max_num_batched_tokens, free = num_blocks_free_;
  bool any = false;
  size_t taken = 0;
  for (const request_ptr& r : running_) {
    if (budget <= 0 || taken == running_per_step()) break;
    if (!schedulable_ahead(*r)) continue;
    ++taken;
    const int64_t num_new = std::min(r->num_tokens_eff() - r->computed_eff(), budget);
    const int64_t need = blocks_needed(*r, num_new);
    if (need > free) return false;  // would preempt: wait for the step
    free -= need;
    budget -= num_new;
    any = true;
  }
  if (any) return true;
  // Only admissions: worth a transaction when the first one schedule_waiting
  // would take fits (a group at its share of the slots is skipped there).
  if (waiting_.empty() || budget <= 0) return false;
  int64_t slots = 0;
  std::unordered_map<request_id, int64_t> group_slots;
  for (const request_ptr& r : running_) {
    slots += r->num_slots();
    group_slots[r->group] += r->num_slots();
  }
  if (slots >= limits_.max_num_seqs) return false;
  const std::unordered_set<int64_t> adapters = running_adapters();
  std::unordered_set<int64_t> reading;
  std::string error;
  for (const request_ptr& r : waiting_) {
    if (r->aborted || fair_.slot_share() - group_slots[r->group] <= 0 ||
        gate_adapter(*r, adapters, reading, error) != adapter_gate::admit) {
      continue;
    }
    const int64_t left = r->num_tokens() - r->num_computed_tokens;
    const int64_t num_new = std::min(left, budget);
    if (!limits_.enable_chunked_prefill && num_new < left) return false;
    if (blocks_needed(*r, num_new) > free) return false;
    return !admission_.enabled() || running_.empty() || admits(*r, running_demands(), 0);
  }
  return false;
}

std::vector<kv_admission::demand> token_budget_scheduler::running_demands() const {
  std::vector<kv_admission::demand> demands;
  for (const request_ptr& r : running_) {
    if (!r->done) add_demands(*r, r->children.size(), demands);
  }
  return demands;
}

bool token_budget_scheduler::admits(const request_state& r, std::vector<kv_admission::demand> demands,
                                    size_t kids) const {
  add_demands(r, kids, demands);
  return admission_.peak_blocks(std::move(demands)) <= admission_.capacity_blocks();
}

kv_transaction token_budget_scheduler::schedule() {
  ahead_ = in_flight_ > 0;
  TROUPE_CHECK(!ahead_ || can_schedule_ahead());
  kv_transaction txn;
  txn.rollbacks = std::move(pending_rollbacks_);
  pending_rollbacks_.clear();
  txn.free_ids = std::move(pending_free_);
  pending_free_.clear();
  scheduled_.clear();
  admitting_.clear();
  if (limits_.priority_policy) order_by_priority();
  int64_t budget = limits_.max_num_batched_tokens;
  fair_.begin_step();
  allot_prefill_tokens(budget, count_slots(true));
  apply_forks(txn);
  choose_spec_tokens();
  waiting_for_adapters_ = false;
  const bool preempted = schedule_running(txn, budget);
  if (!ahead_) admission_.on_step(preempted);  // (steps planned ahead never preempt)
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

void token_budget_scheduler::allot_prefill_tokens(int64_t budget, int64_t slots) {
  // What each group would take this step without shares: running prefills in
  // order (decode tokens come off the budget first), then the waiting
  // requests the free slots could admit, skipping groups at their slot share.
  std::vector<std::pair<request_id, int64_t>> demands;
  size_t taken = 0;
  for (const request_ptr& r : running_) {
    if (taken == running_per_step()) break;
    if (ahead_ && !schedulable_ahead(*r)) continue;
    ++taken;
    const int64_t need = r->num_tokens_eff() - r->computed_eff();
    if (need == 1) --budget;
    else if (need > 1) demands.emplace_back(r->group, need);
  }
  std::unordered_map<request_id, int64_t> seats;
  for (const request_ptr& r : waiting_) {
    if (slots >= limits_.max_num_seqs) break;
    if (r->aborted) continue;
    auto [it, fresh] = seats.emplace(r->group, fair_.slots_left(r->group));
    if (it->second <= 0) continue;
    --it->second;
    ++slots;
    demands.emplace_back(r->group, r->num_tokens() - r->num_computed_tokens - expected_cached(*r));
  }
  fair_.allot_tokens(demands, std::max<int64_t>(budget, 0));
}

int64_t token_budget_scheduler::count_slots(bool into_fair_share) {
  int64_t slots = 0;
  for (const request_ptr& r : running_) {
    slots += r->num_slots();
    if (into_fair_share) fair_.use_slots(r->group, r->num_slots());
  }
  return slots;
}

bool token_budget_scheduler::schedule_running(kv_transaction& txn, int64_t& budget) {
  bool preempted = false;
  const size_t per_step = running_per_step();
  size_t taken = 0;
  for (size_t i = 0; i < running_.size() && budget > 0 && taken < per_step; ++i) {
    const request_ptr r = running_[i];
    if (ahead_ && !schedulable_ahead(*r)) continue;
    const int64_t need = r->num_tokens_eff() - r->computed_eff();
    int64_t num_new = std::min(need, budget);
    TROUPE_CHECK(num_new > 0);
    // A prefill chunk within the group's token share; a decode token always.
    if (num_new > 1) num_new = std::min(num_new, fair_.tokens_left(r->group));
    if (num_new <= 0) continue;
    // Draft tokens to verify after a decode token; never at the cost of a
    // preemption.
    int64_t spec = need == 1 ? spec_tokens_for(*r, budget) : 0;
    if (spec > 0 && blocks_needed(*r, 1 + spec) > num_blocks_free_) spec = 0;
    num_new += spec;
    r->num_spec_tokens = spec;
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
    fair_.use_tokens(r->group, num_new);
    ++taken;
  }
  return preempted;
}

void token_budget_scheduler::schedule_waiting(kv_transaction& txn, int64_t& budget) {
  // Arrival order, skipping what cannot go now for a reason of its own
  // (aborted, its group at its share of slots or tokens); the first request
  // that does not fit the budget (unchunked) or the free blocks stops the
  // scan, so that a large request is not overtaken forever.
  int64_t slots = count_slots(false);
  std::vector<request_ptr> skipped;
  std::unordered_set<int64_t> adapters = running_adapters(), reading;
  // KV pressure: the running requests' demands, and each admission's.
  std::vector<kv_admission::demand> demands;
  if (admission_.enabled()) demands = running_demands();
  const bool alone = running_.empty();
  while (!waiting_.empty() && budget > 0 && slots < limits_.max_num_seqs) {
    const request_ptr r = waiting_.front();
    const int64_t cached = expected_cached(*r);
    const int64_t left = r->num_tokens() - r->num_computed_tokens - cached;
    const int64_t num_new = std::min({left, budget, fair_.tokens_left(r->group)});
    std::string error;
    const adapter_gate gate = r->aborted || fair_.slots_left(r->group) <= 0 || num_new <= 0
                                  ? adapter_gate::wait
                                  : gate_adapter(*r, adapters, reading, error);
    if (gate == adapter_gate::failed) {  // its adapter cannot be read: it ends here
      waiting_.pop_front();
      finish(r, finish_reason::error, error);
      continue;
    }
    if (gate == adapter_gate::wait) {
      waiting_.pop_front();  // finished when the step in flight returns, or later
      skipped.push_back(r);
      continue;
    }
    if (!limits_.enable_chunked_prefill && num_new < left) break;
    // Its parked samples come along as far as slots allow (one fresh block
    // each for their first token: copy-on-write or a new block).
    const int64_t seats = std::min(limits_.max_num_seqs - slots, fair_.slots_left(r->group));
    const size_t kids = std::min(r->children.size(), static_cast<size_t>(seats - 1));
    // Counted as if nothing were cached: the block manager needs at most this.
    const int64_t need = blocks_needed(*r, cached + num_new) + static_cast<int64_t>(kids);
    if (need > num_blocks_free_) break;
    // With kv_admission: only if it and the running set are expected to fit
    // to completion (always the first of an empty running set).
    if (admission_.enabled()) {
      if (!(alone && admitting_.empty()) && !admits(*r, demands, kids)) break;
      add_demands(*r, kids, demands);
    }
    waiting_.pop_front();
    r->in_waiting = false;
    if (r->params.lora_id != 0) adapters.insert(r->params.lora_id);
    unpark_extra_children(*r, kids, skipped);
    const int64_t seqs = 1 + static_cast<int64_t>(kids);
    slots += seqs;
    fair_.use_slots(r->group, seqs);
    fair_.use_tokens(r->group, num_new);
    num_blocks_free_ -= need - static_cast<int64_t>(kids);  // the samples' blocks come later
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
    item.lora_id = r->params.lora_id;
    txn.admits.push_back(std::move(item));
    admitting_.push_back(r);
  }
  waiting_.insert(waiting_.begin(), skipped.begin(), skipped.end());
  waiting_for_adapters_ = !reading.empty();
  if (lora_cache_.protect) lora_cache_.protect({adapters.begin(), adapters.end()});
}

void token_budget_scheduler::unpark_extra_children(request_state& leader, size_t keep,
                                                   std::vector<request_ptr>& out) {
  for (size_t i = keep; i < leader.children.size(); ++i) {
    const request_ptr& c = leader.children[i];
    c->parked_in.reset();
    c->in_waiting = true;
    out.push_back(c);
  }
  leader.children.resize(std::min(keep, leader.children.size()));
}

void token_budget_scheduler::reserve(request_state& r, int64_t num_new_tokens,
                                     kv_transaction& txn, int64_t& budget) {
  const int64_t need = blocks_needed(r, num_new_tokens);
  r.num_scheduled_tokens = num_new_tokens;
  r.num_new_blocks = static_cast<int32_t>(need);
  num_blocks_free_ -= need;
  budget -= num_new_tokens;
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
      r->num_spec_tokens = 0;
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
    if (r->preempted_at) {
      stats_.preempted_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - *r->preempted_at).count();
      r->preempted_at.reset();
    }
    r->num_scheduled_tokens =
        std::min(r->num_scheduled_tokens, r->num_tokens() - a.num_cached_tokens);
    r->num_new_blocks = static_cast<int32_t>(a.block_ids.size());
    r->num_tokens_sent_to_kv = r->num_tokens();
    running_.push_back(r);
    scheduled_.push_back(r);
  }
  // Refused admissions go back to the front, in their order.
  for (const request_ptr& r : refused) r->in_waiting = true;
  waiting_.insert(waiting_.begin(), refused.begin(), refused.end());
  admitting_.clear();
}

void token_budget_scheduler::release_blocks(request_state& r, kv_transaction& txn) {
  if (!r.block_ids.empty()) {
    txn.free_ids.push_back(r.id);
    num_blocks_free_ += release(r.block_ids);
  }
}

void token_budget_scheduler::apply_forks(kv_transaction& txn) {
  // Every sample forked from its leader's logits shares the prompt's blocks
  // from the next transaction on, whether or not it gets tokens then: its
  // leader may finish meanwhile, and the ledger applies forks before frees.
  forked_now_.clear();
  for (const request_ptr& r : running_) {
    if (!r->fork_pending || r->done) continue;
    // Blocks its leader has released meanwhile (it finished) are held again.
    for (int32_t b : r->block_ids) num_blocks_free_ -= block_holders_.count(b) == 0 ? 1 : 0;
    hold(r->block_ids);
    kv_fork f{r->leader->id, r->id, r->prompt_ids, static_cast<int64_t>(r->prompt_ids.size())};
    f.token_ids.insert(f.token_ids.end(), r->output_ids.begin(), r->output_ids.end());
    txn.forks.push_back(std::move(f));
    forked_now_.insert(r->leader->id);
    forked_now_.insert(r->id);
    r->fork_pending = false;
    r->leader.reset();
    r->num_tokens_sent_to_kv = r->num_tokens();
  }
}

}  // namespace troupe
