// libFuzzer target for the request bodies of `troupe serve`. The first byte
// picks the route ('0' completions, '1' chat, '2' tokenize, '3' detokenize,
// '4' chat messages alone, '5' a model's output read for tool calls; every
// byte maps to one), the rest is the body, parsed as the route parses it
// (net/routes.cpp, net/generation_routes.cpp, net/tool_parser.h).
// Every call must give a typed request or an error: a crash, an escaping
// exception, a sanitizer report or a broken invariant below aborts.
// Built by tests/fuzz/CMakeLists.txt; seeds in tests/fuzz/corpus/.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "model/chat_prompt.h"
#include "net/api_error.h"
#include "net/openai_request.h"
#include "net/tool_parser.h"
#include "tests/fuzz/fuzz_support.h"

namespace troupe {

const char* const fuzz_target_name = "fuzz_openai_request";

namespace {


// An error is a 400 with a message, and its envelope can be written.
template <class T>
const T* check(const parse_result<T>& r) {
  if (const auto* e = std::get_if<api_error>(&r)) {
    require(e->status == 400 && !e->message.empty(), "errors are 400 with a message");
    require(!api_error_body(*e).empty(), "error envelope");
    return nullptr;
  }
  return &std::get<T>(r);
}
template <class T>
const T* check(const parse_result<T>&&) = delete;  // the request would dangle

// A fixed ChatML-like template, so parsed messages also go through rendering.
const chat_template& test_template() {
  static const chat_template tmpl = chat_template::parse(
      "{%- for message in messages %}"
      "{{- '<|im_start|>' + message['role'] + '\\n' }}"
      "{%- if message['content'] is string %}{{ message['content'] }}{% endif %}"
      "{{- '<|im_end|>\\n' }}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}").value();
  return tmpl;
}

// As the chat route and /tokenize with messages do after their own parse.
void messages(std::string_view body, bool add_generation_prompt) {
  auto parsed = parse_chat_messages(body);
  if (!parsed) {
    require(!parsed.error_message().empty(), "chat messages error has a message");
    return;
  }
  require(parsed->is_array(), "chat messages are a list");
  value_object context;
  context.set("messages", *parsed);
  context.set("add_generation_prompt", value(add_generation_prompt));
  auto text = test_template().render(value(std::move(context)));
  if (!text) require(!text.error_message().empty(), "render error has a message");
}

void completion(std::string_view body) {
  const auto parsed = parse_completion_request(body);
  const auto* r = check(parsed);
  if (r == nullptr) return;
  if (r->prompt_is_text) {
    require(!r->text_prompts.empty() && r->id_prompts.empty(), "text prompts");
  } else {
    require(!r->id_prompts.empty() && r->text_prompts.empty(), "id prompts");
    for (const auto& ids : r->id_prompts) require(!ids.empty(), "no empty id prompt");
  }
  require(!r->common.include_usage || r->common.stream, "include_usage needs stream");
}

void chat(std::string_view body) {
  const auto parsed = parse_chat_request(body);
  const auto* r = check(parsed);
  if (r == nullptr) return;
  require(r->top_logprobs <= 0 || r->logprobs, "top_logprobs needs logprobs");
  require(r->tools.mode == tool_request::choice::none || !r->tools.tools.empty(), "a tool choice needs tools");
  if (r->tools.forced()) {
    for (std::optional<tool_parser_kind> parser :
         {std::optional<tool_parser_kind>(), std::optional(tool_parser_kind::hermes)}) {
      const output_constraint c = forced_tool_constraint(r->tools, parser);
      require(is_constrained(c), "a forced choice is a constraint");
      require(tool_stream_for(r->tools, parser).has_value(), "a forced choice is parsed");
    }
  }
  messages(body, r->add_generation_prompt);
}

// A model's text read for calls whole and in pieces of `piece` bytes: the
// same calls and content, the stream's fragments adding up to them.
void tool_output(std::string_view text, tool_call_stream make, size_t piece, bool streams_content = true) {
  tool_call_stream whole = make;
  whole.feed(text);
  whole.finish();
  std::string content;
  std::vector<std::string> names, arguments;
  const auto take = [&](const tool_stream_delta& d) {
    content += d.content;
    for (const tool_call_delta& c : d.calls) {
      if (!c.id.empty()) {
        require(c.index == names.size(), "calls open in order");
        names.push_back(c.name);
        arguments.emplace_back();
      }
      require(c.index + 1 == names.size(), "deltas belong to the open call");
      arguments[c.index] += c.arguments;
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) take(make.feed(text.substr(at, piece)));
  take(make.finish());
  require(make.calls().size() == whole.calls().size() && make.content() == whole.content(), "split-independent");
  for (size_t i = 0; i < whole.calls().size(); ++i) {
    require(names.at(i) == whole.calls()[i].name && arguments.at(i) == whole.calls()[i].arguments,
            "fragments add up to the call");
  }
  if (whole.calls().empty()) {
    require(whole.content() == std::string(text), "no calls: the text is the content");
    // (a named function's arguments stream as arguments even when cut off)
    require(!streams_content || content == text, "no calls: the stream sent the text as content");
  } else {
    require(content == whole.content().value_or(""), "content before the calls");
  }
}

void tool_outputs(std::string_view body) {
  if (body.empty()) return;
  const size_t piece = 1 + static_cast<uint8_t>(body[0]) % 7;
  const std::string_view text = body.substr(1);
  for (tool_parser_kind k : {tool_parser_kind::hermes, tool_parser_kind::llama3_json, tool_parser_kind::mistral}) {
    tool_output(text, tool_call_stream::parsing(k, true), piece);
    tool_output(text, tool_call_stream::forced(k, false), piece);
  }
  tool_output(text, tool_call_stream::forced(std::nullopt, true), piece);
  tool_output(text, tool_call_stream::arguments_of("f"), piece, false);
}

void tokenize(std::string_view body) {
  const auto parsed = parse_tokenize_request(body);
  const auto* r = check(parsed);
  if (r != nullptr && r->has_messages) messages(body, r->add_generation_prompt);
}

void detokenize(std::string_view body) {
  const auto parsed = parse_detokenize_request(body);
  check(parsed);
}

}  // namespace
}  // namespace troupe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (static_cast<uint8_t>(data[0] - '0') % 6) {
    case 0: troupe::completion(body); break;
    case 1: troupe::chat(body); break;
    case 2: troupe::tokenize(body); break;
    case 3: troupe::detokenize(body); break;
    case 4: troupe::messages(body, true); break;
    case 5: troupe::tool_outputs(body); break;
  }
  return 0;
}
