// `troupe worker`'s side of pipeline stages in several processes
// (actors/worker/remote_stages.h): connect, say hello, load the stage the
// head gives, answer ready, and serve the head's plans until it goes.
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "actors/system_config.h"
#include "actors/worker/load_runners.h"
#include "actors/worker/remote_stages.h"
#include "actors/worker/worker_actor.h"
#include "config/logging.h"

namespace troupe {

namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

// The head's rendezvous, retried until `deadline` (the head may still be
// starting).
caf::expected<caf::actor> connect(caf::actor_system& system, const std::string& host, int port,
                                  std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto head = system.middleman().remote_actor(host, static_cast<uint16_t>(port));
    if (head || std::chrono::steady_clock::now() >= deadline || stop_requested) return head;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

int run_stage_worker(const engine_config& config, const model_config& model,
                     const std::string& host, int port, int rank_offset) {
  auto log = get_logger("worker");
  const auto tp = static_cast<int>(config.tensor_parallel_size);
  const auto pp = static_cast<int>(config.pipeline_parallel_size);
  if (pp < 2) {
    log->error("troupe worker: pipeline_parallel_size is {}: there is no stage for a worker", pp);
    return 2;
  }
  if (rank_offset >= 0 && (rank_offset % tp != 0 || rank_offset < tp || rank_offset >= tp * pp)) {
    log->error("--rank-offset {}: the first rank of a worker's stage, a multiple of "
               "tensor_parallel_size {} from {} to {}",
               rank_offset, tp, tp, tp * (pp - 1));
    return 2;
  }
  auto limits = derive_local_limits(config, model);
  if (!limits) {
    log->error("{}", limits.error_message());
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  troupe_system_config cfg(true);
  caf::actor_system system(cfg);
  std::vector<pipe_inbox> boxes;
  worker_hello hello;
  hello.stage = rank_offset >= 0 ? rank_offset / tp : -1;
  hello.checks = stage_checks(config, model, *limits);
  for (int t = 0; t < tp; ++t) {
    boxes.push_back(make_pipe_inbox(system, pp));
    hello.inboxes.push_back(boxes.back().actor);
  }
  const auto timeout = std::chrono::seconds(config.distributed_timeout);
  auto stop_inboxes = [&] {
    for (const pipe_inbox& b : boxes) caf::anon_send_exit(b.actor, caf::exit_reason::user_shutdown);
  };
  auto head = connect(system, host, port, std::chrono::steady_clock::now() + timeout);
  if (!head) {
    log->error("cannot reach the head at {}:{} within {} s: {}", host, port, timeout.count(),
               system.render(head.error()));
    stop_inboxes();
    return 1;
  }
  caf::scoped_actor self{system};
  worker_welcome welcome;
  std::string failed;
  self->request(*head, timeout, hello)
      .receive([&](worker_welcome& w) { welcome = std::move(w); },
               [&](caf::error& e) { failed = system.render(e); });
  if (!failed.empty() || !welcome.error.empty()) {
    log->error("the head at {}:{} refused this worker: {}", host, port,
               failed.empty() ? welcome.error : failed);
    stop_inboxes();
    return 1;
  }
  const int stage = welcome.stage;
  log->info("pipeline stage {} of {} (ranks {}..{}): loading", stage, pp, stage * tp,
            stage * tp + tp - 1);
  local_ranks local;
  local.first_stage = stage;
  local.num_stages = 1;
  // cuda: the NCCL pipeline groups the head made; cpu: the inboxes.
  local.pipeline_ids = welcome.pipeline_ids;
  if (local.pipeline_ids.empty()) {
    local.pipeline = [&](int t) -> std::unique_ptr<communicator> {
      std::vector<caf::actor> column;  // this tensor-parallel rank's pipeline
      for (int s = 0; s < pp; ++s) column.push_back(welcome.inboxes[static_cast<size_t>(s * tp + t)]);
      return std::make_unique<actor_pipe>(stage, std::move(column),
                                          boxes[static_cast<size_t>(t)].mailbox, timeout);
    };
  }
  auto runners = load_runners(config, model, *limits, local);
  if (!runners) {
    log->error("{}", runners.error_message());
    worker_ready failed_ready;
    failed_ready.stage = stage;
    failed_ready.error = runners.error_message();
    self->send(*head, std::move(failed_ready));
    stop_inboxes();
    return 1;
  }
  std::vector<std::shared_ptr<model_runner>> held;
  worker_ready ready;
  ready.stage = stage;
  if (!local.pipeline_ids.empty()) ready.num_blocks = limits->num_blocks;  // this stage's plan
  for (auto& runner : runners.value()) {
    held.emplace_back(std::move(runner));
    ready.ranks.push_back(system.spawn<caf::detached>(
        worker_actor, held.back(), false, stage * tp + static_cast<int>(ready.ranks.size())));
  }
  const std::vector<caf::actor> ranks = ready.ranks;
  ready.control = caf::actor_cast<caf::actor>(self);
  self->monitor(*head);
  self->send(*head, std::move(ready));
  log->info("pipeline stage {} ready; serving the head at {}:{}", stage, host, port);
  int code = -1;
  while (code < 0) {
    self->receive(
        [&](atoms::shutdown) {
          log->info("the head shut down; stopping");
          code = 0;
          return atoms::shutdown_v;
        },
        [&](caf::down_msg& down) {
          const bool shutdown = down.reason == caf::exit_reason::user_shutdown;
          if (shutdown) {
            log->info("the head shut down; stopping");
          } else {
            log->error("the head at {}:{} was lost ({}); stopping", host, port,
                       system.render(down.reason));
          }
          code = shutdown ? 0 : 1;
        },
        caf::after(std::chrono::milliseconds(200)) >> [&] {
          if (stop_requested) code = 0;
        });
  }
  // A rank may wait for activations that will not come.
  for (const auto& runner : held) runner->abort_groups("the worker stops");
  for (const caf::actor& r : ranks) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  stop_inboxes();
  // Actors handed to the head stay referenced by CAF's network layer until
  // it has cleaned up after the closed connection; CAF 0.17's actor system
  // destructor can wait for such a detached actor (a rank, finished) for
  // ever (seen in 2 of 6 stops with two ranks in one try, 0 of 80 in the
  // next). The work is done and nothing is kept: if tearing down takes
  // longer than 3 s, exit anyway, with status 3 so that it shows.
  for (const caf::actor& r : ranks) system.registry().erase(r.id());
  for (const pipe_inbox& b : boxes) system.registry().erase(b.actor.id());
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    get_logger("worker")->warn("the actor system did not stop within 3 s; exiting (status 3)");
    spdlog::shutdown();
    std::_Exit(3);
  }).detach();
  return code;
}

}  // namespace troupe
