#include "actors/worker/remote_stages.h"

#include <caf/io/all.hpp>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <map>
#include <mutex>

#include "actors/worker/load_runners.h"
#include "actors/worker/worker_actor.h"
#include "config/logging.h"

#ifndef TROUPE_BUILD_COMMIT
#define TROUPE_BUILD_COMMIT "unknown"
#endif

namespace troupe {

namespace {

std::string key_of(const std::string& line) { return line.substr(0, line.find('=')); }
std::string value_of(const std::string& line) {
  const size_t eq = line.find('=');
  return eq == std::string::npos ? "" : line.substr(eq + 1);
}

}  // namespace

std::vector<std::string> stage_checks(const engine_config& config, const model_config& model,
                                      const engine_limits& limits) {
  auto line = [](const char* key, const auto& value) {
    std::ostringstream s;
    s << key << "=" << value;
    return s.str();
  };
  return {line("build", std::string("troupe 0.1.0 ") + TROUPE_BUILD_COMMIT),
          line("architecture", model.architecture),
          line("num_hidden_layers", model.num_hidden_layers),
          line("hidden_size", model.hidden_size),
          line("num_attention_heads", model.num_attention_heads),
          line("num_key_value_heads", model.num_key_value_heads),
          line("vocab_size", model.vocab_size),
          line("tensor_parallel_size", config.tensor_parallel_size),
          line("pipeline_parallel_size", config.pipeline_parallel_size),
          line("backend", limits.backend),
          line("dtype", config.dtype),
          line("load_format", config.load_format),
          line("seed", config.seed),
          line("max_model_len", limits.max_model_len),
          line("block_size", limits.block_size),
          line("num_blocks", limits.num_blocks),
          line("max_num_batched_tokens", limits.max_num_batched_tokens),
          line("max_num_seqs", limits.max_num_seqs),
          line("num_cpu_blocks", limits.num_cpu_blocks),
          line("kv_cache_dtype", limits.fp8_kv_cache ? "fp8_e4m3" : "auto"),
          line("log_expert_counts", limits.log_expert_counts),
          line("num_speculative_tokens", limits.num_speculative_tokens),
          line("max_loras", limits.max_loras),
          line("batch_invariant", limits.batch_invariant ? 1 : 0)};
}

std::vector<std::string> check_differences(const std::vector<std::string>& worker,
                                           const std::vector<std::string>& head) {
  std::map<std::string, std::string> theirs;
  for (const std::string& l : worker) theirs[key_of(l)] = value_of(l);
  std::vector<std::string> out;
  for (const std::string& l : head) {
    auto it = theirs.find(key_of(l));
    const std::string mine = it == theirs.end() ? "(none)" : it->second;
    if (mine != value_of(l)) {
      out.push_back(key_of(l) + ": the worker's " + mine + ", the head's " + value_of(l));
    }
  }
  return out;
}

// The rendezvous' state, shared by its actor and the engine's waits.
struct stage_rendezvous::state {
  std::mutex mu;
  std::condition_variable cv;
  int tp = 1, pp = 1;
  std::vector<std::string> checks;
  std::vector<caf::actor> inboxes;  // stage-major, stage 0's from the start
  std::vector<bool> hello, ready;   // by stage
  std::vector<std::vector<caf::actor>> ranks;  // by stage, once ready
  std::vector<caf::actor> controls;            // the ready workers' processes
  std::vector<std::pair<int, caf::typed_response_promise<worker_welcome>>> waiting;
  std::vector<caf::actor_addr> workers;  // by stage: whose hello took it
  std::string failure;  // a stage that failed to load (or whose worker went while loading)
  std::vector<std::string> pipeline_ids;  // cuda: the NCCL pipeline groups' ids, by t
  int64_t num_blocks = 0;  // the smallest KV block count the workers' plans allow (0: none said)

