// `troupe serve --dry-run [--gpu-memory-gib G]`: the memory plan of each
// tensor-parallel rank of the configured deployment, and of T = 1, 2, 4, 8
// beside it, without loading or allocating anything (so a 70B plan can be
// read on a laptop). For the cuda backend, on a GPU of G GiB (default: the
// visible GPU's memory, else 80).
#include <algorithm>
#include <cstdio>
#include <string>

#include "actors/worker/load_runners.h"
#include "cli/command_setup.h"
#include "cli/commands.h"

namespace troupe {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

std::string fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string heads(const tp_layout& l, const model_config& m) {
  int64_t q_pad = 0;
  for (int64_t q : l.q_head_of) q_pad += q < 0;
  std::string s = std::to_string(l.q_heads) + "/" + std::to_string(m.num_attention_heads) +
                  " query heads";
  if (q_pad > 0) s += " (" + std::to_string(q_pad) + " padding)";
  s += ", " + std::to_string(l.kv_heads) + "/" + std::to_string(m.num_key_value_heads) +
       " KV heads";
  if (l.kv_replicas > 1) s += " (each on " + std::to_string(l.kv_replicas) + " ranks)";
  return s;
}

// The smallest rank's KV tokens (every rank holds the same blocks).
int64_t kv_tokens(const std::vector<rank_memory_estimate>& ranks) {
  int64_t tokens = ranks[0].kv_tokens;
  for (const rank_memory_estimate& r : ranks) tokens = std::min(tokens, r.kv_tokens);
  return tokens;
}

}  // namespace

int run_dry_run(const engine_config& config, const model_config& model, double gpu_gib) {
  const auto gpu_bytes = static_cast<int64_t>(gpu_gib * gib);
  const int size = static_cast<int>(config.tensor_parallel_size);
  auto planned = estimate_rank_memory(config, model, size, gpu_bytes);
  if (!planned) {
    print_error(planned.error_message());
    return 2;
  }
  const std::vector<rank_memory_estimate>& ranks = planned.value();
  engine_config cuda_config = config;
  cuda_config.backend = "cuda";
  const int64_t max_model_len = config.max_model_len.value_or(model.max_position_embeddings);
  std::printf("dry run: nothing loaded or allocated. Memory plan of the cuda backend for %s "
              "(%lld layers, %s%s), max_model_len %lld, gpu_memory_utilization %.2f, on GPUs of "
              "%.2f GiB\n",
              model.architecture.c_str(), static_cast<long long>(model.num_hidden_layers),
              dtype_name(cuda_compute_type(cuda_config, model)),
              config.fp8_kv_cache() ? ", KV cache float8 e4m3" : "",
              static_cast<long long>(max_model_len), config.gpu_memory_utilization, gpu_gib);
  const auto stages = static_cast<int>(config.pipeline_parallel_size);
  std::printf("tensor_parallel_size %d x pipeline_parallel_size %d (configured):\n", size, stages);
  for (size_t g = 0; g < ranks.size(); ++g) {
    const rank_memory_estimate& r = ranks[g];
    std::string stage;
    if (stages > 1) {
      stage = "; stage " + std::to_string(r.stage) + ": layers " + std::to_string(r.layers.begin) +
              ".." + std::to_string(r.layers.end - 1);
    }
    const std::string host =
        r.host_weights > 0 ? " (and " + fixed(r.host_weights / gib) + " GiB in host memory: cpu_offload_gb)" : "";
    std::printf("  rank %zu: weights %.2f GiB%s, workspace %.2f GiB, reserved %.2f GiB, KV cache "
                "%.2f GiB = %lld tokens (%lld bytes a token); %s%s\n",
                g, r.weights / gib, host.c_str(), r.workspace / gib, r.reserved / gib, r.kv_bytes / gib,
                static_cast<long long>(r.kv_tokens), static_cast<long long>(r.kv_bytes_per_token),
                heads(r.layout, model).c_str(), stage.c_str());
  }
  const int64_t tokens = kv_tokens(ranks);
  const bool fits = tokens >= max_model_len;
  std::printf("  KV cache: %lld tokens on every rank, %.2fx max_model_len: %s\n",
              static_cast<long long>(tokens), double(tokens) / double(max_model_len),
              fits ? "fits" : "does NOT fit one sequence of max_model_len");
  std::printf("other tensor_parallel_size values (rank 0; reserved includes %.2f GiB "
              "estimated for the CUDA context):\n",
              cuda_context_estimate_bytes / gib);
  std::printf("  %-4s %-18s %-18s %-12s %s\n", "T", "weights/rank GiB", "KV cache/rank GiB",
              "KV tokens", "max_model_len");
  for (int t : {1, 2, 4, 8}) {
    auto other = estimate_rank_memory(config, model, t, gpu_bytes);
    if (!other) continue;
    const int64_t other_tokens = kv_tokens(other.value());
    std::printf("  %-4d %-18.2f %-18.2f %-12lld %s\n", t, other.value()[0].weights / gib,
                other.value()[0].kv_bytes / gib, static_cast<long long>(other_tokens),
                other_tokens >= max_model_len ? "fits" : "does not fit");
  }
  return fits ? 0 : 1;
}

}  // namespace troupe
