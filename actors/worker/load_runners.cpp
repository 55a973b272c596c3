#include "actors/worker/load_runners.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "config/logging.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel/cpu_group.h"
#ifdef TROUPE_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#include "parallel/nccl_communicator.h"
#endif

namespace troupe {

runner_limits runner_limits_of(const engine_limits& limits) {
  runner_limits rl;
  rl.max_num_batched_tokens = limits.max_num_batched_tokens;
  rl.max_num_seqs = limits.max_num_seqs;
  rl.max_model_len = limits.max_model_len;
  rl.block_size = limits.block_size;
  rl.num_blocks = limits.num_blocks;
  rl.num_cpu_blocks = limits.num_cpu_blocks;
  rl.num_speculative_tokens = limits.num_speculative_tokens;
  rl.max_loras = limits.max_loras;
  rl.batch_invariant = limits.batch_invariant;
  rl.count_experts = limits.log_expert_counts;
  rl.fp8_kv_cache = limits.fp8_kv_cache;
  return rl;
}

namespace {

// cuda_ops::packs_weights without a device (the dry run's plan): GPTQ and
// AWQ checkpoints (every bit width their configs accept), and FP8.
bool cuda_packs_weights(const quant_config& q) {
  return q.integer_codes() || q.kind == quant_config::method::fp8;
}

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// What a rank has loaded before its runner is made.
struct rank_state {
  std::unique_ptr<ops> backend;
  std::unique_ptr<communicator> tp, pp;  // its groups (null: one rank / one stage)
  std::unique_ptr<llama_model> model;
  int64_t planned_blocks = 0;  // the memory plan's KV blocks (cuda), 0: none
  std::unique_ptr<model_runner> runner;
  std::string error;
};


// body(rank) for every rank: inline for one, else on a thread a rank.
void for_each_rank(int size, const std::function<void(int)>& body) {
  if (size == 1) {
    body(0);
    return;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

// The first rank's error, named by rank (the first here is `first`) when
// there are several ranks.
status first_error(const std::vector<rank_state>& ranks, int first) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].error.empty()) continue;
    if (ranks.size() == 1) return make_error(ranks[r].error);
    return make_error("rank " + std::to_string(first + static_cast<int>(r)) + ": " + ranks[r].error);
  }
  return {};
}

