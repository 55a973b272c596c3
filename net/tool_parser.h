// tool_parser: a model's text turned into OpenAI tool calls, as vLLM's
// tool parsers read it (--tool-call-parser names):
//   hermes       Qwen2.5 / Qwen3 / Hermes: content, then one or more
//                <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//   llama3_json  Llama 3.1 / 3.2: the output starts with <|python_tag|> or
//                '{' and is {"name": ..., "parameters": {...}} objects
//                separated by "; "
//   mistral      content, then [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]
// "arguments" and "parameters" are read alike. Besides, two forced forms
// (tool_choice "required" or a named function, whose output the structured-
// output engine shapes, net/tool_request.h): the parser's syntax with the
// calls from the first byte on, or, with no parser configured, vLLM's
// [{"name": ..., "parameters": {...}}, ...] and, for a named function, the
// arguments object alone.
//
// One tool_call_stream per choice reads the text as it is generated: feed()
// returns what may be sent now (content, and per call its id and name once
// the name is complete, then fragments of the arguments' JSON text as they
// arrive), holding back text that may yet open a call ("<tool_" while
// "<tool_call>" could follow). Concatenated, the fragments of a call are
// its arguments exactly as the model wrote them (raw JSON text). After
// finish(), the response's content and calls: the calls that completed
// (what follows them, a malformed or cut-off call included, is left out);
// when none did, no calls and the whole text as content, as vLLM answers,
// and the stream has sent the whole text as content too. Not thread-safe;
// one per choice.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

enum class tool_parser_kind { hermes, llama3_json, mistral };

std::optional<tool_parser_kind> tool_parser_by_name(std::string_view name);
const char* tool_parser_name(tool_parser_kind kind);
// The parser a chat template's tool-call format implies: <tool_call> ->
// hermes, [TOOL_CALLS] -> mistral, <|python_tag|> (or a "parameters"
// example in a Llama 3 template, <|eot_id|>) -> llama3_json; nullopt when
// it names none of them.
std::optional<tool_parser_kind> detect_tool_parser(std::string_view chat_template);

// A parser's syntax: how calls are read, and how a forced call is written
// (net/tool_request.h shapes the output to it): prefix, then calls
// head + JSON name + args_key + arguments + tail joined by separator, then
// suffix. nullopt: vLLM's forced JSON array (no parser).
struct tool_call_syntax {
  std::string marker;                // opens the calls ("" none)
  bool brace_opens = false;          // '{' first opens them (llama3_json)
  std::vector<std::string> between;  // skipped between calls, with whitespace
  bool short_ids = false;            // mistral: 9 alphanumerics
  std::string prefix, head, args_key, tail, separator, suffix;
};
const tool_call_syntax& tool_call_syntax_of(std::optional<tool_parser_kind> kind);

struct tool_call {
  std::string id, name, arguments;  // arguments: JSON text
};

struct tool_call_delta {
  size_t index = 0;
  std::string id, name;  // the call's first delta only
  std::string arguments;
};

struct tool_stream_delta {
  std::string content;
  std::vector<tool_call_delta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

class tool_call_stream {
 public:
  // tool_choice auto: content, and calls where the parser's syntax opens them.
  static tool_call_stream parsing(tool_parser_kind kind, bool parallel);
  // required / named with a parser (its syntax) or without (vLLM's JSON array).
  static tool_call_stream forced(std::optional<tool_parser_kind> kind, bool parallel);
  // A named function without a parser: the whole output is its arguments.
  static tool_call_stream arguments_of(std::string name);

  tool_stream_delta feed(std::string_view text);
  tool_stream_delta finish();

  // After finish(): content (nullopt: none) and calls for the response.
  const std::optional<std::string>& content() const { return final_content_; }
  const std::vector<tool_call>& calls() const { return final_calls_; }

 private:
  enum class phase { content_anywhere, content_at_start, plain, section, object, trailing, arguments };
  tool_call_stream(const tool_call_syntax& s, phase p, bool parallel) : syntax_(&s), phase_(p), parallel_(parallel) {}

  void run(bool final, tool_stream_delta& out);
  bool step(bool final, tool_stream_delta& out);  // false: wait for more text
  bool scan_object();  // false: the object is not done (or failed)
  void emit_call(tool_stream_delta& out);
  void end_object(tool_stream_delta& out);
  void fail();
  std::string new_id() const;

  const tool_call_syntax* syntax_;  // static
  phase phase_;
  bool parallel_ = true;
  std::string text_;
  size_t pos_ = 0;          // next byte to read
  size_t content_sent_ = 0; // content sent up to here
  size_t content_end_ = 0;  // the content before the calls
  std::vector<tool_call> calls_;
  // The object being read.
  struct object_scan {
    size_t start = 0;
    int depth = 0;
    bool in_string = false, escape = false;
    enum { key, colon, value, scalar, after } top = key;
    size_t key_begin = 0;
    std::string key_name;
    size_t value_begin = 0;
    std::optional<std::string> name;
    std::string id;
    size_t args_begin = std::string::npos, args_end = std::string::npos;
    size_t args_sent = 0;
    bool header_sent = false;
  } obj_;
  std::optional<std::string> final_content_;
  std::vector<tool_call> final_calls_;
};

}  // namespace troupe
