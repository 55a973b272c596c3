// generation: one OpenAI generation request (completions or chat) while the
// engine runs it: collects each choice's outputs and turns them into either
// SSE chunks (stream) or the final response body. Knows nothing of sockets
// or actors: the session feeds it outputs on its strand and writes what it
// returns. Not thread-safe; one owner (the session's strand).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "model/tokenizer/tokenizer.h"
#include "net/api_error.h"
#include "net/tool_parser.h"

namespace troupe {

enum class generation_kind { completion, chat };

struct generation_context {
  generation_kind kind = generation_kind::completion;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;  // as served
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;
  bool want_logprobs = false;
  // One entry per choice, in choice order (choice = prompt * n + sample).
  std::vector<std::vector<int32_t>> choice_prompt_ids;
  std::vector<bool> choice_counts_prompt;  // first sample of each prompt
  std::shared_ptr<const tokenizer> tok;    // null: outputs are token ids only
  // Completions' echo: each choice's text (and logprobs, when asked) starts
  // with its prompt; choice_prompt_text holds the prompt as text.
  bool echo = false;
  std::vector<std::string> choice_prompt_text;
  // echo with max_tokens 0 (lm-eval's log-likelihood requests): the engine
  // samples one token, which no choice shows; finish_reason "length".
  bool echo_only = false;
  // vLLM's prompt_logprobs: completions choices (chat: the response) carry
  // `prompt_logprobs` ([null, {id: {logprob, rank, decoded_token}}, ...]).
  bool return_prompt_logprobs = false;
  // Chat with tools (net/tool_request.h): how each choice's text is read
  // for calls; nullopt: it is not. The response then carries
  // message.tool_calls (stream: delta.tool_calls) and finish_reason
  // "tool_calls" when a call was made.
  std::optional<tool_call_stream> tool_calls;
};

class generation {
 public:
  explicit generation(generation_context ctx);

  // SSE bytes that open the stream (chat: a role chunk per choice).
  std::string stream_start();
  // Applies one output of `choice`. In stream mode returns the SSE bytes to
  // send (the final ones include the usage chunk and [DONE]).
  std::string on_output(size_t choice, const request_output& out);
  bool done() const { return num_finished_ == choices_.size(); }
  // REQUIRES: done() and !stream. The response body.
  std::string response_body() const;
  // The first error output, if any ("" when none), as the error a
  // response gets: 503 when the engine's workers are gone, else 400.
  const std::string& first_error() const { return first_error_; }
  api_error first_error_reply() const {
    return {first_error_unavailable_ ? 503 : 400, first_error_, ""};
  }
  size_t num_choices() const { return choices_.size(); }
  const std::string& id() const { return ctx_.id; }
  // One line for the log, bounded whatever n is:
  // "req=<id> chat n=3 prompt=12 completion=40 finish=length:2,stop".
  std::string summary() const;

 private:
  struct choice_state {
    std::vector<int32_t> token_ids;
    std::string text;
    std::vector<token_logprobs> logprobs;
    finish_reason finish = finish_reason::none;
    std::string stop_reason;
    int64_t text_offset = 0;  // completions logprobs text_offset so far
    std::vector<token_logprobs> prompt_logprobs;  // prompt positions 1.. (as computed)
    bool echoed = false;  // stream: the prompt went out with the first chunk
    std::optional<tool_call_stream> tools;  // ctx_.tool_calls' copy
  };
  // tools: the choice's content and call deltas (chat with tools), else
  // out.text is the content.
  std::string chunk(size_t choice, const request_output& out, const tool_stream_delta* tools);
  // finish_reason's name: "tool_calls" for a choice that stopped after
  // making calls (its reader's final calls).
  const char* finish_name(const choice_state& c, finish_reason r) const;
  void write_usage(class json_writer& w) const;
  // `lps`, preceded with echo by the prompt: a first token without logprobs
  // (`first_prompt_token`, -1: none) and the prompt logprobs.
  void write_logprobs(class json_writer& w, const std::vector<token_logprobs>& lps,
                      int64_t& text_offset, int32_t first_prompt_token = -1,
                      const std::vector<token_logprobs>* prompt_lps = nullptr) const;
  void write_prompt_logprobs(class json_writer& w, size_t choice) const;
  std::string token_text(int32_t id) const;

  generation_context ctx_;
  std::vector<choice_state> choices_;
  size_t num_finished_ = 0;
  std::string first_error_;
  bool first_error_unavailable_ = false;
  bool unavailable_sent_ = false;  // stream: the 503 envelope went out
};

// "stop", "length", "abort", "error"; null when none.
const char* openai_finish_reason(finish_reason r);

}  // namespace troupe
