// request_metrics: per-request latency and size distributions, recorded by
// the request actors as outputs pass through them and read by the server's
// /metrics route (and anyone else) as a snapshot. The buckets are vLLM's, so
// dashboards built for vLLM read troupe's histograms unchanged.
//
// Definitions (as vLLM's): time to first token = arrival (engine::submit)
// to the first output carrying tokens; inter-token latency = the gap
// between two consecutive outputs carrying tokens (one sample per output,
// however many tokens it carries); end-to-end latency = arrival to the final
// output. Thread-safe (one mutex; each record is a few increments).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

#include "actors/messages.h"

namespace troupe {

struct histogram {
  std::vector<double> upper_bounds;  // ascending; +Inf is implicit
  std::vector<int64_t> counts;       // per bucket (not cumulative), size bounds + 1
  double sum = 0.0;
  int64_t count = 0;

  histogram() = default;
  explicit histogram(std::vector<double> bounds);
  void observe(double v);
};

// vLLM's 1-2-5 series up to `max`: 1, 2, 5, 10, 20, 50, ...
std::vector<double> one_two_five_buckets(int64_t max);

struct request_metrics_snapshot {
  histogram time_to_first_token;  // seconds
  histogram inter_token_latency;  // seconds
  histogram e2e_latency;          // seconds
  histogram prompt_tokens;        // per finished request
  histogram generation_tokens;    // per finished request
  // Finished requests by reason, indexed by finish_reason (none unused).
  std::array<int64_t, 5> finished{};
};

class request_metrics {
 public:
  explicit request_metrics(int64_t max_model_len);

  void observe_first_token(double seconds);
  void observe_inter_token(double seconds);
  void observe_finished(finish_reason reason, double e2e_seconds, int64_t prompt_tokens,
                        int64_t generation_tokens);
  request_metrics_snapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  request_metrics_snapshot m_;
};

}  // namespace troupe
