// Validating an engine_config: every problem, each "key: message", in schema
// order. Checks are grouped by the schema's sections; each quotes the
// offending value so the user can find it in their file or command line.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <initializer_list>
#include <set>
#include <utility>

#include "config/config_loader.h"
#include "config/speculative_config.h"

namespace troupe {
namespace {

using problem_list = std::vector<std::string>;

// Shortest text that reads back as `v` ("1.5", "0", "2").
std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

std::string join(std::initializer_list<const char*> items) {
  std::string s;
  for (const char* item : items) s += (s.empty() ? "" : ", ") + std::string(item);
  return s;
}

// True when `value` is one of `options`; otherwise records the problem.
bool check_one_of(const std::string& key, const std::string& value,
                  std::initializer_list<const char*> options, problem_list& out) {
  if (std::find(options.begin(), options.end(), value) != options.end()) return true;
  out.push_back(key + ": '" + value + "' is not one of " + join(options));
  return false;
}

bool check_at_least_one(const std::string& key, int64_t value, problem_list& out) {
  if (value >= 1) return true;
  out.push_back(key + ": " + std::to_string(value) + " must be >= 1");
  return false;
}

void check_model_section(const engine_config& c, const model_config* model,
                         problem_list& out) {
  if (c.model.empty()) out.push_back("model: required (a folder with config.json)");
  for (size_t i = 0; i < c.served_model_name.size(); ++i) {
    if (c.served_model_name[i].empty()) {
      out.push_back("served_model_name[" + std::to_string(i) + "]: must not be empty");
    }
  }
  if (check_one_of("backend", c.backend, {"auto", "cpu", "cuda"}, out) && c.backend == "cuda" &&
      !cuda_backend_built()) {
    out.push_back("backend: 'cuda' is not available (this build has no CUDA backend: build "
                  "where nvcc exists, -DTROUPE_CUDA=ON)");
  }
  if (check_one_of("dtype", c.dtype, {"auto", "float32", "bfloat16", "float16"}, out) &&
      (c.dtype == "bfloat16" || c.dtype == "float16") &&
      (c.backend == "cpu" || !cuda_backend_built())) {
    out.push_back("dtype: '" + c.dtype + "' is not supported by the cpu backend (float32 only)");
  }
  check_one_of("load_format", c.load_format, {"auto", "dummy"}, out);
  if (!c.quantization.empty()) {
    const quant_config none;
    auto q = resolve_quantization(c.quantization, model != nullptr ? model->quantization : none,
                                  model == nullptr || c.load_format == "dummy");
    if (!q) out.push_back(q.error_message());
  }
  if (!chat_template_is_inline(c.chat_template) && !std::ifstream(c.chat_template)) {
    out.push_back("chat_template: '" + c.chat_template + "' is neither a readable file nor a template");
  }
  check_one_of("tool_call_parser", c.tool_call_parser, {"auto", "none", "hermes", "llama3_json", "mistral"}, out);
  if (c.max_model_len && check_at_least_one("max_model_len", *c.max_model_len, out) && model &&
      model->max_position_embeddings > 0 && *c.max_model_len > model->max_position_embeddings) {
    out.push_back("max_model_len: " + std::to_string(*c.max_model_len) +
                  " exceeds the model's max_position_embeddings " +
                  std::to_string(model->max_position_embeddings));
  }
}

void check_kv_cache_section(const engine_config& c, problem_list& out) {
  const int64_t b = c.block_size;
  if (b < 8 || b > 128 || (b & (b - 1)) != 0) {
    out.push_back("block_size: " + std::to_string(b) + " must be a power of two in 8..128");
  }
  if (!(c.cpu_offload_gb >= 0 && c.cpu_offload_gb <= 1048576)) {
    out.push_back("cpu_offload_gb: " + number_text(c.cpu_offload_gb) + " must be 0 or more (GiB), at most 1048576");
  }
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1)) {
    out.push_back("gpu_memory_utilization: " + number_text(c.gpu_memory_utilization) +
                  " must be in (0, 1]");
  }
  if (c.num_gpu_blocks_override) {
    check_at_least_one("num_gpu_blocks_override", *c.num_gpu_blocks_override, out);
  }
  if (c.swap_space < 0) {
    out.push_back("swap_space: " + number_text(c.swap_space) + " must be >= 0");
  }
  if (!(c.cpu_kvcache_space > 0)) {
    out.push_back("cpu_kvcache_space: " + number_text(c.cpu_kvcache_space) + " must be > 0");
  }
  if (c.kv_cache_dtype == "fp8_e5m2") {
    out.push_back("kv_cache_dtype: 'fp8_e5m2' is not supported (fp8 / fp8_e4m3: float8 e4m3 with per-layer "
                  "scales, as vLLM's default FP8 cache)");
  } else {
    check_one_of("kv_cache_dtype", c.kv_cache_dtype, {"auto", "fp8", "fp8_e4m3"}, out);
  }
}

