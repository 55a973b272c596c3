// The results of `bench serve`: vLLM's table on stdout and the JSON file.
//
// The table has vLLM's layout (`{:<40} {:<10}` rows, 50-wide centred
// headers) and rows; the metric sections follow --percentile-metrics.
// The JSON carries every figure whatever is selected: vLLM's keys
// (duration, completed, request_throughput, mean_ttft_ms, p99_itl_ms, ...),
// the per-request arrays (input_lens, output_lens, ttfts, tpots, itls,
// e2els and vLLM's name for them, latencies, start_times, queue_times,
// errors), failures by reason, and the configuration (every flag's
// effective value, the command line, date, base URL, model).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench/bench_flags.h"
#include "cli/bench/metrics.h"

namespace troupe::bench {

struct serve_context {
  std::string date;         // ISO 8601, local time
  std::string backend;      // "openai" (completions) or "openai-chat"
  std::string base_url, endpoint, model_id, tokenizer_id, dataset;
  int64_t num_prompts = 0;
  double request_rate = 0;  // inf allowed
  double burstiness = 1;
  int64_t max_concurrency = 0;  // 0: none
  std::vector<double> percentiles;
  std::vector<std::string> percentile_metrics;  // ttft, tpot, itl, e2el
  goodput_slo slo;
  // From the server's /metrics (troupe: or vllm: prefix_cache_* counters),
  // the run's hits / queries; unset when the server exports none.
  std::optional<double> prefix_cache_hit_rate;
  std::vector<std::string> command_line;
  const flag_values* flags = nullptr;
};

void print_serve_table(std::FILE* out, const serve_context& ctx, const serve_metrics& m);
std::string serve_json(const serve_context& ctx, const serve_metrics& m,
                       const std::vector<request_record>& records);

// Python's "{s:{c}^{n}}".format(...): `s` centred in `width` with `fill`.
std::string centered(const std::string& s, size_t width, char fill);
// The local time as "2025-01-31T12:34:56".
std::string iso_date_now();
// Writes `text` to `path`; errors name the path.
status write_text_file(const std::string& path, const std::string& text);

}  // namespace troupe::bench
