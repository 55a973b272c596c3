#include "net/prometheus.h"

#include <charconv>
#include <ctime>

namespace troupe {

namespace {

std::string number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

class page {
 public:
  explicit page(const std::string& model) : label_("model_name=\"" + escape(model) + "\"") {}

  void header(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP troupe:") + name + " " + help + "\n";
    out_ += std::string("# TYPE troupe:") + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& extra_labels, const std::string& value) {
    out_ += "troupe:" + name + "{" + label_ + extra_labels + "} " + value + "\n";
  }
  void gauge(const char* name, const char* help, double v) {
    header(name, "gauge", help);
    sample(name, "", number(v));
  }
  void counter(const char* name, const char* help, int64_t v) {
    header(name, "counter", help);
    sample(name, "", std::to_string(v));
  }
  void hist(const char* name, const char* help, const histogram& h) {
    header(name, "histogram", help);
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
      cumulative += h.counts[i];
      sample(std::string(name) + "_bucket", ",le=\"" + number(h.upper_bounds[i]) + "\"",
             std::to_string(cumulative));
    }
    sample(std::string(name) + "_bucket", ",le=\"+Inf\"", std::to_string(h.count));
    sample(std::string(name) + "_sum", "", number(h.sum));
    sample(std::string(name) + "_count", "", std::to_string(h.count));
  }
  std::string take() { return std::move(out_); }

  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') { out += "\\n"; continue; }
      out += c;
    }
    return out;
  }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const std::string& model_name, const engine_stats& s,
                              const request_metrics_snapshot& r,
                              const std::map<int64_t, std::string>& lora_names) {
  page p(model_name);
  // The null block is never free; it is not usage.
  const int64_t used = s.num_blocks_total - s.num_blocks_free - 1;
  const double kv_usage =
      s.num_blocks_total > 1 && used > 0 ? double(used) / double(s.num_blocks_total - 1) : 0.0;
  const double hit_rate = s.prefix_cache_queries > 0
                              ? double(s.prefix_cache_hits) / double(s.prefix_cache_queries)
                              : 0.0;
  p.gauge("num_requests_running", "Number of requests in model execution batches.", double(s.num_running));
  p.gauge("num_requests_waiting", "Number of requests waiting to be processed.", double(s.num_waiting));
  p.gauge("num_requests_swapped", "Number of requests swapped to CPU.", double(s.num_swapped));
  p.gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage);
  p.gauge("prefix_cache_hit_rate", "Prefix-cache hit rate over all queries so far (tokens).", hit_rate);
  p.counter("prefix_cache_queries_total", "Prefix-cache queries, in number of queried tokens.",
            s.prefix_cache_queries);
  p.counter("prefix_cache_hits_total", "Prefix-cache hits, in number of cached tokens.",
            s.prefix_cache_hits);
  p.counter("num_preemptions_total", "Cumulative number of preemptions.", s.num_preemptions);
  p.counter("num_preempted_tokens_recomputed_total",
            "Computed tokens thrown away by preemptions by recompute (to compute again).",
            s.num_recomputed_tokens);
  p.counter("num_swap_outs_total", "Preemptions by swap to host memory.", s.num_swap_outs);
  p.counter("kv_swap_out_bytes_total", "KV cache bytes copied to host memory by swap-outs.",
            s.num_blocks_swapped_out * s.kv_bytes_per_block);
  p.counter("kv_swap_in_bytes_total", "KV cache bytes copied back from host memory by swap-ins.",
            s.num_blocks_swapped_in * s.kv_bytes_per_block);
  p.header("preempted_seconds_total", "counter",
           "Seconds requests spent preempted, from each preemption until admitted again.");
  p.sample("preempted_seconds_total", "", number(s.preempted_seconds));
  p.counter("prompt_tokens_total", "Number of prefill tokens processed.", s.num_prompt_tokens);
  p.counter("generation_tokens_total", "Number of generation tokens processed.", s.num_generated_tokens);
  p.header("request_success_total", "counter", "Count of finished requests by finish reason.");
  for (finish_reason reason : {finish_reason::stop, finish_reason::length, finish_reason::abort,
                               finish_reason::error}) {
    p.sample("request_success_total",
             std::string(",finished_reason=\"") + finish_reason_name(reason) + "\"",
             std::to_string(r.finished[static_cast<size_t>(reason)]));
  }
  if (!s.spec_accepted_per_pos.empty()) {  // speculative decoding is on (vLLM's names)
    p.counter("spec_decode_num_drafts_total", "Number of spec decoding drafts.", s.spec_num_drafts);
    p.counter("spec_decode_num_draft_tokens_total", "Number of draft tokens.",
              s.spec_num_draft_tokens);
    p.counter("spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
              s.spec_num_accepted_tokens);
    p.header("spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Accepted tokens per draft position.");
    for (size_t pos = 0; pos < s.spec_accepted_per_pos.size(); ++pos) {
      p.sample("spec_decode_num_accepted_tokens_per_pos_total",
               ",position=\"" + std::to_string(pos) + "\"",
               std::to_string(s.spec_accepted_per_pos[pos]));
    }
  }
  p.hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         r.time_to_first_token);
  p.hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
         r.inter_token_latency);
  p.hist("e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
         r.e2e_latency);
  p.hist("request_prompt_tokens", "Number of prefill tokens processed.", r.prompt_tokens);
  p.hist("request_generation_tokens", "Number of generation tokens processed.", r.generation_tokens);
  if (s.block_size > 0) {  // vLLM's cache_config_info: the configuration in its labels, value 1
    p.header("cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.");
    p.sample("cache_config_info",
             ",block_size=\"" + std::to_string(s.block_size) + "\",cache_dtype=\"" + page::escape(s.kv_cache_dtype) +
                 "\",enable_prefix_caching=\"" + (s.enable_prefix_caching ? "True" : "False") +
                 "\",num_cpu_blocks=\"" + std::to_string(s.num_cpu_blocks_total) + "\",num_gpu_blocks=\"" +
                 std::to_string(s.num_blocks_total) + "\"",
             "1");
  }
  if (s.max_loras > 0) {  // vLLM's lora_requests_info: the state in its labels
    auto names = [&](const std::vector<int64_t>& ids) {
      std::string out;
      for (int64_t id : ids) {
        auto it = lora_names.find(id);
        out += (out.empty() ? "" : ",") + (it != lora_names.end() ? it->second : std::to_string(id));
      }
      return page::escape(out);
    };
    p.header("lora_requests_info", "gauge", "Running stats on lora requests.");
    p.sample("lora_requests_info",
             ",max_lora=\"" + std::to_string(s.max_loras) + "\",running_lora_adapters=\"" +
                 names(s.running_lora_ids) + "\",waiting_lora_adapters=\"" + names(s.waiting_lora_ids) + "\"",
             number(static_cast<double>(std::time(nullptr))));
  }
  return p.take();
}

}  // namespace troupe
