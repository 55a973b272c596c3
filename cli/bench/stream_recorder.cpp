#include "cli/bench/stream_recorder.h"

namespace troupe::bench {

namespace {

double seconds(bench_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void stream_recorder::on_body(std::string_view bytes, bench_clock::time_point at,
                              simdjson::dom::parser& parser) {
  if (status_ != 200) {
    if (error_body_.size() < 65536) error_body_.append(bytes.substr(0, 65536 - error_body_.size()));
    return;
  }
  if (body_head_.size() < 200) body_head_.append(bytes.substr(0, 200 - body_head_.size()));
  splitter_.feed(bytes, [&](const std::string& payload) {
    saw_event_ = true;
    on_chunk(parse_stream_chunk(parser, payload), at);
  });
}

void stream_recorder::on_chunk(const stream_chunk& c, bench_clock::time_point at) {
  if (c.invalid && stream_error_.empty()) stream_error_ = "a stream chunk is not JSON";
  if (!c.error.empty() && stream_error_.empty()) stream_error_ = "error in the stream: " + c.error;
  if (c.has_tokens) {
    if (!first_) {
      first_ = true;
      ttft_ = seconds(at - sent_at_);
    } else {
      itl_.push_back(seconds(at - last_));
    }
    last_ = at;
    ++num_token_chunks_;
  }
  if (c.num_token_ids >= 0) {
    saw_token_ids_ = true;
    num_token_ids_ += c.num_token_ids;
  }
  if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
  if (c.completion_tokens) usage_completion_ = c.completion_tokens;
  if (c.prompt_tokens) usage_prompt_ = c.prompt_tokens;
}

request_record stream_recorder::finish(const std::string& transport_error,
                                       simdjson::dom::parser& parser) const {
  request_record r;
  r.prompt_len = usage_prompt_.value_or(dataset_prompt_len_);
  if (!transport_error.empty()) {
    r.error = transport_error;
  } else if (status_ != 200) {
    r.error = "HTTP " + std::to_string(status_) + ": " + error_body_message(parser, error_body_);
  } else if (!stream_error_.empty()) {
    r.error = stream_error_;
  } else if (!saw_event_ && !body_head_.empty()) {
    r.error = "the reply is not an event stream (does the server stream?): " + body_head_;
  } else if (!first_) {
    r.error = "no token chunk in the stream (never received a valid chunk to calculate TTFT)";
  } else if (finish_reason_ == "error" || finish_reason_ == "abort") {
    r.error = "finish_reason " + finish_reason_;
  }
  if (!r.error.empty()) return r;
  r.success = true;
  r.ttft = ttft_;
  r.latency = seconds(last_ - sent_at_);
  r.itl = itl_;
  r.output_tokens = usage_completion_.value_or(0) > 0 ? *usage_completion_
                    : saw_token_ids_                  ? num_token_ids_
                                                      : num_token_chunks_;
  return r;
}

}  // namespace troupe::bench
