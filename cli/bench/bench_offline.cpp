#include "cli/bench/bench_offline.h"
#include "cli/help.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "cli/commands.h"
#include "config/config_loader.h"

namespace troupe::bench {

namespace {

using clock = std::chrono::steady_clock;

struct batch_state {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;
  clock::time_point start;
  offline_result result;
};

class timed_sink : public request_sink {
 public:
  timed_sink(batch_state& state, size_t index) : state_(state), index_(index) {}
  void on_output(const request_output& o) override {
    const auto now = clock::now();
    std::lock_guard<std::mutex> lock(state_.mu);
    offline_result& r = state_.result;
    const double t = std::chrono::duration<double>(now - state_.start).count();
    if (!o.new_token_ids.empty() && r.output_tokens[index_] == 0) r.first_token[index_] = t;
    r.output_tokens[index_] += static_cast<int64_t>(o.new_token_ids.size());
    if (o.finish == finish_reason::none) return;
    r.finished[index_] = t;
    if (o.finish == finish_reason::error || o.finish == finish_reason::abort) {
      r.errors[index_] = o.error.empty() ? finish_reason_name(o.finish) : o.error;
    }
    if (--state_.remaining == 0) state_.cv.notify_all();
  }

 private:
  batch_state& state_;
  size_t index_;
};

}  // namespace

int64_t offline_result::num_failed() const {
  return std::count_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); });
}

int64_t offline_result::total_output_tokens() const {
  int64_t n = 0;
  for (int64_t t : output_tokens) n += t;
  return n;
}

double offline_result::batch_first_token() const {
  return first_token.empty() ? 0.0 : *std::max_element(first_token.begin(), first_token.end());
}

offline_result run_offline_batch(engine& eng, const std::vector<offline_request>& requests) {
  batch_state state;
  const size_t n = requests.size();
  state.result.first_token.assign(n, 0.0);
  state.result.finished.assign(n, 0.0);
  state.result.output_tokens.assign(n, 0);
  state.result.errors.assign(n, "");
  state.remaining = n;
  // With LoRA adapters served, the requests are spread over them uniformly
  // (request i runs adapter i mod N; docs/lora.md).
  std::vector<int64_t> adapters;
  if (const auto loras = eng.loras()) {
    for (const lora_registry::entry& e : loras->list()) adapters.push_back(e.id);
  }
  std::vector<engine::submission> batch;
  batch.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    sampling_params params = requests[i].params;
    if (!adapters.empty() && params.lora_id == 0) params.lora_id = adapters[i % adapters.size()];
    batch.push_back({requests[i].prompt_ids, params, std::make_shared<timed_sink>(state, i), -1});
  }
  state.start = clock::now();
  eng.submit_batch(std::move(batch));
  std::unique_lock<std::mutex> lock(state.mu);
  state.cv.wait(lock, [&] { return state.remaining == 0; });
  state.result.elapsed = std::chrono::duration<double>(clock::now() - state.start).count();
  return std::move(state.result);
}

double prefix_cache_hit_rate(const engine_stats& s) {
  return s.prefix_cache_queries > 0
             ? static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries)
             : 0.0;
}

offline_setup start_offline(const std::vector<std::string>& args, const std::vector<flag_spec>& specs,
                            const char* command) {
  offline_setup s;
  if (show_help(args, std::string("usage: troupe bench ") + command +
                          " --model DIR [--config FILE] [options]   (docs/bench.md)",
                as_command_flags(specs), true)) {
    s.exit_code = -1;  // done: exit 0
    return s;
  }
  auto parsed = parse_args(args, as_command_flags(specs));
  if (!parsed) {
    print_error(parsed.error_message());
    s.exit_code = 2;
    return s;
  }
  s.config = parsed->config;
  s.config.offline = true;  // vLLM's offline (LLM class) batch defaults
  s.config_file = parsed->config_file;
  s.flags = flags_from_rest(parsed->rest, specs);
  if (!prepare_command(s.config, s.setup)) {
    s.exit_code = 2;
    return s;
  }
  std::fprintf(stderr, "bench %s: loading %s\n", command, s.config.model.c_str());
  auto eng = engine::create(s.config, s.setup.tok);
  if (!eng) {
    print_error(eng.error_message());
    s.exit_code = 1;
    return s;
  }
  s.eng = std::move(eng.value());
  return s;
}

void write_engine_settings(json_writer& w, const offline_setup& s, const std::vector<std::string>& argv) {
  const engine_limits& l = s.eng->limits();
  const engine_config& c = s.config;
  w.key("command_line").array(argv);
  w.key("config_file").value(s.config_file);
  w.key("engine").begin_object();
  w.key("model").value(c.model);
  w.key("backend").value(l.backend);
  w.key("dtype").value(c.dtype);
  w.key("load_format").value(c.load_format);
  w.key("seed").value(c.seed);
  w.key("max_model_len").value(l.max_model_len);
  w.key("block_size").value(l.block_size);
  w.key("num_gpu_blocks").value(l.num_blocks - 1);
  w.key("max_num_seqs").value(l.max_num_seqs);
  w.key("max_num_batched_tokens").value(l.max_num_batched_tokens);
  w.key("enable_prefix_caching").value(c.enable_prefix_caching);
  w.key("enable_chunked_prefill").value(c.enable_chunked_prefill);
  w.key("enforce_eager").value(c.enforce_eager);
  w.key("async_scheduling").value(c.async_scheduling);
  w.key("batch_invariant").value(c.batch_invariant);
  w.key("kv_admission").value(c.kv_admission);
  w.end_object();
  w.key("flags").begin_object();
  for (const auto& [name, values] : s.flags.effective()) {
    w.key(name);
    if (values.size() == 1) w.value(values.front()); else w.array(values);
  }
  w.end_object();
}

}  // namespace troupe::bench