  bool all(const std::vector<bool>& v) const {
    for (size_t s = 1; s < v.size(); ++s) {
      if (!v[s]) return false;
    }
    return true;
  }
  std::string missing(const std::vector<bool>& v) const {
    std::string out;
    for (size_t s = 1; s < v.size(); ++s) {
      if (!v[s]) out += (out.empty() ? "" : ", ") + std::to_string(s);
    }
    return out;
  }
};

namespace {

caf::behavior rendezvous_actor(caf::event_based_actor* self,
                               std::shared_ptr<stage_rendezvous::state> st) {
  // A worker that goes before its stage is ready: before every stage said
  // hello its stage is free again (another worker may take it); after, the
  // head's wait_ready fails at once naming it.
  self->set_down_handler([st](caf::down_msg& msg) {
    std::lock_guard<std::mutex> lock(st->mu);
    for (int s = 1; s < st->pp; ++s) {
      if (st->workers[static_cast<size_t>(s)] != msg.source || st->ready[static_cast<size_t>(s)]) continue;
      st->workers[static_cast<size_t>(s)] = caf::actor_addr();
      if (!st->all(st->hello)) {
        st->hello[static_cast<size_t>(s)] = false;
        auto& w = st->waiting;
        w.erase(std::remove_if(w.begin(), w.end(), [s](const auto& p) { return p.first == s; }), w.end());
        get_logger("engine")->warn("pipeline stage {}: its worker went before every stage "
                                   "connected; the stage is free again", s);
      } else {
        st->failure = "pipeline stage " + std::to_string(s) + ": its worker went while loading";
        st->cv.notify_all();
      }
    }
  });
  return {
      [self, st](worker_hello& hello) -> caf::result<worker_welcome> {
        std::lock_guard<std::mutex> lock(st->mu);
        worker_welcome refused;
        const std::vector<std::string> diffs = check_differences(hello.checks, st->checks);
        if (!diffs.empty()) {
          refused.error = "this worker does not match the head:";
          for (const std::string& d : diffs) refused.error += "\n  - " + d;
          return refused;
        }
        int stage = hello.stage;
        for (int s = 1; stage < 0 && s < st->pp; ++s) {
          if (!st->hello[static_cast<size_t>(s)]) stage = s;
        }
        if (stage < 1 || stage >= st->pp) {
          refused.error = hello.stage < 0 ? "every pipeline stage already has a worker"
                                          : "stage " + std::to_string(stage) +
                                                " is not a worker's (stages 1.." +
                                                std::to_string(st->pp - 1) + "; --rank-offset " +
                                                std::to_string(st->tp) + " x the stage)";
          return refused;
        }
        if (st->hello[static_cast<size_t>(stage)]) {
          refused.error = "pipeline stage " + std::to_string(stage) + " already has a worker";
          return refused;
        }
        if (static_cast<int>(hello.inboxes.size()) != st->tp) {
          refused.error = "a stage has " + std::to_string(st->tp) + " ranks; the worker brought " +
                          std::to_string(hello.inboxes.size());
          return refused;
        }
        st->hello[static_cast<size_t>(stage)] = true;
        st->workers[static_cast<size_t>(stage)] = self->current_sender()
                                                      ? caf::actor_cast<caf::actor_addr>(self->current_sender())
                                                      : caf::actor_addr();
        if (self->current_sender()) self->monitor(self->current_sender());
        for (int t = 0; t < st->tp; ++t) {
          st->inboxes[static_cast<size_t>(stage * st->tp + t)] = hello.inboxes[static_cast<size_t>(t)];
        }
        get_logger("engine")->info("pipeline stage {}: a worker connected", stage);
        st->waiting.emplace_back(stage, self->make_response_promise<worker_welcome>());
        if (st->all(st->hello)) {
          for (auto& [s, promise] : st->waiting) {
            promise.deliver(worker_welcome{s, st->inboxes, "", st->pipeline_ids});
          }
          st->waiting.clear();
          st->cv.notify_all();
        }
        return caf::delegated<worker_welcome>{};
      },
      [st](worker_ready& ready) {
        std::lock_guard<std::mutex> lock(st->mu);
        if (ready.stage < 1 || ready.stage >= st->pp) return;
        if (!ready.error.empty()) {
          st->failure = "pipeline stage " + std::to_string(ready.stage) + " failed to load: " + ready.error;
        } else {
          st->ready[static_cast<size_t>(ready.stage)] = true;
          st->ranks[static_cast<size_t>(ready.stage)] = std::move(ready.ranks);
          if (ready.num_blocks > 0) {
            st->num_blocks = st->num_blocks == 0 ? ready.num_blocks
                                                 : std::min(st->num_blocks, ready.num_blocks);
          }
          if (ready.control) st->controls.push_back(std::move(ready.control));
        }
        st->cv.notify_all();
      },
  };
}

std::string worker_command(const engine_config& config) {
  return "troupe worker --connect " + config.distributed_host + ":" +
         std::to_string(config.distributed_port) + " (with the head's model and config flags)";
}

}  // namespace

result<std::unique_ptr<stage_rendezvous>> stage_rendezvous::open(caf::actor_system& system,
                                                                 const engine_config& config,
                                                                 std::vector<std::string> checks,
                                                                 std::vector<caf::actor> local,
                                                                 std::vector<std::string> pipeline_ids) {
  auto st = std::make_shared<state>();
  st->pipeline_ids = std::move(pipeline_ids);
  st->tp = static_cast<int>(config.tensor_parallel_size);
  st->pp = static_cast<int>(config.pipeline_parallel_size);
  st->checks = std::move(checks);
  st->inboxes.resize(static_cast<size_t>(st->tp * st->pp));
  std::copy(local.begin(), local.end(), st->inboxes.begin());
  st->hello.assign(static_cast<size_t>(st->pp), false);
  st->workers.resize(static_cast<size_t>(st->pp));
  st->ready.assign(static_cast<size_t>(st->pp), false);
  st->ranks.resize(static_cast<size_t>(st->pp));
  caf::actor actor = system.spawn(rendezvous_actor, st);
  auto port = system.middleman().publish(actor, static_cast<uint16_t>(config.distributed_port),
                                         config.distributed_host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    return make_error("distributed_port " + std::to_string(config.distributed_port) + ": cannot listen on " +
                      config.distributed_host + ": " + system.render(port.error()));
  }
  get_logger("engine")->info("waiting for {} pipeline stage worker(s) on {}:{}: {}", st->pp - 1,
                             config.distributed_host, *port, worker_command(config));
  return std::unique_ptr<stage_rendezvous>(new stage_rendezvous(std::move(st), std::move(actor)));
}

stage_rendezvous::~stage_rendezvous() {
  // The workers watch this actor: its exit stops them.
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

result<std::vector<caf::actor>> stage_rendezvous::wait_hellos(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->all(state_->hello); })) {
    return make_error("pipeline stage(s) " + state_->missing(state_->hello) +
                      ": no worker connected within " + std::to_string(timeout.count() / 1000) +
                      " s (distributed_timeout); start one per stage with `troupe worker "
                      "--connect HOST:PORT` and the head's model and config flags");
  }
  return state_->inboxes;
}

