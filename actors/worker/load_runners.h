// Loading the worker side of an engine: the backend of each rank, the
// model's weights (each tensor-parallel rank its part, model/tp_layout.h),
// the KV cache (on cuda the memory plan, the smallest block count over the
// ranks: every rank holds the same blocks) and one model_runner a rank.
// With tensor_parallel_size T > 1 the ranks load at once on threads of
// their own (NCCL's group creation and the graph captures' warm-up passes
// need every rank at the same time): CPU ranks meet in a cpu_group, CUDA
// ranks (devices 0 .. T - 1) in a NCCL group.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/worker/model_runner.h"
#include "config/engine_config.h"
#include "model/model_config.h"

namespace troupe {

// Visible CUDA devices (0 in a build without CUDA).
int visible_cuda_devices();
// Device 0's memory in bytes (0 without a visible device).
int64_t visible_gpu_bytes();
// cuda when asked, or (auto) when a device is visible in a CUDA build.
bool wants_cuda(const engine_config& config);
// derive_engine_limits for this process's backend (on cuda, device 0's
// memory and name choose the defaults), as the engine and a `troupe
// worker` both need them.
result<engine_limits> derive_local_limits(const engine_config& config, const model_config& model);
// The compute type on the cuda backend: as asked, else (auto) the
// checkpoint's half type, as vLLM on GPUs.
dtype cuda_compute_type(const engine_config& config, const model_config& model);

// A runner's limits: the engine's (num_blocks 0 until the memory plan).
runner_limits runner_limits_of(const engine_limits& limits);

// Which ranks this process loads: all (one process), or with stages in
// several processes (actors/worker/remote_stages.h) its stages, whose
// pipeline groups are made by `pipeline` (rank t of a stage: its
// actor_pipe) instead of in-process groups.
struct local_ranks {
  int first_stage = 0;
  int num_stages = 0;  // 0: every stage
  std::function<std::unique_ptr<communicator>(int)> pipeline;
  // cuda: the NCCL pipeline groups' ids (pipeline_group_ids, one per
  // tensor-parallel rank), which every process's ranks join (instead of
  // `pipeline`).
  std::vector<std::string> pipeline_ids;
};

// For pipeline stages in several processes: on cuda, a new NCCL id for
// each pipeline group (one per tensor-parallel rank), made by the head and
// sent to the workers; empty on the cpu backend (actor_pipe instead).
result<std::vector<std::string>> pipeline_group_ids(const engine_config& config);

// The runners of this process's ranks (stage-major: stage s's tensor-
// parallel rank t is rank s x T + t; a process's ranks use CUDA devices
// 0, 1, ...). Sets limits.num_blocks where the memory plan decides it.
// Errors are user-facing; a rank's names the rank.
result<std::vector<std::unique_ptr<model_runner>>> load_runners(const engine_config& config,
                                                                const model_config& model,
                                                                engine_limits& limits,
                                                                const local_ranks& local = {});

// The memory plan without loading anything (`troupe serve --dry-run`), for
// the cuda backend: each rank's (tp_size x pipeline_parallel_size ranks,
// stage-major) weights and workspace
// (llama_model::memory_footprint), the runner's buffers and the headroom
// the real plan reserves, an estimate of what the CUDA context and
// libraries take, and the KV cache left on a GPU of `gpu_bytes` at
// gpu_memory_utilization.
struct rank_memory_estimate {
  tp_layout layout;
  int stage = 0;        // pipeline stage
  stage_layers layers;  // its layers
  int64_t weights = 0, workspace = 0;
  int64_t host_weights = 0;  // cpu_offload_gb's layers, in host memory
  int64_t reserved = 0;  // runner buffers, headroom, CUDA context (estimate)
  int64_t kv_bytes_per_token = 0;
  int64_t kv_bytes = 0;   // what is left for the KV cache (negative: does not fit)
  int64_t kv_tokens = 0;  // in whole blocks, 0 when nothing is left
};
// What the CUDA context, cuBLAS and NCCL take before the weights (an
// estimate from the H100 runs' memory plans).
constexpr int64_t cuda_context_estimate_bytes = 512LL << 20;
result<std::vector<rank_memory_estimate>> estimate_rank_memory(const engine_config& config,
                                                               const model_config& model,
                                                               int tp_size, int64_t gpu_bytes);

}  // namespace troupe
