// structured_request: the request fields that constrain the output's form
// (docs/structured_outputs.md), read into sampling_params' constraint:
//   - OpenAI's response_format: {"type": "text"}, {"type": "json_object"},
//     {"type": "json_schema", "json_schema": {"name", "schema", "strict",
//     "description"}};
//   - vLLM's structured_outputs object {json, regex, choice, grammar,
//     json_object} and its older top-level guided_json, guided_regex,
//     guided_choice, guided_grammar (guided_decoding_backend and
//     guided_whitespace_pattern accepted: troupe has one engine; the
//     whitespace is the server's structured_outputs config).
// At most one constraint a request. The constraint is checked (compiled)
// later, where the server's options apply (generation_routes.cpp).
#pragma once

#include <optional>
#include <string_view>

#include "grammar/constraint.h"
#include "net/api_error.h"
#include "net/field_reader.h"

namespace troupe {

// The fields read_structured_outputs reads.
inline constexpr std::string_view structured_output_fields[] = {
    "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern"};

std::optional<api_error> read_structured_outputs(const field_reader& f, output_constraint& out);

}  // namespace troupe
