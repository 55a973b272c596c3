// engine_config: the one deployment schema. Field names are vLLM's option
// names (snake_case in YAML, --kebab-case on the command line). Loaded from
// defaults, then a YAML file, then command-line flags (CLI > file > defaults),
// validated once (every problem reported at once, each with its key), and
// immutable afterwards: derived values (KV block count, clamped lengths) live
// in engine_limits, never here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

struct lora_module {
  std::string name;
  std::string path;
};

// vLLM's defaults for the unset max_num_seqs / max_num_batched_tokens
// (EngineArgs.get_batch_defaults): on a GPU of >= 70 GiB that is not an A100
// (H100, H200), 1024 sequences and 8192 tokens a step when serving, 16384
// offline; on other GPUs 256 and 2048 / 8192; on the CPU 256 and 2048. An
// explicit max_num_batched_tokens below the default max_num_seqs lowers the
// latter to it.
struct batch_defaults {
  int64_t max_num_seqs;
  int64_t max_num_batched_tokens;
};
struct engine_config;
batch_defaults engine_batch_defaults(const engine_config& c, bool cuda, int64_t device_bytes,
                                     const std::string& device_name);

struct engine_config {
  // Model and tokenizer.
  std::string model;                 // folder with config.json (+ safetensors)
  std::string tokenizer;             // folder; defaults to `model`
  std::vector<std::string> served_model_name;  // defaults to [model]
  bool skip_tokenizer_init = false;
  std::string backend = "auto";      // auto | cpu | cuda
  std::string dtype = "auto";        // auto | float32 | bfloat16 | float16
  std::string load_format = "auto";  // auto | dummy
  // Quantized weights (vLLM's names; model/quantization.h
  // resolve_quantization): "" (the checkpoint's quantization_config) |
  // gptq | gptq_marlin | awq | awq_marlin | fp8. With load_format dummy on
  // a float config, gptq / awq make 4-bit group-128 dummy weights.
  std::string quantization;
  int64_t seed = 0;
  std::optional<int64_t> max_model_len;  // default: max_position_embeddings

