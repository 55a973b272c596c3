// output_constraint: what a request constrains its output to (OpenAI's
// response_format, vLLM's structured_outputs / guided_* fields), as plain
// data that travels in sampling_params. grammar/constraint_cache.h turns
// one into automata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

struct output_constraint {
  enum kind_t : int32_t { none = 0, json_schema, json_object, regex, choice, ebnf, structural };
  int32_t kind = none;
  // The schema (JSON text), regex, grammar, or structural spec (JSON text,
  // grammar/structural.h: forced tool calls).
  std::string text;
  std::vector<std::string> choices;  // choice: the output is exactly one of these
  // Options (grammar/json_schema.h's json_options): JSON whitespace
  // between tokens or the compact form; strict: absent
  // additionalProperties means false (OpenAI's strict json_schema).
  bool any_whitespace = true;
  bool strict = false;
};

inline bool is_constrained(const output_constraint& c) { return c.kind != output_constraint::none; }
// "json_schema", "regex", ...: for logs and errors.
const char* constraint_kind_name(int32_t kind);

}  // namespace troupe
