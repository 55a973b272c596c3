// token_budget_scheduler, phases 2 and 3: commit (the grant becomes the
// worker's plan) and update (the worker's output becomes tokens, stops and
// forks); finishing requests; stats and the invariant check.
#include "actors/scheduler/token_budget_scheduler.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/check.h"

namespace troupe {

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
  stats_.num_blocks_swapped_out += static_cast<int64_t>(grant.swap_out_src.size());
  stats_.num_blocks_swapped_in += static_cast<int64_t>(grant.swap_in_src.size());
  stats_.prefix_cache_queries = grant.prefix_cache_queries;
  stats_.prefix_cache_hits = grant.prefix_cache_hits;
  step_plan plan;
  // A step with no request still runs when it carries swap copies.
  ahead_ = false;
  if (scheduled_.empty() && grant.swap_out_src.empty() && grant.swap_in_src.empty()) {
    --in_flight_;
    if (in_flight_ == 0) finish_pending_aborts();
    sweep_finished();
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
      TROUPE_CHECK(r.inflight_tokens == 0 && r.placeholders == 0 && r.num_spec_tokens == 0);
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
      d.spec_token_ids.assign(r.drafts.begin(), r.drafts.begin() + r.num_spec_tokens);
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
  rec.committed = std::chrono::steady_clock::now();
  for (const request_ptr& r : scheduled_) {
    const int64_t tokens = r->num_scheduled_tokens;
    const int64_t drafts = r->num_spec_tokens;
    const bool samples = r->computed_eff() + tokens - drafts == r->num_tokens_eff();
    rec.requests.push_back(r);
    rec.tokens.push_back(tokens);
    rec.samples.push_back(samples);
    rec.drafts.push_back(drafts);
    r->inflight_tokens += tokens;
    r->num_scheduled_tokens = 0;
    if (samples) ++r->placeholders;
    if (drafts > 0) {
      r->spec_inflight = true;
      r->drafts.clear();
      r->drafts_for = -1;
      r->num_spec_tokens = 0;
    }
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
  // Several tokens when drafts were accepted: each is checked as if it came
  // alone, and the first that ends the request discards the rest.
  for (size_t i = 0; i < out.token_ids.size() && msg.finish == finish_reason::none; ++i) {
    const int32_t token = out.token_ids[i];
    r.output_ids.push_back(token);
    ++stats_.num_generated_tokens;
    msg.new_token_ids.push_back(token);
    if (r.params.logprobs >= 0 && i < out.logprobs.size()) msg.logprobs.push_back(out.logprobs[i]);
    msg.finish = check_stop(r, token);
  }
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
  const auto now = std::chrono::steady_clock::now();
  int64_t step_tokens = 0, step_drafts = 0;
  bool decodes = true;  // every request its last token and its drafts
  for (size_t k = 0; k < rec.requests.size(); ++k) {
    step_tokens += rec.tokens[k];
    step_drafts += rec.drafts[k];
    decodes = decodes && rec.samples[k] && rec.tokens[k] == 1 + rec.drafts[k];
  }
  // The step's cost: from its commit, or from the previous output when it
  // was queued behind that step (async scheduling).
  if (decodes && limits_.num_speculative_tokens > 0) {
    control_.observe_step(step_tokens, step_drafts > 0,
                          std::chrono::duration<double>(now - std::max(rec.committed, last_update_)).count());
  }
  last_update_ = now;
  if (limits_.num_speculative_tokens > 0) draft_news_ = true;
  for (size_t k = 0; k < rec.requests.size(); ++k) {
    const request_ptr& r = rec.requests[k];
    r->inflight_tokens -= rec.tokens[k];
    if (rec.samples[k]) --r->placeholders;
    r->num_computed_tokens += rec.tokens[k];
    stats_.num_computed_tokens += rec.tokens[k];
    if (rec.drafts[k] > 0) {
      r->spec_inflight = false;
      auto out = by_id.find(r->id);
      if (out != by_id.end() && !r->aborted && !r->done) {
        TROUPE_CHECK_MSG(!out->second->token_ids.empty() &&
                             out->second->num_draft_tokens == rec.drafts[k],
                         "the worker verified other drafts than the plan carried");
        apply_spec_result(*r, rec.drafts[k],
                          static_cast<int64_t>(out->second->token_ids.size()) - 1);
      }
    }
    if (r->prompt_progress) {
      *r->prompt_progress = std::max(*r->prompt_progress,
                                     std::min<int64_t>(r->num_computed_tokens, r->prompt_ids.size()));
    }
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
  sweep_finished();
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
    as_own.token_ids = {f.token_id};
    as_own.logprobs = {f.logprobs};
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
  // forks run on their own: they prefill themselves. Those aborted with it
  // are finished by their own abort.
  for (const request_ptr& c : leader.children) {
    c->parked_in.reset();
    if (!c->aborted) push_waiting(c, false);
  }
  leader.children.clear();
}

void token_budget_scheduler::finish(const request_ptr& r, finish_reason reason,
                                    std::string error) {
  r->done = true;
  if ((reason == finish_reason::stop || reason == finish_reason::length) && !runs_to_max_tokens(r->params)) {
    // What it used of its allowance teaches kv_admission's ratio.
    const int64_t prompt = static_cast<int64_t>(r->prompt_ids.size());
    admission_.on_finished(static_cast<int64_t>(r->output_ids.size()),
                           std::min<int64_t>(r->params.max_tokens, limits_.max_model_len - prompt));
  }
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
  // Left in running_ / waiting_ (marked done) until sweep_finished: one pass
  // for many finishes, not one each.
  if (!r->block_ids.empty() || r->num_cpu_blocks > 0) {
    pending_free_.push_back(r->id);
    num_blocks_free_ += release(r->block_ids);
    num_cpu_blocks_free_ += r->num_cpu_blocks;
    r->num_cpu_blocks = 0;
  }
  if (r->known_to_worker) pending_drop_.push_back(r->id);
  if (r->num_tokens_drafted >= 0) {
    drafter_removed_.push_back(r->id);
    draft_news_ = true;
  }
  control_.forget(r->id);
  requests_.erase(r->id);
  ++stats_.num_requests_finished;
  request_output msg;
  msg.id = r->id;
  msg.finish = reason;
  msg.error = std::move(error);
  msg.num_prompt_tokens = static_cast<int64_t>(r->prompt_ids.size());
  outputs_.push_back(std::move(msg));
}

void token_budget_scheduler::sweep_finished() {
  auto done = [](const request_ptr& r) { return r->done; };
  std::erase_if(running_, done);
  std::erase_if(waiting_, done);
}

std::vector<request_output> token_budget_scheduler::take_outputs() {
  std::vector<request_output> out = std::move(outputs_);
  outputs_.clear();
  return out;
}

engine_stats token_budget_scheduler::stats() const {
  engine_stats s = stats_;
  s.num_running = static_cast<int64_t>(running_.size());
  s.num_blocks_free = num_blocks_free_;
  s.num_cpu_blocks_free = num_cpu_blocks_free_;
  // Waiting sequences include the samples parked with a waiting leader; the
  // samples of one prompt count its tokens once.
  std::unordered_set<const int64_t*> prompts_counted;
  for (const request_ptr& r : waiting_) {
    s.num_waiting += r->num_slots();
    if (!r->prompt_progress || prompts_counted.insert(r->prompt_progress.get()).second) {
      s.num_waiting_tokens += r->num_tokens() - r->num_computed_tokens - expected_cached(*r);
    }
    s.num_swapped += r->num_cpu_blocks > 0;
  }
  s.max_loras = limits_.max_loras;
  if (limits_.max_loras > 0) {
    const std::unordered_set<int64_t> running = running_adapters();
    std::set<int64_t> waiting;
    for (const request_ptr& r : waiting_) {
      if (r->params.lora_id > 0) waiting.insert(r->params.lora_id);
    }
    s.running_lora_ids.assign(running.begin(), running.end());
    std::sort(s.running_lora_ids.begin(), s.running_lora_ids.end());
    s.waiting_lora_ids.assign(waiting.begin(), waiting.end());
  }
  return s;
}

std::string token_budget_scheduler::check_invariants() const {
  auto id = [](const request_ptr& r) { return " (request " + std::to_string(r->id) + ")"; };
  int64_t slots = 0;
  std::unordered_map<request_id, int64_t> group_slots;
  for (const request_ptr& r : running_) {
    if (r->done || r->in_waiting) return "a running request is finished or waiting" + id(r);
    slots += r->num_slots();
    group_slots[r->group] += r->num_slots();
  }
  if (slots > limits_.max_num_seqs) {
    return "running slots " + std::to_string(slots) + " > max_num_seqs " +
           std::to_string(limits_.max_num_seqs);
  }
  for (const auto& [group, n] : group_slots) {
    if (n > fair_.slot_share()) {
      return "group " + std::to_string(group) + " holds " + std::to_string(n) +
             " running slots, more than its share " + std::to_string(fair_.slot_share());
    }
  }
  for (const request_ptr& r : waiting_) {
    if (r->done || !r->in_waiting) return "a waiting request is finished or not marked" + id(r);
    if (!r->block_ids.empty()) return "a waiting request holds device blocks" + id(r);
  }
  std::unordered_set<request_id> in_steps;  // micro-batches hold distinct requests
  for (const step_record& rec : committed_) {
    for (const request_ptr& r : rec.requests) {
      if (limits_.pipeline_depth > 1 && !in_steps.insert(r->id).second) {
        return "a request is in two micro-batches in flight" + id(r);
      }
    }
    int64_t tokens = 0;
    for (int64_t t : rec.tokens) tokens += t;
    if (tokens > limits_.max_num_batched_tokens ||
        static_cast<int64_t>(rec.requests.size()) > limits_.max_num_seqs) {
      return "step " + std::to_string(rec.step_id) + " schedules " + std::to_string(tokens) +
             " tokens for " + std::to_string(rec.requests.size()) + " sequences";
    }
  }
  // Block holders: exactly the blocks the requests hold (a fork not yet
  // applied holds its leader's blocks only from its transaction on).
  std::unordered_map<int32_t, int32_t> holders;
  int64_t cpu_blocks = 0;
  for (const auto& [rid, r] : requests_) {
    if (r->done) return "a finished request is still known" + id(r);
    cpu_blocks += r->num_cpu_blocks;
    if (r->fork_pending) continue;
    for (int32_t b : r->block_ids) ++holders[b];
  }
  if (holders != block_holders_) return "the block holders do not match the requests' blocks";
  const bool txn_open = in_flight_ > static_cast<int>(committed_.size());
  if (!txn_open) {
    const int64_t held = static_cast<int64_t>(holders.size());
    if (num_blocks_free_ + held != limits_.num_blocks_usable) {
      return "free blocks " + std::to_string(num_blocks_free_) + " + held " +
             std::to_string(held) + " != usable " + std::to_string(limits_.num_blocks_usable);
    }
    if (num_cpu_blocks_free_ + cpu_blocks != limits_.num_cpu_blocks) {
      return "free host blocks " + std::to_string(num_cpu_blocks_free_) + " + swapped " +
             std::to_string(cpu_blocks) + " != " + std::to_string(limits_.num_cpu_blocks);
    }
  }
  return "";
}

}  // namespace troupe
