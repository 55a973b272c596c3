// structural: outputs made of tagged JSON values, the shape of a forced tool
// call (tool_choice "required" or a named function, net/tool_request.h):
//
//   prefix item (separator item){min_items-1 .. max_items-1} suffix
//   item ::= begin_1 value_1 end_1 | begin_2 value_2 end_2 | ...
//
// where each value_i is a JSON text of its own JSON Schema (grammar/
// json_schema.h). Hermes' `<tool_call>\n{"name": "f", "arguments": ` +
// schema of f + `}\n</tool_call>` is one item, for example; the begin
// strings name the function, so the name and the arguments agree.
//
// The spec travels as JSON text in output_constraint::text (kind
// structural), so that compiled grammars are cached by it like any other
// constraint: {"prefix", "separator", "suffix", "min_items", "max_items"
// (-1: any number), "items": [{"begin", "schema" (JSON text), "end",
// "strict"}]}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace troupe::grammar {

struct structural_item {
  std::string begin;
  std::string schema;  // JSON Schema text
  std::string end;
  bool strict = false;  // absent additionalProperties means false
};

struct structural_spec {
  std::string prefix, separator, suffix;
  int32_t min_items = 1, max_items = -1;
  std::vector<structural_item> items;
};

std::string structural_to_json(const structural_spec& spec);
result<structural_spec> parse_structural(std::string_view json);

// The grammar of the spec (JSON text); json_options' strict is taken from
// each item, and without any_whitespace the values are written as Python's
// json.dumps writes them (", " and ": "), the form chat templates render
// tool calls in. Errors name the item ("items[1]: JSON Schema: ...").
result<grammar> structural_grammar(std::string_view json, const json_options& options);

}  // namespace troupe::grammar