  // KV cache.
  int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  // GiB of each rank's decoder-layer weights kept in pinned host memory and
  // copied to the device as their layers run (vLLM's cpu_offload_gb; whole
  // layers from the first: model/weight_offload.h). 0: none.
  double cpu_offload_gb = 0;
  int64_t cpu_offload_bytes() const { return static_cast<int64_t>(cpu_offload_gb * double(int64_t{1} << 30)); }
  std::optional<int64_t> num_gpu_blocks_override;
  double swap_space = 0;             // GiB of host memory for swapped blocks
  double cpu_kvcache_space = 4;      // GiB of KV cache on the cpu backend
  // auto: the compute type; fp8 / fp8_e4m3: float8 e4m3 codes over per-layer
  // scales (the checkpoint's k_scale / v_scale, else 1.0), a quarter of the
  // cpu backend's bytes (the CUDA kernels do not read it yet).
  std::string kv_cache_dtype = "auto";
  bool fp8_kv_cache() const { return kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3"; }
  bool enable_prefix_caching = true;

  // Scheduler.
  // Unset: chosen by the engine as vLLM does (engine_batch_defaults).
  std::optional<int64_t> max_num_seqs;
  std::optional<int64_t> max_num_batched_tokens;
  bool enable_chunked_prefill = true;
  std::string scheduling_policy = "fcfs";  // fcfs | priority
  // reserve: admit a request only when the running set, it included, is
  // expected to fit its KV to completion (actors/scheduler/kv_admission.h);
  // chunk: when its next chunk fits (vLLM's rule; more preemption under
  // long generations).
  std::string kv_admission = "reserve";
  // Fair sharing (actors/scheduler/fair_share.h): the running slots one API
  // request (its prompts times n) may hold, and the same fraction of a
  // step's prefill tokens while others want them. Unset: max_num_seqs / 2.
  std::optional<int64_t> max_num_seqs_per_request;
  // Admission at the server: the largest n a request may ask for (larger is
  // a 400), and the waiting sequences / prompt tokens beyond which new
  // requests get 503 (a request alone larger than either is a 400). Unset:
  // 4 x max_num_seqs (at least max_n), and 4 x the KV cache's tokens (at
  // least max_model_len).
  int64_t max_n = 128;
  std::optional<int64_t> max_waiting_seqs;
  std::optional<int64_t> max_waiting_tokens;

  // Execution.
  bool enforce_eager = false;
  // Plan step N + 1 while step N runs (where the backend samples where the
  // logits are); false: lockstep.
  bool async_scheduling = true;
  // Every row of a step computed as it would be in any other batch (bf16 /
  // f16 on CUDA: products as GEMVs of up to 8 rows at a time, decode
  // attention without key splits; docs/gpu.md, "Batch invariance"), so that
  // greedy outputs do not depend on what else runs or on speculation.
  // Slower. The CPU backend ignores it (its outputs do not change with the
  // batch: tests/actors/batch_invariance_test.cpp).
  bool batch_invariant = false;
  int64_t tensor_parallel_size = 1;
  int64_t pipeline_parallel_size = 1;
  // Pipeline stages in several processes (docs/parallelism.md): the head
  // (`troupe serve`) runs stage 0 and waits on distributed_host:port for a
  // `troupe worker --connect` per other stage; port 0: one process.
  std::string distributed_host = "127.0.0.1";
  int64_t distributed_port = 0;
  int64_t distributed_timeout = 300;  // seconds to wait for the workers (and for the head)
  // speculative_config as written (a mapping of scalars), empty when unset;
  // its typed, validated view: config/speculative_config.h.
  std::map<std::string, std::string> speculative_config;

  // LoRA (vLLM's LoRAConfig). lora_modules are loaded at start and served
  // under their names beside the base model.
  bool enable_lora = false;
  std::vector<lora_module> lora_modules;
  int64_t max_loras = 1;       // adapters one step may use (device slots)
  int64_t max_lora_rank = 16;  // one of 1, 8, 16, 32, 64, 128, 256, 320, 512
  // Adapters kept in host memory; 0: unset, max_loras (vLLM's None). Read it
  // through effective_max_cpu_loras.
  int64_t max_cpu_loras = 0;
  // /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's
  // VLLM_ALLOW_RUNTIME_LORA_UPDATING environment variable, a key here).
  bool allow_runtime_lora_updating = false;
  // Folders a runtime load_lora_adapter may read adapters from (each path
  // must lie under one once symlinks and `..` are resolved); empty: none
  // (runtime loading refuses every path; vLLM has no such guard).
  std::vector<std::string> lora_allowed_dirs;

  // Structured outputs (docs/structured_outputs.md): JSON constraints in
  // the compact form (no whitespace between tokens) rather than allowing
  // JSON's whitespace (vLLM's structured_outputs_config
  // disable_any_whitespace).
  bool structured_outputs_disable_any_whitespace = false;

  // Chat (docs/tool_calling.md). chat_template: a template replacing the
  // tokenizer's, as a file or as the template text itself (vLLM's
  // --chat-template). tool_call_parser: how tool calls are read from the
  // output (hermes | llama3_json | mistral; auto: the one the chat
  // template's tool format implies; none). enable_auto_tool_choice false
  // refuses tool_choice "auto"; "required" and named functions are served
  // with or without a parser.
  std::string chat_template;
  std::string tool_call_parser = "auto";
  bool enable_auto_tool_choice = true;

  // Not a configuration key: what the command runs the engine for. Offline
  // commands (generate, bench throughput/latency) get vLLM's larger token
  // budget by default.
  bool offline = false;

  // Server.
  std::string host = "0.0.0.0";
  int64_t port = 8000;
  std::string api_key;
  double http_read_timeout = 30;   // s to read one request (and idle keep-alive wait)
  double http_write_timeout = 30;  // s a response write may take: a client that stops
                                   // reading is cut off and its requests aborted
  double drain_timeout = 10;       // s in-flight requests may finish after SIGTERM
  int64_t num_io_threads = 0;      // 0: min(4, hardware threads)
  int64_t http_send_buffer_kib = 0;  // SO_SNDBUF of client sockets (as nginx's sndbuf);
                                     // 0: the kernel's autotuning

  // Logging.
  std::string log_level = "info";  // trace | debug | info | warn | error | off
  // Mixture-of-experts models: the periodic stats line is followed by the
  // tokens each expert was routed over the interval (load imbalance).
  bool log_expert_counts = false;
};

// Adapters kept in host memory: max_cpu_loras when set (> 0), else max_loras.
inline int64_t effective_max_cpu_loras(const engine_config& c) {
  return c.max_cpu_loras > 0 ? c.max_cpu_loras : c.max_loras;
}

}  // namespace troupe
