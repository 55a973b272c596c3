#include "net/tool_request.h"

#include <algorithm>
#include <cstdlib>

#include "common/json_writer.h"
#include "grammar/structural.h"

namespace troupe {

namespace {

// A function without parameters takes none: its arguments are {}.
constexpr std::string_view no_parameters = R"({"type":"object","properties":{},"additionalProperties":false})";

maybe_error nested(const std::string& at, const maybe_error& e) {
  if (!e) return std::nullopt;
  return bad_request(at + "." + e->message, "tools");
}

maybe_error read_tool(element e, size_t index, tool_function& out) {
  const std::string at = "tools[" + std::to_string(index) + "]";
  const api_error shape = bad_request(at + ": expected {\"type\": \"function\", \"function\": {\"name\", "
                                      "\"description\", \"parameters\"}}", "tools");
  if (!e.is_object()) return shape;
  const field_reader tool{object(e)};
  std::string type = "function";
  if (auto err = nested(at, tool.read_string("type", type))) return err;
  if (type != "function") return bad_request(at + ".type: only 'function' tools are served, got '" + type + "'", "tools");
  element fn;
  if (!tool.get("function", fn) || !fn.is_object()) return shape;
  const field_reader f{object(fn)};
  const std::string fat = at + ".function";
  std::string description;
  for (maybe_error err : {f.read_string("name", out.name), f.read_string("description", description),
                          f.read_bool("strict", out.strict)}) {
    if (err) return nested(fat, err);
  }
  if (out.name.empty()) return bad_request(fat + ".name: required (a non-empty string)", "tools");
  element parameters;
  if (f.get("parameters", parameters)) {
    if (!parameters.is_object()) return bad_request(fat + ".parameters: expected a JSON Schema object", "tools");
    out.parameters = simdjson::minify(parameters);
  }
  return std::nullopt;
}

maybe_error read_tool_choice(element e, tool_request& out) {
  const api_error wrong = bad_request(
      "tool_choice: expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
      "{\"name\": ...}}", "tool_choice");
  if (e.is_string()) {
    const std::string_view s(e);
    if (s == "none") out.mode = tool_request::choice::none;
    else if (s == "auto") out.mode = tool_request::choice::automatic;
    else if (s == "required") out.mode = tool_request::choice::required;
    else return wrong;
    return std::nullopt;
  }
  if (!e.is_object()) return wrong;
  const field_reader f{object(e)};
  element fn;
  std::string type = "function";
  if (f.read_string("type", type) || type != "function" || !f.get("function", fn) || !fn.is_object() ||
      field_reader(object(fn)).read_string("name", out.named) || out.named.empty()) {
    return wrong;
  }
  out.mode = tool_request::choice::named;
  return std::nullopt;
}

}  // namespace

maybe_error read_tool_request(const field_reader& f, tool_request& out) {
  element tools;
  if (f.get("tools", tools)) {
    if (!tools.is_array()) return type_error("tools", "a list of function tools");
    size_t index = 0;
    for (element e : tools.get_array()) {
      tool_function fn;
      if (auto err = read_tool(e, index, fn)) return err;
      for (const tool_function& other : out.tools) {
        if (other.name == fn.name) {
          return bad_request("tools[" + std::to_string(index) + "].function.name: '" + fn.name +
                             "' is given twice", "tools");
        }
      }
      out.tools.push_back(std::move(fn));
      ++index;
    }
  }
  out.mode = out.tools.empty() ? tool_request::choice::none : tool_request::choice::automatic;
  element choice;
  if (f.get("tool_choice", choice)) {
    if (auto err = read_tool_choice(choice, out)) return err;
    if (out.mode != tool_request::choice::none && out.tools.empty()) {
      return bad_request("tool_choice: needs tools (a non-empty list of functions)", "tool_choice");
    }
  }
  if (out.mode == tool_request::choice::named &&
      std::none_of(out.tools.begin(), out.tools.end(), [&](const tool_function& t) { return t.name == out.named; })) {
    return bad_request("tool_choice: function '" + out.named + "' is not among the tools", "tool_choice");
  }
  return f.read_bool("parallel_tool_calls", out.parallel);
}

output_constraint forced_tool_constraint(const tool_request& r, std::optional<tool_parser_kind> parser) {
  output_constraint c;
  // The arguments as templates write them (json.dumps' form): what a
  // model has seen, and short even for one that would ramble in whitespace.
  c.any_whitespace = false;
  const auto schema_of = [](const tool_function& t) {
    return t.parameters.empty() ? std::string(no_parameters) : t.parameters;
  };
  if (r.mode == tool_request::choice::named && !parser) {  // vLLM's: the arguments alone
    const tool_function& t = *std::find_if(r.tools.begin(), r.tools.end(),
                                           [&](const tool_function& x) { return x.name == r.named; });
    c.kind = output_constraint::json_schema;
    c.text = schema_of(t);
    c.strict = t.strict;
    return c;
  }
  const tool_call_syntax& syntax = tool_call_syntax_of(parser);
  grammar::structural_spec spec;
  spec.prefix = syntax.prefix;
  spec.separator = syntax.separator;
  spec.suffix = syntax.suffix;
  spec.min_items = 1;
  spec.max_items = r.parallel && r.mode == tool_request::choice::required ? -1 : 1;
  for (const tool_function& t : r.tools) {
    if (r.mode == tool_request::choice::named && t.name != r.named) continue;
    std::string begin = syntax.head;
    append_json_string(begin, t.name);
    spec.items.push_back({begin + syntax.args_key, schema_of(t), syntax.tail, t.strict});
  }
  c.kind = output_constraint::structural;
  c.text = grammar::structural_to_json(spec);
  return c;
}

int64_t tool_of_constraint_error(const tool_request& r, const std::string& error) {
  std::vector<int64_t> items;  // the constraint's items, as forced_tool_constraint lists them
  for (size_t i = 0; i < r.tools.size(); ++i) {
    if (r.mode != tool_request::choice::named || r.tools[i].name == r.named) items.push_back(static_cast<int64_t>(i));
  }
  if (error.rfind("items[", 0) != 0) return r.mode == tool_request::choice::named ? items.at(0) : -1;
  const size_t item = std::strtoul(error.c_str() + 6, nullptr, 10);
  return item < items.size() ? items[item] : -1;
}

std::optional<tool_call_stream> tool_stream_for(const tool_request& r, std::optional<tool_parser_kind> parser) {
  switch (r.mode) {
    case tool_request::choice::none: return std::nullopt;
    case tool_request::choice::automatic:
      if (!parser) return std::nullopt;
      return tool_call_stream::parsing(*parser, r.parallel);
    case tool_request::choice::required: return tool_call_stream::forced(parser, r.parallel);
    case tool_request::choice::named:
      if (!parser) return tool_call_stream::arguments_of(r.named);
      return tool_call_stream::forced(parser, false);
  }
  return std::nullopt;
}

}  // namespace troupe
