// json_util: small readers over simdjson's DOM (error codes only, nothing
// throws) for the tokenizer's JSON files. Absent and null members read as
// absent; a member of the wrong type is an error naming its key.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "model/tokenizer/regex.h"

namespace troupe::tok {

using json = simdjson::dom::element;

// Parses `text` into `parser`'s document. Integers too large for 64 bits
// (transformers writes model_max_length = 1e30 as one) are read as doubles
// instead of failing the whole file. Errors name `file_name`.
result<json> json_parse(simdjson::dom::parser& parser, const std::string& text,
                        std::string_view file_name);

// obj[key], or nullopt when obj is not an object, or key is absent or null.
std::optional<json> json_member(json obj, std::string_view key);

// obj[key] as a string; nullopt when absent; error when not a string.
result<std::optional<std::string>> json_string(json obj, std::string_view key);

// obj[key] as a bool, or `fallback` when absent; error when not a bool.
result<bool> json_bool(json obj, std::string_view key, bool fallback);

// obj[key] as an integer, or `fallback` when absent; error when not one.
result<int64_t> json_int(json obj, std::string_view key, int64_t fallback);

// obj["type"], or "" when absent or not a string.
std::string json_type(json obj);

// A {"type": "Sequence", list_key: [...]} component: calls add(item) for
// each item, in order; an error when the list is missing names `what`.
template <class Add>
status for_each_in_sequence(json spec, std::string_view list_key, std::string_view what,
                            Add&& add) {
  simdjson::dom::array items;
  const std::optional<json> list = json_member(spec, list_key);
  if (!list || list->get(items) != simdjson::SUCCESS) {
    return make_error("Sequence " + std::string(what) + " needs a '" + std::string(list_key) +
                      "' list");
  }
  for (json item : items) {
    if (status s = add(item); !s.ok()) return s;
  }
  return {};
}

// obj["pattern"] of a Split or Replace: {"String": s} (a literal, also
// stored in *literal when given) or {"Regex": r}.
result<regex> json_pattern(json obj, std::string* literal);

}  // namespace troupe::tok
