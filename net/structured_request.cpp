#include "net/structured_request.h"

#include <string>
#include <vector>

namespace troupe {
namespace {

// A schema given as an object (or, for guided_json, JSON text in a string).
maybe_error read_schema(std::string_view key, element e, bool text_allowed, output_constraint& out) {
  if (e.is_string() && text_allowed) {
    out.text = std::string(std::string_view(e));
  } else if (e.is_object() || e.is_bool()) {
    out.text = simdjson::minify(e);
  } else {
    return type_error(key, text_allowed ? "a JSON Schema (an object, or JSON text)" : "a JSON Schema object");
  }
  out.kind = output_constraint::json_schema;
  return std::nullopt;
}

maybe_error read_choices(std::string_view key, element e, output_constraint& out) {
  if (!e.is_array()) return type_error(key, "a list of strings");
  out.choices.clear();
  for (element x : e.get_array()) {
    if (!x.is_string()) return type_error(key, "a list of strings");
    out.choices.emplace_back(std::string_view(x));
  }
  if (out.choices.empty()) return bad_request(std::string(key) + ": must not be empty", std::string(key));
  out.kind = output_constraint::choice;
  return std::nullopt;
}

maybe_error read_text(std::string_view key, element e, int32_t kind, output_constraint& out) {
  if (!e.is_string()) return type_error(key, "a string");
  out.text = std::string(std::string_view(e));
  out.kind = kind;
  return std::nullopt;
}

maybe_error read_response_format(element e, output_constraint& out) {
  constexpr std::string_view key = "response_format";
  if (!e.is_object()) return type_error(key, "an object with a type");
  const field_reader f{object(e)};
  std::string type;
  if (auto err = f.read_string("type", type)) return bad_request("response_format." + err->message, "response_format");
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    out.kind = output_constraint::json_object;
    return std::nullopt;
  }
  if (type != "json_schema") {
    return bad_request("response_format.type: must be 'text', 'json_object' or 'json_schema', got '" + type + "'",
                       "response_format");
  }
  element spec;
  if (!f.get("json_schema", spec) || !spec.is_object()) {
    return bad_request("response_format.json_schema: required (an object with name and schema)", "response_format");
  }
  const field_reader js{object(spec)};
  std::string name;
  if (auto err = js.read_string("name", name)) return bad_request("response_format.json_schema." + err->message, "response_format");
  if (auto err = js.read_bool("strict", out.strict)) return bad_request("response_format.json_schema." + err->message, "response_format");
  element schema;
  if (!js.get("schema", schema)) {
    out.text = "{}";  // OpenAI: no schema, any JSON value
    out.kind = output_constraint::json_schema;
    return std::nullopt;
  }
  return read_schema("response_format.json_schema.schema", schema, false, out);
}

maybe_error read_structured_object(element e, output_constraint& out) {
  constexpr std::string_view key = "structured_outputs";
  if (!e.is_object()) return type_error(key, "an object");
  const field_reader f{object(e)};
  const std::vector<std::string_view> known = {"json", "regex", "choice", "grammar", "json_object",
                                               "disable_any_whitespace", "whitespace_pattern", "backend"};
  if (std::string k = f.first_unknown(known); !k.empty()) {
    return bad_request("structured_outputs." + k + ": unknown field", "structured_outputs");
  }
  if (f.has("whitespace_pattern")) {
    return bad_request("structured_outputs.whitespace_pattern: not supported; use disable_any_whitespace "
                       "(or the server's structured_outputs_disable_any_whitespace)", "structured_outputs");
  }
  int given = 0;
  element x;
  if (f.get("json", x)) {
    ++given;
    if (auto err = read_schema("structured_outputs.json", x, true, out)) return err;
  }
  if (f.get("regex", x)) {
    ++given;
    if (auto err = read_text("structured_outputs.regex", x, output_constraint::regex, out)) return err;
  }
  if (f.get("choice", x)) {
    ++given;
    if (auto err = read_choices("structured_outputs.choice", x, out)) return err;
  }
  if (f.get("grammar", x)) {
    ++given;
    if (auto err = read_text("structured_outputs.grammar", x, output_constraint::ebnf, out)) return err;
  }
  bool json_object = false;
  if (auto err = f.read_bool("json_object", json_object)) return bad_request("structured_outputs." + err->message, "structured_outputs");
  if (json_object) {
    ++given;
    out.kind = output_constraint::json_object;
  }
  if (given != 1) {
    return bad_request("structured_outputs: give exactly one of json, regex, choice, grammar, json_object", "structured_outputs");
  }
  bool compact = false;
  if (auto err = f.read_bool("disable_any_whitespace", compact)) return bad_request("structured_outputs." + err->message, "structured_outputs");
  if (compact) out.any_whitespace = false;
  return std::nullopt;
}

}  // namespace

maybe_error read_structured_outputs(const field_reader& f, output_constraint& out) {
  std::vector<std::string> given;
  element e;
  if (f.get("response_format", e)) {
    if (auto err = read_response_format(e, out)) return err;
    if (is_constrained(out)) given.emplace_back("response_format");
  }
  if (f.get("structured_outputs", e)) {
    if (auto err = read_structured_object(e, out)) return err;
    given.emplace_back("structured_outputs");
  }
  if (f.get("guided_json", e)) {
    if (auto err = read_schema("guided_json", e, true, out)) return err;
    given.emplace_back("guided_json");
  }
  if (f.get("guided_regex", e)) {
    if (auto err = read_text("guided_regex", e, output_constraint::regex, out)) return err;
    given.emplace_back("guided_regex");
  }
  if (f.get("guided_choice", e)) {
    if (auto err = read_choices("guided_choice", e, out)) return err;
    given.emplace_back("guided_choice");
  }
  if (f.get("guided_grammar", e)) {
    if (auto err = read_text("guided_grammar", e, output_constraint::ebnf, out)) return err;
    given.emplace_back("guided_grammar");
  }
  std::string backend;
  if (auto err = f.read_string("guided_decoding_backend", backend)) return err;
  if (f.has("guided_whitespace_pattern")) {
    return bad_request("guided_whitespace_pattern: not supported; the server's "
                       "structured_outputs.disable_any_whitespace chooses the whitespace",
                       "guided_whitespace_pattern");
  }
  if (given.size() > 1) {
    return bad_request(given[0] + ", " + given[1] + ": only one output constraint may be given", given[1]);
  }
  return std::nullopt;
}

}  // namespace troupe