// TROUPE_DEBUG_TP_COMM=1: one rank still goes through a one-rank group
// (its all-reduces run; on cuda through NCCL), so the group's code path is
// exercised with one device.
bool one_rank_group() {
  const char* v = std::getenv("TROUPE_DEBUG_TP_COMM");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// The backend of a rank on CUDA device `device` (or the CPU) and the
// compute type.
result<std::unique_ptr<ops>> make_backend(const engine_config& config, const model_config& model,
                                          const engine_limits& limits, int device, dtype& type) {
  const int devices = visible_cuda_devices();
  if (!wants_cuda(config)) {
    if (config.dtype == "bfloat16" || config.dtype == "float16") {
      return make_error("dtype '" + config.dtype + "' needs the cuda backend, and no CUDA device "
                        "is visible (the cpu backend computes in float32)");
    }
    type = dtype::f32;
    return std::unique_ptr<ops>(std::make_unique<cpu_ops>());
  }
  if (devices == 0) return make_error("backend cuda: no CUDA device is visible");
  type = cuda_compute_type(config, model);
#ifdef TROUPE_HAVE_CUDA
  auto backend = std::make_unique<cuda_ops>(device, limits.max_num_batched_tokens);
  const runner_limits step_limits = runner_limits_of(limits);
  // A step's attention sequences: its sequences, or a verify step's tokens
  // (speculative decoding), each sampled once.
  const int64_t attention_seqs = model_runner::max_attention_seqs(step_limits);
  // Decode attention's split-KV partials: reserved before any forward pass.
  backend->reserve_attention_workspace(attention_seqs, model.num_attention_heads, model.head_dim);
  // The sampler's buffers at their steady-state sizes, so that growing one
  // (which waits for the stream) never happens in the middle of serving.
  backend->reserve_sampling(model_runner::logits_chunk_rows, attention_seqs, model.vocab_size);
  // The pinned staging of a step's inputs, at the largest step's size (plus
  // the sampler's parameters), so that no page-locked allocation (an
  // implicit synchronisation) happens while serving.
  backend->reserve_staging(model_runner::input_bytes(step_limits) + (size_t{1} << 20));
  return std::unique_ptr<ops>(std::move(backend));
#else
  (void)limits;
  return make_error("backend cuda: this build has no CUDA backend");
#endif
}

// The ranks' groups: rank g = stage * T + t is member t of its stage's
// tensor-parallel group and member `stage` of pipeline group t. Made before
// the ranks start: the CPU groups' members (taken by the ranks), or the
// NCCL groups' ids.
struct parallel_groups {
  int tp_size = 1, pp_size = 1;
  bool tp = false, pp = false;  // whether each kind of group exists
  std::vector<std::vector<std::unique_ptr<communicator>>> tp_cpu, pp_cpu;  // [stage][t], [t][stage]
  std::vector<std::string> tp_nccl, pp_nccl;                              // [stage], [t]
  // Pipeline groups across processes (local_ranks::pipeline), else null.
  std::function<std::unique_ptr<communicator>(int)> pp_external;
  bool pp_across_processes = false;  // NCCL pipeline groups with ranks in other processes
  std::chrono::milliseconds timeout{0};  // a peer that does not come is lost after this
};

result<parallel_groups> make_groups(const engine_config& config, bool cuda,
                                    const local_ranks& local) {
  parallel_groups g;
  g.tp_size = static_cast<int>(config.tensor_parallel_size);
  g.pp_size = static_cast<int>(config.pipeline_parallel_size);
  g.tp = g.tp_size > 1 || one_rank_group();
  g.pp_external = local.pipeline;
  g.pp = g.pp_size > 1 && !g.pp_external;
  if (cuda && !local.pipeline_ids.empty()) {  // made by the head
    g.pp_nccl = local.pipeline_ids;
    g.pp_across_processes = true;
  }
  // How long a rank waits for a peer before the group is taken as lost
  // (a stage waits for the earlier stages' whole forward pass).
  const auto timeout = std::chrono::milliseconds(std::chrono::seconds(config.distributed_timeout));
  g.timeout = timeout;
  for (int s = 0; g.tp && s < g.pp_size; ++s) {
    if (!cuda) {
      g.tp_cpu.push_back(cpu_group::create(g.tp_size, timeout));
      continue;
    }
#ifdef TROUPE_HAVE_CUDA
    auto id = nccl_unique_id();
    if (!id) return std::move(id).take_error();
    g.tp_nccl.push_back(std::move(id.value()));
#endif
  }
  for (int t = static_cast<int>(g.pp_nccl.size()); g.pp && t < g.tp_size; ++t) {
    if (!cuda) {
      g.pp_cpu.push_back(cpu_group::create(g.pp_size, timeout));
      continue;
    }
#ifdef TROUPE_HAVE_CUDA
    auto id = nccl_unique_id();
    if (!id) return std::move(id).take_error();
    g.pp_nccl.push_back(std::move(id.value()));
#endif
  }
  return g;
}

// Member `member` of `size` of a group: its CPU member, or a NCCL group
// joined on the backend's device and stream.
result<std::unique_ptr<communicator>> join(ops& backend, std::unique_ptr<communicator>& cpu_member,
                                           const std::string& nccl_id, int member, int size,
                                           std::chrono::milliseconds timeout) {
  if (backend.kind() == backend_kind::cpu) return std::move(cpu_member);
#ifdef TROUPE_HAVE_CUDA
  auto comm = nccl_communicator::create(nccl_id, member, size,
                                        static_cast<cuda_ops&>(backend).stream(), timeout);
  if (!comm) return std::move(comm).take_error();
  return std::unique_ptr<communicator>(std::move(comm.value()));
#else
  (void)nccl_id, (void)member, (void)size, (void)timeout;
  return make_error("backend cuda: this build has no CUDA backend");
#endif
}

// Rank g's memberships (every member of a group joins it at the same time:
// NCCL's creation waits for them all; tensor-parallel groups first).
status join_groups(ops& backend, parallel_groups& groups, int g, rank_state& out) {
  const int t = g % groups.tp_size, stage = g / groups.tp_size;
  const auto at = [](auto& v, int i) -> auto& { return v.at(static_cast<size_t>(i)); };
  std::unique_ptr<communicator> none;
  if (groups.tp) {
    auto joined = join(backend, groups.tp_cpu.empty() ? none : at(at(groups.tp_cpu, stage), t),
                       groups.tp_nccl.empty() ? "" : at(groups.tp_nccl, stage), t, groups.tp_size,
                       groups.timeout);
    if (!joined) return std::move(joined).take_error();
    out.tp = std::move(joined.value());
  }
  if (groups.pp) {
    auto joined = join(backend, groups.pp_cpu.empty() ? none : at(at(groups.pp_cpu, t), stage),
                       groups.pp_nccl.empty() ? "" : at(groups.pp_nccl, t), stage, groups.pp_size,
                       groups.timeout);
    if (!joined && groups.pp_across_processes) {
      return make_error(joined.error_message() +
                        " (pipeline stages in several processes on one host: give each process "
                        "GPUs of its own with CUDA_VISIBLE_DEVICES)");
    }
    if (!joined) return std::move(joined).take_error();
    out.pp = std::move(joined.value());
  }
  if (groups.pp_external) out.pp = groups.pp_external(t);
  return {};
}

// The memory plan of one rank (cuda): its KV blocks, logged.
status plan_rank_memory(const engine_config& config, const model_config& model,
                        const engine_limits& limits, int64_t free_before, const std::string& who,
                        rank_state& rank) {
#ifdef TROUPE_HAVE_CUDA
  gpu_memory_state m;
  if (!cuda::memory_info(m.free, m.total)) return make_error("backend cuda: cudaMemGetInfo failed");
  m.weights = free_before - m.free;
  // The runner's own buffers, plus headroom for cuBLAS workspaces, CUDA
  // graphs and the start-up tuning's scratch (the sampler's buffers are
  // reserved before free_before: already counted).
  m.reserved = model_runner::buffer_bytes(runner_limits_of(limits), model.vocab_size) + (256LL << 20);
  auto blocks = plan_gpu_kv_blocks(m, config.gpu_memory_utilization, limits.kv_bytes_per_block,
                                   limits.block_size, limits.max_model_len);
  if (!blocks) return std::move(blocks).take_error();
  rank.planned_blocks = *blocks;
  get_logger("kv")->info(
      "{}memory plan: {:.2f} GiB x gpu_memory_utilization {} = {:.2f} GiB; weights and "
      "workspaces {:.2f} GiB, in use before them {:.2f} GiB, reserved {:.2f} GiB; KV cache "
      "{:.2f} GiB",
      who, double(m.total) / gib, config.gpu_memory_utilization,
      double(m.total) * config.gpu_memory_utilization / gib, double(m.weights) / gib,
      double(m.total - m.free - m.weights) / gib, double(m.reserved) / gib,
      double(*blocks * limits.kv_bytes_per_block) / gib);
  return {};
#else
  (void)config, (void)model, (void)limits, (void)free_before, (void)who, (void)rank;
  return make_error("backend cuda: this build has no CUDA backend");
#endif
}

// A rank's backend, group membership and weights (and its memory plan).
// `rank` counts all the engine's ranks (of `size`); `device` is its CUDA
// device here (the first rank of this process, device 0, logs progress).
status load_rank(const engine_config& config, const model_config& model,
                 const engine_limits& limits, const checkpoint* ckpt, parallel_groups& groups,
                 int rank, int size, int device, rank_state& out) {
  auto log = get_logger("model");
  const bool lead = device == 0;
  const std::string who = size > 1 ? "rank " + std::to_string(rank) + ": " : "";
  weight_source source;
  source.ckpt = ckpt;
  source.dummy_seed = config.seed;
  source.cpu_offload_bytes = config.cpu_offload_bytes();
  auto made = make_backend(config, model, limits, device, source.compute_type);
  if (!made) return std::move(made).take_error();
  out.backend = std::move(made.value());
  if (lead) {
    log->info("backend {} ({})", out.backend->kind() == backend_kind::cuda ? "cuda" : "cpu",
              dtype_name(source.compute_type));
  }
  if (status s = join_groups(*out.backend, groups, rank, out); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  int64_t last_percent = -1;
  auto progress = [&](int64_t done, int64_t total) {
    const int64_t percent = done * 100 / total;
    if (lead && (percent / 25 != last_percent / 25 || done == total)) {
      log->info("loading weights: {}/{} tensors ({}%)", done, total, percent);
      last_percent = percent;
    }
  };
  int64_t free_before = 0, total = 0;
#ifdef TROUPE_HAVE_CUDA
  if (out.backend->kind() == backend_kind::cuda) cuda::memory_info(free_before, total);
#endif
  model_parallel parallel;
  parallel.tp = out.tp.get();
  parallel.pp = out.pp.get();
  parallel.max_logits_rows = model_runner::logits_chunk_rows;
  auto created = llama_model::create(model, *out.backend, source, limits.max_num_batched_tokens,
                                     limits.max_model_len, parallel, progress);
  if (!created) return std::move(created).take_error();
  out.model = std::move(created.value());
  // LoRA slots are allocated with the weights (the memory plan counts them).
  if (limits.max_loras > 0) out.model->enable_lora(limits.max_loras, config.max_lora_rank);
  if (out.tp) log->info("tensor parallel {}", describe(out.model->layout(), model));
  if (out.pp) {
    log->info("pipeline stage {}/{} (rank {}): layers {}..{}", out.pp->rank(), out.pp->size(), rank,
              out.model->stage().begin, out.model->stage().end - 1);
  }
  const std::vector<int> unpadded =
      unpadded_tp_sizes(model, std::max(static_cast<int>(config.tensor_parallel_size), 8));
  const int tp_size = static_cast<int>(config.tensor_parallel_size);
  if (out.tp && lead && std::find(unpadded.begin(), unpadded.end(), tp_size) == unpadded.end()) {
    std::string sizes;
    for (int t : unpadded) sizes += (sizes.empty() ? "" : ", ") + std::to_string(t);
    log->warn("tensor_parallel_size {} does not divide the model's heads or intermediate size: "
              "padded with zero weights (computed, then discarded); sizes without padding: {}",
              tp_size, sizes);
  }
  log->info("{}weights {} in {:.2f} s ({})", who, ckpt ? "loaded" : "generated (dummy)",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            model.architecture);
  if (const quant_config& q = model.quantization;
      lead && q.kind != quant_config::method::none) {
    std::string why;
    llama_model::packs(model, out.model->layout(), config.cpu_offload_bytes(),
                       out.backend->packs_weights(q, source.compute_type), &why);
    const bool fp8 = q.kind == quant_config::method::fp8;
    const std::string what =
        !fp8 ? std::string(quant_method_name(q.kind)) + " " + std::to_string(q.bits) + "-bit weights"
        : q.online ? std::string("fp8 weights (quantized at load, a scale an output row)")
                   : "fp8 weights (blocks of " + std::to_string(q.block_out) + " x " + std::to_string(q.block_in) + ")";
    if (out.model->packed() && fp8) {
      log->info("{}{} kept as e4m3 codes: the dense products run W8A8, activations quantized per token{}", who,
                what, q.online ? "" : " per 128 inputs");
    } else if (out.model->packed()) {
      log->info("{}{} packed (group size {}{}): the dense products read the codes", who, what, q.group_size,
                q.desc_act ? ", act-order" : "");
    } else {
      log->info("{}{} dequantized to {} at load: {}", who, what, dtype_name(source.compute_type), why);
    }
  }
  if (const offload_plan& o = out.model->offload(); o.num_offloaded > 0) {
    const stage_layers& st = out.model->stage();
    log->info("{}cpu_offload_gb: {} of {} layers in host memory (layers {}..{}, {:.3f} GiB), copied as "
              "they run into a {:.3f} GiB staging buffer", who, o.num_offloaded, st.end - st.begin,
              st.begin, st.begin + o.num_offloaded - 1, double(o.host_bytes) / double(1LL << 30),
              double(o.staging_bytes) / double(1LL << 30));
  }
  if (out.backend->kind() == backend_kind::cuda && limits.num_blocks == 0) {
    return plan_rank_memory(config, model, limits, free_before, who, out);
  }
  return {};
}

// A rank's runner over its KV cache, and its CUDA graphs.
void make_runner(const engine_config& config, const engine_limits& limits, bool log_graphs,
                 rank_state& rank) {
  const runner_limits rl = runner_limits_of(limits);
  std::vector<std::unique_ptr<communicator>> groups;
  groups.push_back(std::move(rank.tp));
  groups.push_back(std::move(rank.pp));
  rank.runner = std::make_unique<model_runner>(std::move(rank.backend), std::move(rank.model), rl,
                                               std::move(groups));
  if (config.enforce_eager) return;
  const auto capture_start = std::chrono::steady_clock::now();
  const int64_t n = rank.runner->capture_graphs();
  if (n == 0 || !log_graphs) return;
  auto log = get_logger("model");
  const auto& sizes = rank.runner->graph_sizes();
  log->info("captured {} CUDA graphs for decode batches of {}..{} sequences in {:.2f} s", n,
            sizes.front(), sizes.back(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_start).count());
  // The summary at info, each shape's timings at debug.
  if (const std::string tuned = rank.runner->tuning_report(); !tuned.empty()) {
    const size_t eol = tuned.find('\n');
    log->info("{}", tuned.substr(0, eol));
    if (eol != std::string::npos) log->debug("{}", tuned.substr(eol + 1));
  }
}

}  // namespace

int visible_cuda_devices() {
#ifdef TROUPE_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

int64_t visible_gpu_bytes() {
  int64_t free_bytes = 0, total = 0;
#ifdef TROUPE_HAVE_CUDA
  if (visible_cuda_devices() == 0 || !cuda::memory_info(free_bytes, total)) return 0;
#endif
  return total;
}

result<std::vector<std::string>> pipeline_group_ids(const engine_config& config) {
  std::vector<std::string> ids;
  if (!wants_cuda(config)) return ids;
#ifdef TROUPE_HAVE_CUDA
  for (int64_t t = 0; t < config.tensor_parallel_size; ++t) {
    auto id = nccl_unique_id();
    if (!id) return std::move(id).take_error();
    ids.push_back(std::move(id.value()));
  }
  return ids;
#else
  return make_error("backend cuda: this build has no CUDA backend");
#endif
}

result<engine_limits> derive_local_limits(const engine_config& config, const model_config& model) {
  const bool cuda = wants_cuda(config);
  int64_t device_bytes = 0;
  std::string device_name;
#ifdef TROUPE_HAVE_CUDA
  if (cuda) {
    int64_t free_bytes = 0;
    cuda::memory_info(free_bytes, device_bytes);
    device_name = cuda::describe_device(0);
  }
#endif
  return derive_engine_limits(config, model, cuda, device_bytes, device_name);
}

bool wants_cuda(const engine_config& config) {
  return config.backend == "cuda" || (config.backend == "auto" && visible_cuda_devices() > 0);
}

dtype cuda_compute_type(const engine_config& config, const model_config& model) {
  if (config.dtype == "float32") return dtype::f32;
  if (config.dtype == "bfloat16") return dtype::bf16;
  if (config.dtype == "float16") return dtype::f16;
  return model.torch_dtype == "float16" ? dtype::f16 : dtype::bf16;
}

result<std::vector<std::unique_ptr<model_runner>>> load_runners(const engine_config& config,
                                                                const model_config& model,
                                                                engine_limits& limits,
                                                                const local_ranks& local) {
  const auto tp = static_cast<int>(config.tensor_parallel_size);
  const int size = tp * static_cast<int>(config.pipeline_parallel_size);
  const int first = local.first_stage * tp;  // this process's ranks: first .. first + here - 1
  const int here = local.num_stages > 0 ? local.num_stages * tp : size;
  const bool cuda = wants_cuda(config);
  if (const int devices = visible_cuda_devices(); cuda && devices > 0 && here > devices) {
    return make_error("tensor_parallel_size " + std::to_string(config.tensor_parallel_size) +
                      " x pipeline_parallel_size " +
                      std::to_string(config.pipeline_parallel_size) + " needs " +
                      std::to_string(here) + " CUDA devices (one a rank), and " +
                      std::to_string(devices) + " are visible");
  }
  std::unique_ptr<checkpoint> ckpt;
  if (config.load_format != "dummy") {
    auto opened = checkpoint::open(config.model);
    if (!opened) return std::move(opened).take_error();
    ckpt = std::make_unique<checkpoint>(std::move(opened.value()));
    ckpt->set_quantization(model.quantization);
  }
  auto groups = make_groups(config, cuda && visible_cuda_devices() > 0, local);
  if (!groups) return std::move(groups).take_error();
  std::vector<rank_state> ranks(static_cast<size_t>(here));
  for_each_rank(here, [&](int i) {
    rank_state& rank = ranks[static_cast<size_t>(i)];
    if (status s = load_rank(config, model, limits, ckpt.get(), groups.value(), first + i, size,
                             i, rank);
        !s.ok()) {
      rank.error = s.error_message();
      // The others may wait for this rank in a collective: end its groups.
      const std::string reason = "rank " + std::to_string(first + i) + " failed to load";
      if (rank.tp) rank.tp->abort(reason);
      if (rank.pp) rank.pp->abort(reason);
    }
  });
  if (status s = first_error(ranks, first); !s.ok()) return std::move(s).take_error();
  if (limits.num_blocks == 0) {  // cuda: every rank holds the blocks the smallest plan allows
    int64_t blocks = ranks[0].planned_blocks;
    for (const rank_state& r : ranks) blocks = std::min(blocks, r.planned_blocks);
    limits.num_blocks = blocks + 1;
  }
  for_each_rank(here, [&](int i) { make_runner(config, limits, i == 0, ranks[static_cast<size_t>(i)]); });
  std::vector<std::unique_ptr<model_runner>> runners;
  for (rank_state& r : ranks) runners.push_back(std::move(r.runner));
  return runners;
}

result<std::vector<rank_memory_estimate>> estimate_rank_memory(const engine_config& config,
                                                               const model_config& model,
                                                               int tp_size, int64_t gpu_bytes) {
  engine_config c = config;
  c.backend = "cuda";
  c.tensor_parallel_size = tp_size;
  const int stages = static_cast<int>(config.pipeline_parallel_size);
  auto limits = derive_engine_limits(c, model, true, gpu_bytes, "");
  if (!limits) return std::move(limits).take_error();
  const runner_limits planned = runner_limits_of(*limits);
  const dtype type = cuda_compute_type(c, model);
  std::vector<rank_memory_estimate> ranks;
  for (int g = 0; g < tp_size * stages; ++g) {
    const int stage = g / tp_size;
    auto layout = make_tp_layout(model, tp_size, g % tp_size);
    if (!layout) return std::move(layout).take_error();
    rank_memory_estimate e;
    e.stage = stage;
    e.layers = pipeline_stage_layers(model.num_hidden_layers, stages, stage);
    const llama_model::footprint f = llama_model::memory_footprint(
        model, *layout, stage, stages, type, limits->max_num_batched_tokens,
        limits->max_model_len, model_runner::logits_chunk_rows, config.cpu_offload_bytes(),
        llama_model::packs(model, *layout, config.cpu_offload_bytes(), cuda_packs_weights(model.quantization)));
    e.layout = std::move(layout.value());
    e.weights = f.weights;
    e.host_weights = f.host_weights;
    e.workspace = f.workspace;
    // As plan_rank_memory reserves, plus the context's estimate.
    e.reserved = model_runner::buffer_bytes(planned, model.vocab_size) + (256LL << 20) +
                 cuda_context_estimate_bytes;
    // K and V of the stage's layers, the rank's KV heads.
    e.kv_bytes_per_token = 2 * (e.layers.end - e.layers.begin) * e.layout.kv_heads *
                           model.head_dim * limits->kv_element_bytes;
    e.kv_bytes = static_cast<int64_t>(double(gpu_bytes) * config.gpu_memory_utilization) -
                 e.weights - e.workspace - e.reserved;
    // Blocks of the largest stage's size, as the real plan counts them.
    e.kv_tokens = std::max<int64_t>(e.kv_bytes, 0) / limits->kv_bytes_per_block * limits->block_size;
    ranks.push_back(std::move(e));
  }
  return ranks;
}

}  // namespace troupe
