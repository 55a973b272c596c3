// openai_request: request bodies of the OpenAI-compatible routes parsed with
// simdjson into typed requests. Wrong JSON, wrong types, unsupported and
// unknown fields come back as an api_error (400) naming the field
// ("max_tokens: expected an integer", "max_token: unknown field (did you
// mean 'max_tokens'?)"); OpenAI's optional hints troupe does not act on
// (user; on chat store, metadata, service_tier, reasoning_effort, text
// modalities) are accepted. Sampling values are range-checked later
// (validate_sampling_params).
// Stateless; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/sampling_params.h"
#include "net/api_error.h"
#include "net/tool_request.h"

namespace troupe {

// What /v1/completions and /v1/chat/completions share.
struct generation_request {
  std::string model;                  // "" when absent
  std::optional<int64_t> max_tokens;  // absent: route default
  sampling_params params;             // max_tokens not yet applied
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;
  // vLLM's prompt_logprobs as asked (-1: not asked). params.prompt_logprobs
  // may be larger: echo with logprobs needs them too.
  int32_t prompt_logprobs = -1;
  // vLLM's bad_words, tokenized by the route into params.bad_words_ids.
  std::vector<std::string> bad_words;
  std::string user;  // OpenAI's end-user id: accepted, not used
};

struct completion_request {
  generation_request common;
  bool prompt_is_text = false;
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> id_prompts;
  bool echo = false;
};

struct chat_request {
  generation_request common;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool add_generation_prompt = true;
  tool_request tools;  // tools, tool_choice, parallel_tool_calls
  // The messages (and the tools for the template) are parsed from the same
  // body by parse_chat_input.
};

struct tokenize_request {
  std::string model;
  bool has_messages = false;  // then the body's messages are rendered
  std::string prompt;
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
};

struct detokenize_request {
  std::string model;
  std::vector<int32_t> tokens;
};

template <class T>
using parse_result = std::variant<T, api_error>;

parse_result<completion_request> parse_completion_request(std::string_view body);
parse_result<chat_request> parse_chat_request(std::string_view body);
parse_result<tokenize_request> parse_tokenize_request(std::string_view body);
parse_result<detokenize_request> parse_detokenize_request(std::string_view body);

}  // namespace troupe