result<std::vector<caf::actor>> stage_rendezvous::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  const bool done = state_->cv.wait_for(lock, timeout, [&] {
    return !state_->failure.empty() || state_->all(state_->ready);
  });
  if (!state_->failure.empty()) return make_error(state_->failure);
  if (!done) {
    return make_error("pipeline stage(s) " + state_->missing(state_->ready) +
                      ": the worker did not finish loading within " +
                      std::to_string(timeout.count() / 1000) + " s (distributed_timeout)");
  }
  std::vector<caf::actor> ranks;
  for (int s = 1; s < state_->pp; ++s) {
    for (const caf::actor& r : state_->ranks[static_cast<size_t>(s)]) ranks.push_back(r);
  }
  return ranks;
}

int64_t stage_rendezvous::num_blocks() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->num_blocks;
}

void stage_rendezvous::stop_workers(caf::actor_system& system, std::chrono::milliseconds timeout) {
  std::vector<caf::actor> controls;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    controls = std::move(state_->controls);
  }
  caf::scoped_actor self{system};
  for (const caf::actor& control : controls) {
    // An error (the worker already gone: it saw the rendezvous exit) is fine.
    self->request(control, timeout, atoms::shutdown_v).receive([](atoms::shutdown) {}, [](caf::error&) {});
  }
}

result<head_stage> start_head_stage(caf::actor_system& system, const engine_config& config,
                                    const model_config& model, engine_limits& limits) {
  const auto tp = static_cast<int>(config.tensor_parallel_size);
  const auto pp = static_cast<int>(config.pipeline_parallel_size);
  const auto timeout = std::chrono::seconds(config.distributed_timeout);
  // cuda: the stages meet in NCCL pipeline groups whose ids the welcome
  // carries; the cpu backend's activations go through the inboxes.
  auto ids = pipeline_group_ids(config);
  if (!ids) return std::move(ids).take_error();
  head_stage head;
  std::vector<std::shared_ptr<pipe_mailbox>> mailboxes;
  for (int t = 0; t < tp; ++t) {
    pipe_inbox box = make_pipe_inbox(system, pp);
    head.inboxes.push_back(box.actor);
    mailboxes.push_back(box.mailbox);
  }
  // On an error nothing may stay behind: the actor system waits for its actors.
  auto fail = [&](error e) -> result<head_stage> {
    for (const caf::actor& a : head.inboxes) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    head.rendezvous.reset();
    return e;
  };
  auto opened = stage_rendezvous::open(system, config, stage_checks(config, model, limits),
                                       head.inboxes, ids.value());
  if (!opened) return fail(std::move(opened).take_error());
  head.rendezvous = std::move(opened.value());
  auto inboxes = head.rendezvous->wait_hellos(timeout);
  if (!inboxes) return fail(std::move(inboxes).take_error());
  local_ranks local;
  local.num_stages = 1;
  local.pipeline_ids = ids.value();
  if (local.pipeline_ids.empty()) {
    local.pipeline = [&](int t) -> std::unique_ptr<communicator> {
      std::vector<caf::actor> column;  // tensor-parallel rank t's pipeline
      for (int s = 0; s < pp; ++s) column.push_back((*inboxes)[static_cast<size_t>(s * tp + t)]);
      return std::make_unique<actor_pipe>(0, std::move(column), mailboxes[static_cast<size_t>(t)],
                                          timeout);
    };
  }
  auto runners = load_runners(config, model, limits, local);
  if (!runners) return fail(std::move(runners).take_error());
  head.runners = std::move(runners.value());
  return head;
}

}  // namespace troupe