void check_scheduler_section(const engine_config& c, const model_config* model,
                             problem_list& out) {
  // Unset values are the engine's to choose (engine_batch_defaults).
  const bool seqs_ok =
      c.max_num_seqs && check_at_least_one("max_num_seqs", *c.max_num_seqs, out);
  const bool tokens_ok = c.max_num_batched_tokens &&
                         check_at_least_one("max_num_batched_tokens", *c.max_num_batched_tokens, out);
  const std::string tokens = tokens_ok ? std::to_string(*c.max_num_batched_tokens) : "";
  if (seqs_ok && tokens_ok && *c.max_num_batched_tokens < *c.max_num_seqs) {
    out.push_back("max_num_batched_tokens: " + tokens + " is smaller than max_num_seqs " +
                  std::to_string(*c.max_num_seqs));
  }
  int64_t max_model_len = 0;  // 0: not known
  if (c.max_model_len) max_model_len = *c.max_model_len;
  else if (model) max_model_len = model->max_position_embeddings;
  if (tokens_ok && !c.enable_chunked_prefill && max_model_len > 0 &&
      *c.max_num_batched_tokens < max_model_len) {
    out.push_back("max_num_batched_tokens: " + tokens + " is smaller than max_model_len " +
                  std::to_string(max_model_len) + " and enable_chunked_prefill is false");
  }
  check_one_of("scheduling_policy", c.scheduling_policy, {"fcfs", "priority"}, out);
  check_one_of("kv_admission", c.kv_admission, {"reserve", "chunk"}, out);
  if (c.max_num_seqs_per_request &&
      check_at_least_one("max_num_seqs_per_request", *c.max_num_seqs_per_request, out) &&
      seqs_ok && *c.max_num_seqs_per_request > *c.max_num_seqs) {
    out.push_back("max_num_seqs_per_request: " + std::to_string(*c.max_num_seqs_per_request) +
                  " is larger than max_num_seqs " + std::to_string(*c.max_num_seqs));
  }
  check_at_least_one("max_n", c.max_n, out);
  if (c.max_waiting_seqs) check_at_least_one("max_waiting_seqs", *c.max_waiting_seqs, out);
  if (c.max_waiting_tokens) check_at_least_one("max_waiting_tokens", *c.max_waiting_tokens, out);
}

