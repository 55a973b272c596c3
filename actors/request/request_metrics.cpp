#include "actors/request/request_metrics.h"

#include <algorithm>

namespace troupe {

histogram::histogram(std::vector<double> bounds)
    : upper_bounds(std::move(bounds)), counts(upper_bounds.size() + 1, 0) {}

void histogram::observe(double v) {
  const auto it = std::lower_bound(upper_bounds.begin(), upper_bounds.end(), v);
  ++counts[static_cast<size_t>(it - upper_bounds.begin())];
  sum += v;
  ++count;
}

std::vector<double> one_two_five_buckets(int64_t max) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max) return out;
      out.push_back(static_cast<double>(m * scale));
    }
  }
}

request_metrics::request_metrics(int64_t max_model_len) {
  // vllm/v1/metrics/loggers.py
  m_.time_to_first_token = histogram({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                      0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                                      640.0, 2560.0});
  m_.inter_token_latency = histogram({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                      0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0});
  m_.e2e_latency = histogram({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                              40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0});
  m_.prompt_tokens = histogram(one_two_five_buckets(max_model_len));
  m_.generation_tokens = histogram(one_two_five_buckets(max_model_len));
}

void request_metrics::observe_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  m_.time_to_first_token.observe(seconds);
}

void request_metrics::observe_inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  m_.inter_token_latency.observe(seconds);
}

void request_metrics::observe_finished(finish_reason reason, double e2e_seconds,
                                       int64_t prompt_tokens, int64_t generation_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  m_.e2e_latency.observe(e2e_seconds);
  m_.prompt_tokens.observe(static_cast<double>(prompt_tokens));
  m_.generation_tokens.observe(static_cast<double>(generation_tokens));
  ++m_.finished[static_cast<size_t>(reason)];
}

request_metrics_snapshot request_metrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return m_;
}

}  // namespace troupe
