// Reading an OpenAI-style streamed response: the server-sent-events framing
// and what each chunk says, for `bench serve`. Pure: no sockets, no clocks.
//
// A chunk "carries tokens" (and so counts for TTFT, ITL and E2EL) when its
// choices list is non-empty, as vLLM's request functions count it, with one
// exception: a chat chunk whose delta holds only the role (and empty
// content) is not counted, because some servers (troupe among them) send it
// before the prompt is processed; vLLM's own server sends it with the first
// token, where skipping it changes nothing.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::bench {

// Splits a byte stream into the data payloads of its events. Events end at
// a blank line ("\n\n"; CRs are dropped); "data:" lines are joined with
// "\n"; comments (":...") and other fields are ignored.
class sse_splitter {
 public:
  template <class F>
  void feed(std::string_view bytes, F&& on_event) {
    for (char c : bytes) {
      if (c != '\r') buf_.push_back(c);
    }
    size_t pos = 0, end;
    while ((end = buf_.find("\n\n", pos)) != std::string::npos) {
      std::string data;
      if (event_data(std::string_view(buf_).substr(pos, end - pos), data)) on_event(data);
      pos = end + 2;
    }
    buf_.erase(0, pos);
  }
  bool has_partial() const { return !buf_.empty(); }

 private:
  static bool event_data(std::string_view event, std::string& data);
  std::string buf_;
};

struct stream_chunk {
  bool done = false;        // data: [DONE]
  bool invalid = false;     // not JSON
  bool has_tokens = false;  // counts for TTFT / ITL / E2EL (see above)
  int64_t num_token_ids = -1;  // entries of choices[0].token_ids, -1: none sent
  std::optional<int64_t> completion_tokens, prompt_tokens;  // usage, when sent
  std::string finish_reason;   // "" while not finished
  std::string error;           // an in-stream {"error": ...} message
};

// `parser` is reused between calls (one per thread).
stream_chunk parse_stream_chunk(simdjson::dom::parser& parser, std::string_view payload);

// The message of an OpenAI error body ({"error": {"message": ...}}), or
// the body itself (trimmed, at most 300 bytes) when it is not one.
std::string error_body_message(simdjson::dom::parser& parser, std::string_view body);

}  // namespace troupe::bench