void check_execution_section(const engine_config& c, problem_list& out) {
  // Any T runs (heads that T does not divide are padded: model/tp_layout.h).
  for (const auto& [key, size] : {std::pair<const char*, int64_t>{"tensor_parallel_size",
                                                                 c.tensor_parallel_size},
                                  {"pipeline_parallel_size", c.pipeline_parallel_size}}) {
    if (check_at_least_one(key, size, out) && size > 1 && c.enable_lora) {
      out.push_back(std::string(key) + ": " + std::to_string(size) +
                    " with enable_lora is not supported yet (LoRA runs with " + key + " 1)");
    }
  }
  if (c.batch_invariant && c.enable_lora) {
    out.push_back("batch_invariant: not supported with enable_lora (the LoRA kernels' form "
                  "depends on the step's tokens)");
  }
  if (c.batch_invariant && c.tensor_parallel_size > 1) {
    out.push_back("batch_invariant: not supported with tensor_parallel_size " +
                  std::to_string(c.tensor_parallel_size) +
                  " (NCCL's all-reduce picks its algorithm by the step's size)");
  }
  if (c.distributed_port < 0 || c.distributed_port > 65535) {
    out.push_back("distributed_port: " + std::to_string(c.distributed_port) +
                  " is not a TCP port (0..65535; 0: one process)");
  } else if (c.distributed_port > 0 && c.pipeline_parallel_size < 2) {
    out.push_back("distributed_port: the head runs pipeline stage 0 and waits for a worker per "
                  "other stage, and pipeline_parallel_size is " +
                  std::to_string(c.pipeline_parallel_size));
  }
  check_at_least_one("distributed_timeout", c.distributed_timeout, out);
  parse_speculative_config(c.speculative_config, out);
}

void check_lora_section(const engine_config& c, problem_list& out) {
  if (!c.lora_modules.empty() && !c.enable_lora) {
    out.push_back("lora_modules: requires enable_lora: true");
  }
  // The names the base model is served under (served_model_name, else model).
  const std::vector<std::string> base_names =
      c.served_model_name.empty() ? std::vector<std::string>{c.model} : c.served_model_name;
  std::set<std::string> seen, listed_twice;
  for (size_t i = 0; i < c.lora_modules.size(); ++i) {
    const lora_module& m = c.lora_modules[i];
    const std::string at = "lora_modules[" + std::to_string(i) + "]: ";
    if (m.name.empty() && m.path.empty()) {
      out.push_back(at + "needs a name and a path");
    } else if (m.name.empty()) {
      out.push_back(at + "needs a name (path '" + m.path + "')");
    } else if (m.path.empty()) {
      out.push_back(at + "'" + m.name + "' needs a path");
    }
    if (m.name.empty()) continue;
    if (std::find(base_names.begin(), base_names.end(), m.name) != base_names.end()) {
      out.push_back(at + "name '" + m.name + "' is the base model's served name");
    }
    if (!seen.insert(m.name).second && listed_twice.insert(m.name).second) {
      out.push_back("lora_modules: '" + m.name + "' is listed twice");
    }
  }
  const bool max_loras_ok = check_at_least_one("max_loras", c.max_loras, out);
  static const int64_t ranks[] = {1, 8, 16, 32, 64, 128, 256, 320, 512};
  if (std::find(std::begin(ranks), std::end(ranks), c.max_lora_rank) == std::end(ranks)) {
    out.push_back("max_lora_rank: " + std::to_string(c.max_lora_rank) +
                  " is not one of 1, 8, 16, 32, 64, 128, 256, 320, 512");
  }
  if (c.max_cpu_loras < 0) {
    out.push_back("max_cpu_loras: " + std::to_string(c.max_cpu_loras) +
                  " must be >= 0 (0: max_loras)");
  } else if (c.max_cpu_loras > 0 && max_loras_ok && c.max_cpu_loras < c.max_loras) {
    out.push_back("max_cpu_loras: max_cpu_loras (" + std::to_string(c.max_cpu_loras) +
                  ") must be >= max_loras (" + std::to_string(c.max_loras) + ")");
  }
  if (c.allow_runtime_lora_updating && !c.enable_lora) {
    out.push_back("allow_runtime_lora_updating: requires enable_lora: true");
  }
  for (size_t i = 0; i < c.lora_allowed_dirs.size(); ++i) {
    if (c.lora_allowed_dirs[i].empty()) {
      out.push_back("lora_allowed_dirs[" + std::to_string(i) + "]: must not be empty");
    }
  }
}

