// What one streamed request measured: fed the response status and body
// bytes with their arrival times, it produces the request_record (see
// metrics.h for the definitions). No sockets: unit-tested with made-up
// bytes and times.
//
// A request fails on a transport error, an HTTP status other than 200
// ("HTTP 400: <the error envelope's message>"), an in-stream error object,
// a chunk that is not JSON, finish_reason "error" or "abort", or a stream
// without any token chunk (vLLM: "Never received a valid chunk"). Output
// tokens: the usage chunk's completion_tokens when the server sent one,
// else the token_ids the chunks carried, else the number of token chunks.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

#include "cli/bench/metrics.h"
#include "cli/bench/serve_client.h"
#include "cli/bench/sse.h"

namespace troupe::bench {

class stream_recorder {
 public:
  stream_recorder(bench_clock::time_point sent_at, int64_t dataset_prompt_len)
      : sent_at_(sent_at), dataset_prompt_len_(dataset_prompt_len) {}

  void on_status(int status) { status_ = status; }
  void on_body(std::string_view bytes, bench_clock::time_point at, simdjson::dom::parser& parser);
  // `transport_error`: "" when the response was read to its end.
  request_record finish(const std::string& transport_error, simdjson::dom::parser& parser) const;

 private:
  void on_chunk(const stream_chunk& c, bench_clock::time_point at);

  bench_clock::time_point sent_at_;
  int64_t dataset_prompt_len_;
  int status_ = 0;
  sse_splitter splitter_;
  std::string error_body_;  // non-200 responses, first 64 KiB
  std::string body_head_;   // 200 responses, first 200 bytes (to name a non-stream reply)
  bool saw_event_ = false;
  std::string stream_error_;
  std::string finish_reason_;
  bool first_ = false;
  bench_clock::time_point last_{};
  double ttft_ = 0;
  std::vector<double> itl_;
  int64_t num_token_chunks_ = 0;
  int64_t num_token_ids_ = 0;
  bool saw_token_ids_ = false;
  std::optional<int64_t> usage_completion_, usage_prompt_;
};

}  // namespace troupe::bench
