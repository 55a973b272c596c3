// chat_prompt: chat messages to prompt text, as transformers'
// apply_chat_template does it: the tokenizer's chat template rendered with
// messages, add_generation_prompt, tools (when given) and the tokenizer's
// special tokens (bos_token, eos_token, ...). The rendered text is then
// encoded without adding special tokens (the template writes them).
//
// chat_renderer is immutable after create(); render() is thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "model/chat_template/chat_template.h"
#include "model/chat_template/value.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

// Messages from JSON text: {"messages": [...]} or a bare array of messages.
// Each message must be an object with a string "role"; "content" may be a
// string, null, or a list of {"type": "text", "text": ...} parts (joined, as
// vLLM does for text-only models). An assistant message's tool_calls keep
// their shape, each function's "arguments" JSON text parsed into its value
// (templates write it with tojson, as vLLM hands it to them).
result<value> parse_chat_messages(std::string_view json);

// A chat request body's messages (as parse_chat_messages) and its tools as
// given (none when absent), for the template.
struct chat_input {
  value messages;
  value tools;
  const value* tools_or_null() const { return tools.is_none() ? nullptr : &tools; }
};
result<chat_input> parse_chat_input(std::string_view json);

class chat_renderer {
 public:
  // The tokenizer's chat template, or `template_text` when not empty (the
  // chat_template config key's text). Errors: there is none, or it does not
  // parse.
  static result<chat_renderer> create(const tokenizer& tok, const std::string& template_text = "");

  result<std::string> render(const value& messages, bool add_generation_prompt,
                             const value* tools,
                             const chat_template_render_options& options = {}) const;

 private:
  chat_renderer(chat_template tmpl, value_object specials)
      : template_(std::move(tmpl)), specials_(std::move(specials)) {}
  chat_template template_;
  value_object specials_;  // bos_token, eos_token, ... as strings
};

}  // namespace troupe
