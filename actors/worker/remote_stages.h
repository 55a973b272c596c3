// Pipeline stages in several processes, on one host or several
// (docs/parallelism.md "Several processes"): the head (`troupe serve`
// with distributed_port) runs stage 0 and publishes a rendezvous actor
// through CAF's network layer; each `troupe worker --connect HOST:PORT`
// runs one stage. A worker says hello (its checks and its ranks' pipe
// inboxes); once every stage has, each gets its stage and every rank's
// inbox; it loads its stage and answers ready with its ranks' worker
// actors, which the head's worker group then drives like its own. The
// stages' activations travel as CAF messages (actor_pipe) on the CPU
// backend; on cuda through NCCL pipeline groups whose ids the head makes
// and the welcome carries, and the head schedules with the smallest KV
// block count of every process's memory plan.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/engine.h"
#include "actors/worker/actor_pipe.h"
#include "actors/worker/model_runner.h"
#include "common/result.h"
#include "config/engine_config.h"
#include "model/model_config.h"

namespace troupe {

// What head and workers must agree on, as "key=value" lines: the build,
// the model's shape, the parallel sizes and the limits that size the
// plans and the KV cache.
std::vector<std::string> stage_checks(const engine_config& config, const model_config& model,
                                      const engine_limits& limits);
// The differences between a worker's checks and the head's, one phrase
// each ("pipeline_parallel_size: the worker's 3, the head's 2"); empty when
// they agree.
std::vector<std::string> check_differences(const std::vector<std::string>& worker,
                                           const std::vector<std::string>& head);

// The head's side.
class stage_rendezvous {
 public:
  // Publishes the rendezvous on config.distributed_host:distributed_port for
  // the stages after the head's first (stage 0's inboxes are `local`;
  // `pipeline_ids`: the NCCL pipeline groups' ids for the welcome, cuda).
  static result<std::unique_ptr<stage_rendezvous>> open(caf::actor_system& system,
                                                        const engine_config& config,
                                                        std::vector<std::string> checks,
                                                        std::vector<caf::actor> local,
                                                        std::vector<std::string> pipeline_ids = {});
  ~stage_rendezvous();
  // Waits until every remote stage has said hello: every rank's inbox,
  // stage-major. Errors name the stages that never came and the command.
  result<std::vector<caf::actor>> wait_hellos(std::chrono::milliseconds timeout);
  // Waits until every remote stage is loaded: their ranks' worker actors,
  // stage-major (stage 1's first).
  result<std::vector<caf::actor>> wait_ready(std::chrono::milliseconds timeout);
  // After wait_ready: the smallest KV block count the workers' memory
  // plans allow (cuda), 0 when none said.
  int64_t num_blocks() const;
  // Tells every ready worker process to stop and waits for each answer (up
  // to `timeout` each), so that the head's exit is not taken for a loss.
  void stop_workers(caf::actor_system& system, std::chrono::milliseconds timeout);
  // The rendezvous actor (the workers watch it: when it goes, they stop).
  const caf::actor& actor() const { return actor_; }

  struct state;

 private:
  stage_rendezvous(std::shared_ptr<state> s, caf::actor actor) : state_(std::move(s)), actor_(std::move(actor)) {}
  std::shared_ptr<state> state_;
  caf::actor actor_;
};

// The head's stage 0 (engine::create with distributed_port): its ranks'
// pipe inboxes, the rendezvous, the workers' hellos (every rank's inbox)
// and stage 0's runners. The caller spawns their workers, then
// rendezvous->wait_ready gives the workers' ranks.
struct head_stage {
  std::unique_ptr<stage_rendezvous> rendezvous;
  std::vector<caf::actor> inboxes;  // stage 0's (to stop with the engine)
  std::vector<std::unique_ptr<model_runner>> runners;
};
result<head_stage> start_head_stage(caf::actor_system& system, const engine_config& config,
                                    const model_config& model, engine_limits& limits);

// `troupe worker --connect HOST:PORT [--rank-offset R]`: runs one stage
// for the head until the head goes (exit 0 when it shut down, 1 when it
// was lost or refused this worker, 2 on a configuration error, 3 when it
// stopped but CAF's teardown hung and was cut short).
int run_stage_worker(const engine_config& config, const model_config& model,
                     const std::string& host, int port, int rank_offset);

}  // namespace troupe
