// Benchmark metrics as pure functions, defined exactly as vLLM's
// `vllm bench serve` (vllm/benchmarks/serve.py, calculate_metrics):
//
//   TTFT  request start -> first chunk that carries tokens
//   E2EL  request start -> last chunk that carries tokens
//   ITL   every gap between consecutive token-carrying chunks (all requests)
//   TPOT  per request (E2EL - TTFT) / (output_tokens - 1), only requests with
//         more than one output token (goodput counts the others as TPOT 0)
//
// Statistics follow numpy: mean, population std (ddof 0), median and
// np.percentile's default linear interpolation; an empty list gives 0 for
// all of them (vLLM's `np.mean(x or 0)`). Times are seconds in the inputs
// and milliseconds in the summaries. No I/O, no clocks: unit-tested directly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace troupe::bench {

// np.percentile(values, p) with numpy's default ("linear") method.
// REQUIRES: `sorted` ascending and non-empty, 0 <= p <= 100.
double percentile_sorted(const std::vector<double>& sorted, double p);
// The same on unsorted values (copies and sorts); 0 when empty.
double percentile(std::vector<double> values, double p);

struct distribution {
  double mean = 0, median = 0, std = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
};
// Summary of `values` scaled by `scale` (1000: seconds -> ms).
distribution summarize(const std::vector<double>& values, const std::vector<double>& percentiles,
                       double scale);

// One request as the client saw it.
struct request_record {
  bool success = false;
  std::string error;           // why it failed ("" on success)
  double start_time = 0;       // s since the benchmark started (when it was sent)
  double queue_time = 0;       // s it waited for --max-concurrency before being sent
  double ttft = 0;             // s
  double latency = 0;          // E2EL, s
  std::vector<double> itl;     // s, one per token chunk after the first
  int64_t prompt_len = 0;      // usage.prompt_tokens when the server sent it, else the dataset's
  int64_t output_tokens = 0;   // usage.completion_tokens, else tokens counted in the stream
};

// Service-level objectives for goodput, in ms; unset ones are not checked.
struct goodput_slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};
// Parses vLLM's `--goodput ttft:MS tpot:MS e2el:MS` pairs.
result<goodput_slo> parse_goodput(const std::vector<std::string>& pairs);

// (E2EL - TTFT) / (output_tokens - 1) when output_tokens > 1, else nullopt.
std::optional<double> request_tpot(const request_record& r);
// Whether a successful request meets every SLO that is set (vLLM: slo >= value).
bool request_is_good(const request_record& r, const goodput_slo& slo);

struct serve_metrics {
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;  // over successful requests
  double duration = 0;                        // s
  double request_throughput = 0, request_goodput = 0;
  double output_throughput = 0, total_token_throughput = 0;
  double max_output_tokens_per_s = 0;  // peak over 1-s buckets of token-chunk times
  int64_t max_concurrent_requests = 0;
  distribution ttft, tpot, itl, e2el;  // ms
  std::vector<double> tpots;           // s per request, 0 where not defined (failed, <= 1 token)
  std::map<std::string, int64_t> failure_reasons;  // reason_key(error) -> count
};

serve_metrics compute_serve_metrics(const std::vector<request_record>& records, double duration_s,
                                    const std::vector<double>& percentiles, const goodput_slo& slo);

// Groups error messages that differ only in numbers: after the first ':'
// (so "HTTP 400" stays) every run of digits becomes "N", so "...maximum
// context length is 2048 tokens. However, you requested 3016 tokens" and
// "... 3005 tokens" count as one reason.
std::string reason_key(const std::string& error);

// Parses "50,90,99" (each in [0, 100]).
result<std::vector<double>> parse_percentiles(const std::string& text);
// "99", "99.9": the name vLLM gives a percentile in keys and labels.
std::string percentile_name(double p);

}  // namespace troupe::bench
