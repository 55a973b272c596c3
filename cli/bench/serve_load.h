// The load generator of `bench serve`: sends pre-serialized requests at
// their arrival times (arrivals.h), at most `max_concurrency` in flight
// (later arrivals wait in order; their wait is the record's queue_time, as
// vLLM's semaphore), and records each one (stream_recorder.h). Everything
// runs on one thread and one io_context: request bodies are built before
// the clock starts, the per-chunk work is a parse of a small JSON, so the
// client keeps thousands of requests in flight without being the
// bottleneck.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench/metrics.h"
#include "cli/bench/serve_client.h"

namespace troupe::bench {

struct load_request {
  std::shared_ptr<const std::string> http_request;  // build_request's bytes
  int64_t prompt_len = 0;                            // the dataset's count
};

struct load_options {
  std::vector<double> arrivals;  // s from the start, one per request
  int64_t max_concurrency = 0;   // 0: no limit
  std::chrono::seconds timeout{6 * 3600};
  bool progress = true;
  std::string label = "bench";
};

struct load_result {
  std::vector<request_record> records;  // in request order
  double duration = 0;                  // s, first arrival wait included (as vLLM)
};

// Fails only when the host cannot be resolved; request failures are records.
result<load_result> run_load(const http_endpoint& ep, const std::vector<load_request>& requests,
                             const load_options& opts);

}  // namespace troupe::bench
