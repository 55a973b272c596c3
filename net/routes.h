// api_routes: the OpenAI-compatible routes without sockets. A request
// (method, target, Authorization header, body) becomes either a reply to
// write now or a prepared_generation for the session to submit to the
// engine. Every problem is an api_error reply in OpenAI's envelope; nothing
// throws. Immutable after construction; handle() is safe from any thread
// (it calls engine::stats, the tokenizer and the chat renderer, all
// thread-safe).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "actors/engine.h"
#include "config/engine_config.h"
#include "model/chat_prompt.h"
#include "net/api_error.h"
#include "net/generation.h"
#include "net/openai_request.h"

namespace troupe {

struct http_reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

http_reply error_reply(const api_error& e);

// Whether a equals b, in time that does not depend on where they differ (the
// API key comparison).
bool constant_time_equals(std::string_view a, std::string_view b);

struct prepared_choice {
  std::vector<int32_t> prompt_ids;
  sampling_params params;
  int fork_of_index = -1;  // as engine::submission
};

struct prepared_generation {
  generation_context ctx;
  std::vector<prepared_choice> choices;
};

// A reply that takes work off the HTTP thread (a runtime LoRA load reads
// the adapter from disk): the session calls `start` with where the reply
// goes; it may be called on another thread.
struct deferred_reply {
  std::function<void(std::function<void(http_reply)>)> start;
};

using route_result = std::variant<http_reply, prepared_generation, deferred_reply>;

struct http_request_view {
  std::string_view method;
  std::string_view target;
  std::string_view authorization;
  std::string_view content_type;  // "" when absent (then JSON is assumed)
  std::string_view body;
};

class api_routes {
 public:
  api_routes(engine& eng, const engine_config& config);

  route_result handle(const http_request_view& req) const;
  const std::string& served_model() const { return served_names_.front(); }

 private:
  http_reply models() const;
  http_reply metrics() const;
  http_reply tokenize(std::string_view body) const;
  http_reply detokenize(std::string_view body) const;
  route_result completions(std::string_view body) const;
  route_result chat(std::string_view body) const;
  // Runtime LoRA adapters (net/lora_routes.cpp).
  route_result load_lora(std::string_view body) const;
  http_reply unload_lora(std::string_view body) const;
  std::optional<api_error> check_model(const std::string& name) const;
  // Admission counted in sequences (prompts x n) and prompt tokens: a request
  // larger than the queue bounds is a 400, one that does not fit beside
  // what waits now a 503.
  std::optional<api_error> check_admission(const std::vector<std::vector<int32_t>>& prompts,
                                           int64_t n) const;
  std::optional<api_error> finish_params(const std::string& model, generation_request& r,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         bool chat) const;
  prepared_generation prepare(generation_kind kind, const generation_request& r,
                              std::vector<std::vector<int32_t>> prompts, bool want_logprobs) const;

  engine& engine_;
  std::shared_ptr<const tokenizer> tok_;
  std::optional<chat_renderer> renderer_;
  std::string renderer_error_;
  std::vector<std::string> served_names_;
  std::string model_root_;
  std::string api_key_;
  int64_t created_ = 0;
  bool runtime_lora_ = false;  // allow_runtime_lora_updating (with enable_lora)
  std::vector<std::string> lora_allowed_dirs_;
  // Structured outputs: JSON's whitespace allowed (not
  // structured_outputs_disable_any_whitespace), and why constraints are
  // refused ("" when served: they need a tokenizer and the sampling stage
  // in this process).
  bool any_whitespace_ = true;
  std::string structured_refusal_;
  // Tool calling (docs/tool_calling.md): the parser that reads calls from
  // the output (tool_call_parser, or the one the chat template implies),
  // and whether tool_choice "auto" is served.
  std::optional<tool_parser_kind> tool_parser_;
  bool auto_tools_ = true;
  // A chat request's tools applied to its parameters and context: the
  // constraint of a forced choice, the parser of the response.
  std::optional<api_error> apply_tools(const tool_request& tools, generation_request& r) const;
};

}  // namespace troupe