void check_server_section(const engine_config& c, problem_list& out) {
  if (c.host.empty()) out.push_back("host: must not be empty");
  if (c.port < 1 || c.port > 65535) {
    out.push_back("port: " + std::to_string(c.port) + " must be in 1..65535");
  }
  for (const auto& [key, v] : {std::pair<const char*, double>{"http_read_timeout", c.http_read_timeout},
                               {"http_write_timeout", c.http_write_timeout},
                               {"drain_timeout", c.drain_timeout}}) {
    if (!(v > 0) || v > 86400) out.push_back(std::string(key) + ": " + number_text(v) + " must be in (0, 86400] seconds");
  }
  if (c.http_send_buffer_kib < 0 || c.http_send_buffer_kib > (1 << 20)) {
    out.push_back("http_send_buffer_kib: " + std::to_string(c.http_send_buffer_kib) +
                  " must be in 0..1048576 (0: the kernel's default)");
  }
  if (c.num_io_threads < 0 || c.num_io_threads > 256) {
    out.push_back("num_io_threads: " + std::to_string(c.num_io_threads) + " must be in 0..256 (0: automatic)");
  }
  check_one_of("log_level", c.log_level, {"trace", "debug", "info", "warn", "error", "off"}, out);
}

}  // namespace

std::vector<std::string> validate_config(const engine_config& config,
                                         const model_config* model) {
  problem_list out;
  check_model_section(config, model, out);
  check_kv_cache_section(config, out);
  check_scheduler_section(config, model, out);
  check_execution_section(config, out);
  check_lora_section(config, out);
  check_server_section(config, out);
  return out;
}

status apply_quantization(const engine_config& config, model_config& model) {
  auto q = resolve_quantization(config.quantization, model.quantization, config.load_format == "dummy");
  if (!q) return std::move(q).take_error();
  model.quantization = q.value();
  return {};
}

result<model_config> load_engine_model(const engine_config& config) {
  auto model = load_model_config(config.model);
  if (!model) return model;
  if (status s = apply_quantization(config, *model); !s.ok()) return std::move(s).take_error();
  return model;
}

std::string format_config_problems(const std::vector<std::string>& problems) {
  std::string s = "invalid configuration (" + std::to_string(problems.size()) +
                  (problems.size() == 1 ? " problem):" : " problems):");
  for (const std::string& p : problems) s += "\n  - " + p;
  return s;
}

bool cuda_backend_built() {
#ifdef TROUPE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

batch_defaults engine_batch_defaults(const engine_config& c, bool cuda, int64_t device_bytes,
                                     const std::string& device_name) {
  std::string name = device_name;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const bool big_gpu = cuda && device_bytes >= (int64_t{70} << 30) &&
                       name.find("a100") == std::string::npos;
  batch_defaults d{};
  d.max_num_seqs = big_gpu ? 1024 : 256;
  d.max_num_batched_tokens =
      big_gpu ? (c.offline ? 16384 : 8192) : (cuda && c.offline ? 8192 : 2048);
  if (c.max_num_seqs) d.max_num_seqs = *c.max_num_seqs;
  if (c.max_num_batched_tokens) {
    d.max_num_batched_tokens = *c.max_num_batched_tokens;
    if (!c.max_num_seqs) d.max_num_seqs = std::min(d.max_num_seqs, d.max_num_batched_tokens);
  } else if (c.max_num_seqs) {
    d.max_num_batched_tokens = std::max(d.max_num_batched_tokens, *c.max_num_seqs);
  }
  // Without chunked prefill a whole prompt must fit one step (as vLLM).
  if (!c.max_num_batched_tokens && !c.enable_chunked_prefill && c.max_model_len) {
    d.max_num_batched_tokens = std::max(d.max_num_batched_tokens, *c.max_model_len);
  }
  return d;
}

}  // namespace troupe
