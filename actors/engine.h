// engine: the one way into troupe's runtime, used by `troupe generate`, the
// benchmarks, the tests and (later) the HTTP server. It loads the model,
// sizes the KV cache (engine_limits), starts the CAF actor system and spawns
// the block manager, worker (detached) and scheduler actors; submit() spawns
// one request actor per request.
//
// Thread-safe: submit/abort/stats may be called from any thread. The
// destructor waits for the actors to finish (abort requests first).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/messages.h"
#include "actors/request/request_metrics.h"
#include "actors/request/request_sink.h"
#include "actors/worker/worker_health.h"
#include "common/result.h"
#include "config/engine_config.h"
#include "model/lora_registry.h"
#include "model/model_config.h"
#include "grammar/vocabulary.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

// Values derived from the config and the model; never written back into
// the config.
struct engine_limits {
  int64_t max_model_len = 0;
  int64_t block_size = 0;
  int64_t num_blocks = 0;  // including the null block
  int64_t num_cpu_blocks = 0;  // swap space (swap_space GiB), 0: none
  int64_t kv_bytes_per_block = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 0;
  int64_t max_num_seqs_per_request = 0;  // fair share of running slots
  // Server admission (engine_config's keys, defaults resolved).
  int64_t max_n = 0;
  int64_t max_waiting_seqs = 0;
  int64_t max_waiting_tokens = 0;  // 0 until the KV cache is sized (cuda)
  std::string backend;  // resolved: "cpu" or "cuda"
  int64_t num_speculative_tokens = 0;  // speculative_config's K; 0: off
  int64_t max_loras = 0;               // LoRA device slots; 0: no LoRA
  bool batch_invariant = false;        // engine_config's
  bool log_expert_counts = false;      // engine_config's
  bool fp8_kv_cache = false;           // kv_cache_dtype fp8 / fp8_e4m3
  int64_t kv_element_bytes = 0;        // a cached K or V element's (1: FP8 codes)
};

// Computes the limits; fails when the KV cache cannot hold one sequence of
// max_model_len tokens, naming the numbers. On the cpu backend the KV cache
// is cpu_kvcache_space GiB of float32. With `cuda`, num_blocks stays 0
// (unless num_gpu_blocks_override): the memory plan sizes it once the
// weights are on the device (plan_gpu_kv_blocks).
// max_num_seqs / max_num_batched_tokens left unset are chosen by
// engine_batch_defaults for the device (its memory and name).
result<engine_limits> derive_engine_limits(const engine_config& config,
                                           const model_config& model, bool cuda = false,
                                           int64_t device_bytes = 0,
                                           const std::string& device_name = "");

// The GPU memory plan (as vLLM's): of total * gpu_memory_utilization, what
// is not in use once the weights and workspaces are allocated, less
// `reserved` (the runner's buffers, cuBLAS workspaces, CUDA graphs), goes to
// KV blocks of `kv_bytes_per_block`. Returns the usable block count, or an
// error with the numbers when one sequence of max_model_len cannot fit.
struct gpu_memory_state {
  int64_t total = 0;     // device memory
  int64_t free = 0;      // free now (weights and workspaces allocated)
  int64_t weights = 0;   // what loading the model took (for the message)
  int64_t reserved = 0;  // still to be allocated besides the KV cache
};
result<int64_t> plan_gpu_kv_blocks(const gpu_memory_state& m, double gpu_memory_utilization,
                                   int64_t kv_bytes_per_block, int64_t block_size,
                                   int64_t max_model_len);

class engine {
 public:
  // Loads and validates everything; errors are user-facing messages.
  static result<std::unique_ptr<engine>> create(const engine_config& config);
  // The same with the tokenizer already loaded (by load_tokenizer).
  static result<std::unique_ptr<engine>> create(const engine_config& config,
                                                std::shared_ptr<const tokenizer> tok);
  // The tokenizer the config names (`tokenizer`, else the model folder when
  // it holds a tokenizer.json; none with skip_tokenizer_init).
  static result<std::shared_ptr<const tokenizer>> load_tokenizer(const engine_config& config);
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Submits one request (n must be 1 here; callers fan out n > 1). The sink
  // receives every output, the last with finish != none (an invalid request
  // gets a single output with finish_reason::error).
  request_id submit(std::vector<int32_t> prompt_ids, const sampling_params& params,
                    std::shared_ptr<request_sink> sink);

  // Submits several requests that the scheduler admits in one message, so
  // they are scheduled together. Returns their ids, in order.
  struct submission {
    std::vector<int32_t> prompt_ids;
    sampling_params params;
    std::shared_ptr<request_sink> sink;
    // Parallel sampling: the index (in this batch, earlier) of the sibling
    // whose prompt this one shares (-1: none). Same prompt required.
    int fork_of_index = -1;
    // Fair sharing: the index (in this batch, earlier) of a submission of the
    // same API request (-1: a request of its own, or its fork leader's).
    int group_of_index = -1;
  };
  std::vector<request_id> submit_batch(std::vector<submission> batch);
  // Aborts requests at the scheduler, all in one message (the sequences of
  // one API request are released in the same step). Unknown or finished ids
  // are ignored.
  void abort(std::vector<request_id> ids);
  void abort(request_id id) { abort(std::vector<request_id>{id}); }
  engine_stats stats();
  // Latency and size distributions of the requests so far (thread-safe).
  request_metrics_snapshot metrics() const;

  const model_config& model() const;
  // Whether every worker rank is there (a lost rank: the server answers
  // 503 and /health reports it). Thread-safe.
  const worker_health& health() const;
  const engine_limits& limits() const;
  // The tokenizer (from `tokenizer`, else the model folder when it has a
  // tokenizer.json), or null: then prompts are token ids and outputs carry
  // no text. Thread-safe to use from any thread.
  std::shared_ptr<const tokenizer> get_tokenizer() const;
  // The LoRA adapters served (names -> ids for sampling_params::lora_id),
  // or null without enable_lora. Thread-safe.
  std::shared_ptr<lora_registry> loras() const;

 private:
  struct impl;
  explicit engine(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe
