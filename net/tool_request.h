// tool_request: a chat request's tools, tool_choice and parallel_tool_calls
// (OpenAI's), read and checked, and the constraint that makes a forced
// choice come true: tool_choice "required" or a named function shapes the
// output with the structured-output engine (grammar/structural.h) in the
// syntax of the tool parser (net/tool_parser.h), so that even a model that
// would not call a tool returns a well-formed call to one of them.
// Stateless; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "net/field_reader.h"
#include "net/tool_parser.h"

namespace troupe {

struct tool_function {
  std::string name;
  std::string parameters;  // JSON Schema text; "" when not given (no arguments)
  bool strict = false;     // function.strict: additionalProperties false when absent
};

struct tool_request {
  enum class choice { none, automatic, required, named };
  std::vector<tool_function> tools;
  choice mode = choice::none;  // default: automatic with tools, none without
  std::string named;           // choice::named: the function
  bool parallel = true;        // parallel_tool_calls
  bool forced() const { return mode == choice::required || mode == choice::named; }
};

// Errors are 400s naming the field ("tools[1].function.name: required").
maybe_error read_tool_request(const field_reader& f, tool_request& out);

// The constraint for a forced choice (REQUIRES: r.forced()): the calls in
// the parser's syntax, or without a parser vLLM's forms (a JSON array of
// {"name", "parameters"}; a named function: its arguments object alone).
// No whitespace: the calls' arguments with json.dumps' ", " and ": "
// (grammar/structural.h), vLLM's named form compact ({"a":1}).
output_constraint forced_tool_constraint(const tool_request& r, std::optional<tool_parser_kind> parser);
// The index in r.tools of the tool the constraint's error is about (it
// names "items[i]", or it is the named function's own schema), or -1.
int64_t tool_of_constraint_error(const tool_request& r, const std::string& error);

// How the response reads the output: nullopt when it is not parsed for
// calls (tool_choice none, or auto without a parser).
std::optional<tool_call_stream> tool_stream_for(const tool_request& r, std::optional<tool_parser_kind> parser);

}  // namespace troupe
