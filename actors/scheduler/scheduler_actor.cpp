#include "actors/scheduler/scheduler_actor.h"

#include "config/logging.h"

namespace troupe {

namespace {

using self_ptr = caf::stateful_actor<scheduler_state>*;
constexpr auto log_interval = std::chrono::seconds(5);

void flush_outputs(self_ptr self) {
  for (request_output& out : self->state.core->take_outputs()) {
    auto it = self->state.clients.find(out.id);
    if (it == self->state.clients.end()) continue;
    const bool final = out.finish != finish_reason::none;
    self->send(it->second, std::move(out));
    if (final) self->state.clients.erase(it);
  }
}

void maybe_step(self_ptr self);

// The request's one output once the workers are gone.
request_output unavailable_output(request_id id, const std::string& reason) {
  request_output out;
  out.id = id;
  out.finish = finish_reason::error;
  out.error = "the model's workers are gone (" + reason + ")";
  out.unavailable = true;
  return out;
}

// The worker answered a step with an error (a lost rank): every request
// ends with it now, later ones at once, and no step is planned again.
void worker_lost(self_ptr self, const caf::error& err) {
  scheduler_state& st = self->state;
  if (st.lost) return;
  st.lost = true;
  std::string reason = caf_error_text(err);
  if (st.health) {
    st.health->mark_lost(reason);
    reason = st.health->reason();  // the first noticed (the group's, naming the rank)
  }
  get_logger("sched")->error("the worker failed a step ({}): ending {} request(s)", reason,
                             st.clients.size());
  for (auto& [id, client] : st.clients) self->send(client, unavailable_output(id, reason));
  st.clients.clear();
}

void on_output(self_ptr self, step_output output) {
  if (self->state.txn_open) {  // applied after the commit
    self->state.stashed.push_back(std::move(output));
    return;
  }
  self->state.core->update(output);
  flush_outputs(self);
  maybe_step(self);
}

// Outputs that arrived during the transaction, in order; whether any did.
bool apply_stashed(self_ptr self) {
  std::vector<step_output> stashed = std::move(self->state.stashed);
  self->state.stashed.clear();
  for (const step_output& output : stashed) self->state.core->update(output);
  if (!stashed.empty()) flush_outputs(self);
  return !stashed.empty();
}

// The worker holds the last plan's step until the next plan or this.
void release_worker(self_ptr self) {
  if (!self->state.worker_holding) return;
  self->state.worker_holding = false;
  self->send(self->state.worker, atoms::flush_v);
}

// The drafter learns what the last steps emitted and proposes drafts for
// the next; scheduling waits for its answer.
void sync_drafter(self_ptr self) {
  scheduler_state& st = self->state;
  // The next step waits only for proposals it can use: for requests with
  // no step in flight (the others' only probe for a match).
  bool wait = false;
  draft_sync sync = st.core->take_draft_sync(wait);
  if (sync.propose_ids.empty() && sync.removed.empty()) {  // nothing the drafter needs now
    maybe_step(self);
    return;
  }
  st.drafting = wait;
  self->request(st.drafter, caf::infinite, std::move(sync))
      .then([self, wait](const draft_proposals& proposals) {
        self->state.core->set_drafts(proposals);
        if (!wait) return;
        self->state.drafting = false;
        maybe_step(self);
      });
  if (!wait) maybe_step(self);
}

void maybe_step(self_ptr self) {
  scheduler_state& st = self->state;
  token_budget_scheduler& core = *st.core;
  if (st.txn_open || st.drafting || st.lost) return;
  if (st.drafter && core.wants_draft_sync()) {
    sync_drafter(self);
    return;
  }
  if (core.steps_in_flight() >= core.max_steps_in_flight()) return;  // an output comes first
  if (core.steps_in_flight() > 0) {
    // Plan the next step now if it needs nothing from the running ones
    // (async scheduling, pipeline micro-batches); else the worker finishes
    // them and their outputs drive the next.
    if (!core.can_schedule_ahead()) {
      release_worker(self);
      return;
    }
  } else if (!core.has_unfinished() && !core.has_pending_frees()) {
    // With no work left, one more (request-less) transaction still returns
    // the blocks of the last finished requests to the block manager.
    return;
  }
  st.adapter_read = false;
  kv_transaction txn = core.schedule();
  st.txn_open = true;
  self->request(st.block_manager, caf::infinite, std::move(txn))
      .then([self](const kv_grant& grant) {
        scheduler_state& st = self->state;
        step_plan plan = st.core->commit(grant);
        st.txn_open = false;
        if (plan.step_id == 0) {  // nothing to run
          flush_outputs(self);
          if (st.core->steps_in_flight() > 0) {
            // Planned ahead and got nothing: the running step ends first
            // (no retry now, which could repeat without progress).
            release_worker(self);
            if (apply_stashed(self)) maybe_step(self);
            return;
          }
          apply_stashed(self);
          if (!st.core->has_unfinished()) {
            maybe_step(self);  // only frees travelled
            return;
          }
          if (st.core->waiting_for_adapters()) {
            // Requests wait for adapter reads: the read's lora_read
            // message schedules again (or did already, during the
            // transaction: then now).
            if (st.adapter_read) maybe_step(self);
            return;
          }
          // The block manager refused what the scheduler's estimate allowed
          // (prefix hits on cached free blocks take more than counted). The
          // grant has corrected the count: try again at once, then back off.
          const int tries = ++st.empty_steps;
          const engine_stats s = st.core->stats();
          get_logger("sched")->debug("a transaction scheduled nothing ({} running, {} waiting, {} "
                                     "blocks free); retry {}",
                                     s.num_running, s.num_waiting, s.num_blocks_free, tries);
          if (tries == 1) {
            maybe_step(self);
          } else {
            self->delayed_send(self, std::chrono::milliseconds(1), atoms::step_v);
          }
          return;
        }
        st.empty_steps = 0;
        if (st.lost) return;  // the workers went while the block manager answered
        self->request(st.worker, caf::infinite, std::move(plan))
            .then([self](step_output& output) { on_output(self, std::move(output)); },
                  [self](caf::error& err) { worker_lost(self, err); });
        // With async scheduling the worker keeps this step running until the
        // next plan or a flush.
        st.worker_holding = st.core->async_scheduling();
        apply_stashed(self);
        maybe_step(self);
      });
}

void admit(self_ptr self, add_request_msg& msg) {
  if (self->state.lost) {
    self->send(msg.client, unavailable_output(msg.id, self->state.health
                                                          ? self->state.health->reason()
                                                          : "a worker was lost"));
    return;
  }
  std::string problem =
      self->state.core->add_request(msg.id, std::move(msg.prompt_ids), msg.params, msg.fork_of,
                                    msg.group);
  if (!problem.empty()) {
    request_output out;
    out.id = msg.id;
    out.finish = finish_reason::error;
    out.error = std::move(problem);
    self->send(msg.client, std::move(out));
    return;
  }
  self->state.clients.emplace(msg.id, std::move(msg.client));
}

// log_expert_counts: the experts' load since the last reading, after the
// stats line (the worker answers between steps).
void log_expert_load(self_ptr self) {
  if (self->state.lost || self->state.expert_query) return;
  self->state.expert_query = true;
  self->request(self->state.worker, std::chrono::seconds(30), atoms::get_expert_counts_v)
      .then(
          [self](expert_counts& now) {
            self->state.expert_query = false;
            const auto t = std::chrono::steady_clock::now();
            const expert_load load = expert_load_between(self->state.last_expert_counts, now);
            const double seconds =
                std::chrono::duration<double>(t - self->state.last_expert_time).count();
            self->state.last_expert_counts = std::move(now);
            self->state.last_expert_time = t;
            const std::string line = expert_load_line(load, seconds);
            if (line.empty()) return;
            auto log = get_logger("sched");
            log->info("{}", line);
            if (log->should_log(spdlog::level::debug)) {
              for (size_t i = 0; i < load.layers.size(); ++i) log->debug("{}", expert_layer_line(load, i));
            }
          },
          [self](caf::error& err) {
            self->state.expert_query = false;
            get_logger("sched")->warn("expert counts: {}", caf_error_text(err));
          });
}

void log_stats(self_ptr self) {
  const engine_stats now = self->state.core->stats();
  const engine_stats& before = self->state.last_logged;
  const auto t = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(t - self->state.last_log_time).count();
  const bool active = now.num_steps != before.num_steps || now.num_running + now.num_waiting > 0;
  if (active && dt > 0) {
    const double used = now.num_blocks_total > 0
                            ? 100.0 * double(now.num_blocks_total - now.num_blocks_free) /
                                  double(now.num_blocks_total)
                            : 0.0;
    std::string spec;
    if (const int64_t drafts = now.spec_num_drafts - before.spec_num_drafts; drafts > 0) {
      // vLLM's SpecDecoding line: acceptance over the interval, and the mean
      // tokens a verification emits (accepted drafts + the target's token).
      const auto draft_tokens = double(now.spec_num_draft_tokens - before.spec_num_draft_tokens);
      const auto accepted = double(now.spec_num_accepted_tokens - before.spec_num_accepted_tokens);
      spec = fmt::format(", spec decode: draft acceptance rate: {:.1f}%, mean acceptance length: {:.2f}",
                         draft_tokens > 0 ? 100.0 * accepted / draft_tokens : 0.0,
                         1.0 + accepted / double(drafts));
    }
    if (now.max_loras > 0) {
      spec += fmt::format(", LoRA adapters: {} running (max_loras {}), {} waiting",
                          now.running_lora_ids.size(), now.max_loras, now.waiting_lora_ids.size());
    }
    get_logger("sched")->info(
        "prompt throughput: {:.1f} tokens/s, generation throughput: {:.1f} tokens/s, "
        "running: {} reqs, waiting: {} reqs, KV cache usage: {:.1f}%, preemptions: {}, "
        "prefix cache hit rate: {:.1f}%{}",
        double(now.num_computed_tokens - before.num_computed_tokens) / dt,
        double(now.num_generated_tokens - before.num_generated_tokens) / dt, now.num_running,
        now.num_waiting, used, now.num_preemptions,
        now.prefix_cache_queries > 0
            ? 100.0 * double(now.prefix_cache_hits) / double(now.prefix_cache_queries)
            : 0.0,
        spec);
  }
  if (active && self->state.log_expert_counts) log_expert_load(self);
  self->state.last_logged = now;
  self->state.last_log_time = t;
  self->delayed_send(self, log_interval, atoms::log_stats_v);
}

}  // namespace

caf::behavior scheduler_actor(caf::stateful_actor<scheduler_state>* self,
                              scheduler_limits limits, caf::actor block_manager,
                              caf::actor worker, caf::actor drafter, lora_host_cache loras,
                              std::shared_ptr<worker_health> health) {
  self->state.core = std::make_unique<token_budget_scheduler>(limits);
  self->state.health = std::move(health);
  self->state.core->set_lora_cache(std::move(loras));
  self->state.block_manager = std::move(block_manager);
  self->state.worker = std::move(worker);
  self->state.drafter = std::move(drafter);
  self->state.last_log_time = std::chrono::steady_clock::now();
  self->state.last_expert_time = self->state.last_log_time;
  self->state.log_expert_counts = limits.log_expert_counts;
  self->delayed_send(self, log_interval, atoms::log_stats_v);
  return {
      [self](add_request_batch& batch) {
        for (add_request_msg& msg : batch.requests) admit(self, msg);
        maybe_step(self);
      },
      [self](const abort_request_msg& msg) {
        self->state.core->abort_requests(msg.ids);
        flush_outputs(self);
        maybe_step(self);
      },
      [self](atoms::get_stats) -> engine_stats { return self->state.core->stats(); },
      [self](atoms::log_stats) { log_stats(self); },
      [self](atoms::step) { maybe_step(self); },
      [self](atoms::lora_read) {
        self->state.adapter_read = true;
        maybe_step(self);
      },
  };
}

}  // namespace troupe
