// JSON Schema -> grammar: one walk over the schema (simdjson DOM, error codes
// only), each schema object becoming a node; $ref targets become rules
// (memoized by pointer, compiled from a queue) so that recursion works.
// Objects, arrays, strings and numbers are in grammar/json_schema_types.cpp;
// the shared JSON rules, separators, integer ranges and formats in
// grammar/json_schema_rules.cpp.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "grammar/json_schema_internal.h"

namespace troupe::grammar::json_schema_detail {
namespace {

constexpr std::string_view kIgnored[] = {"title",    "description", "default", "examples",
                                         "$schema",  "$id",         "$comment", "deprecated",
                                         "readOnly", "writeOnly",   "$defs",   "definitions"};
constexpr std::string_view kObjectWords[] = {"properties", "required", "additionalProperties"};
constexpr std::string_view kArrayWords[] = {"items", "prefixItems", "minItems", "maxItems"};
constexpr std::string_view kStringWords[] = {"minLength", "maxLength", "pattern", "format"};
constexpr std::string_view kNumberWords[] = {"minimum", "maximum", "exclusiveMinimum",
                                             "exclusiveMaximum"};
constexpr std::string_view kOtherWords[] = {"type",  "enum",  "const", "anyOf",
                                            "oneOf", "allOf", "$ref"};
constexpr std::string_view kTypes[] = {"object",  "array",   "string", "number",
                                       "integer", "boolean", "null"};

template <size_t N>
bool in(const std::string_view (&list)[N], std::string_view word) {
  for (std::string_view w : list) {
    if (w == word) return true;
  }
  return false;
}

bool supported(std::string_view k) {
  return in(kObjectWords, k) || in(kArrayWords, k) || in(kStringWords, k) || in(kNumberWords, k) ||
         in(kOtherWords, k);
}

// Whether a JSON value is of a schema type name.
bool has_type(element e, std::string_view type) {
  switch (e.type()) {
    case element_type::STRING: return type == "string";
    case element_type::INT64:
    case element_type::UINT64: return type == "integer" || type == "number";
    case element_type::DOUBLE: {
      const double d = e.get_double().value_unsafe();
      return type == "number" || (type == "integer" && std::floor(d) == d);
    }
    case element_type::BOOL: return type == "boolean";
    case element_type::NULL_VALUE: return type == "null";
    case element_type::ARRAY: return type == "array";
    case element_type::OBJECT: return type == "object";
  }
  return false;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A URI fragment's %XX escapes decoded (others left as they are).
std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

// A JSON pointer one step down (~ and / escaped as ~0 and ~1).
std::string child(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string child(const std::string& path, std::string_view key, size_t index) {
  return child(child(path, key), std::to_string(index));
}

error fail(const std::string& what, const std::string& path) {
  return make_error("JSON Schema: " + what + " at " + (path.empty() ? std::string("the root") : path));
}

bool member(json_object o, std::string_view key, element& out) {
  return o.at_key(key).get(out) == simdjson::SUCCESS;
}

bool is_number(element e) {
  const element_type t = e.type();
  return t == element_type::INT64 || t == element_type::UINT64 || t == element_type::DOUBLE;
}

result<grammar> schema_compiler::run() {
  const int32_t root = g_.add_rule("root");
  refs_.emplace("", root);
  g_.set_root(root);
  auto body = compile(root_, "");
  if (!body) return std::move(body).take_error();
  g_.set_body(root, *body);
  while (!pending_.empty()) {
    const pending p = pending_.front();
    pending_.pop_front();
    auto target = compile(p.schema, p.path);
    if (!target) return std::move(target).take_error();
    g_.set_body(p.rule, *target);
  }
  return std::move(g_);
}

result<int32_t> schema_compiler::compile(element s, const std::string& path) {
  if (s.type() == element_type::BOOL) return s.get_bool().value_unsafe() ? j_.value() : g_.nothing();
  json_object o;
  if (s.get_object().get(o) != simdjson::SUCCESS) {
    return fail("a schema must be an object or a boolean", path);
  }
  for (auto field : o) {
    if (!in(kIgnored, field.key) && !supported(field.key)) {
      return fail("unsupported keyword '" + std::string(field.key) + "'", path);
    }
  }
  element e;
  if (member(o, "$ref", e)) return compile_ref(e, path);  // siblings ignored, as draft 7 says
  auto types = types_of(o, path);
  if (!types) return std::move(types).take_error();

  if (member(o, "const", e)) return compile_values({e}, *types);
  if (member(o, "enum", e)) {
    json_array values;
    if (e.get_array().get(values) != simdjson::SUCCESS) return fail("'enum' must be an array", path);
    return compile_values(std::vector<element>(values.begin(), values.end()), *types);
  }

  for (std::string_view combinator : {"anyOf", "oneOf", "allOf"}) {
    if (!member(o, combinator, e)) continue;
    for (auto field : o) {
      if (field.key != combinator && supported(field.key)) {
        return fail("'" + std::string(combinator) + "' together with '" + std::string(field.key) +
                        "' is not supported",
                    path);
      }
    }
    json_array subs;
    if (e.get_array().get(subs) != simdjson::SUCCESS || subs.size() == 0) {
      return fail("'" + std::string(combinator) + "' must be a non-empty array of schemas", path);
    }
    if (combinator == "allOf" && subs.size() > 1) {
      return fail("allOf with more than one schema is not supported", path);
    }
    std::vector<int32_t> alts;
    for (element sub : subs) {
      auto n = compile(sub, child(path, combinator, alts.size()));
      if (!n) return n;
      alts.push_back(*n);
    }
    return j_.any(std::move(alts));
  }

  std::vector<std::string_view> list = *types;
  if (list.empty()) {  // no type: the types the other keywords are about
    auto uses = [&](const auto& words) {
      for (std::string_view w : words) {
        if (member(o, w, e)) return true;
      }
      return false;
    };
    if (uses(kObjectWords)) list.push_back("object");
    if (uses(kArrayWords)) list.push_back("array");
    if (uses(kStringWords)) list.push_back("string");
    if (uses(kNumberWords)) list.push_back("number");
    if (list.empty()) return j_.value();
  }
  std::vector<int32_t> alts;
  for (std::string_view type : list) {
    auto n = compile_type(type, o, path);
    if (!n) return n;
    alts.push_back(*n);
  }
  return j_.any(std::move(alts));
}

result<std::vector<std::string_view>> schema_compiler::types_of(json_object o, const std::string& path) {
  std::vector<std::string_view> out;
  element e;
  if (!member(o, "type", e)) return out;
  const std::string bad = "'type' must be a type name or a non-empty array of them";
  std::string_view name;
  if (e.type() == element_type::ARRAY) {
    for (element t : simdjson::dom::array(e.get_array().value_unsafe())) {
      if (t.get_string().get(name) != simdjson::SUCCESS) return fail(bad, path);
      out.push_back(name);
    }
    if (out.empty()) return fail(bad, path);
  } else if (e.get_string().get(name) == simdjson::SUCCESS) {
    out.push_back(name);
  } else {
    return fail(bad, path);
  }
  for (std::string_view t : out) {
    if (!in(kTypes, t)) return fail("unknown type '" + std::string(t) + "'", path);
  }
  return out;
}

result<int32_t> schema_compiler::compile_type(std::string_view type, json_object o, const std::string& path) {
  if (type == "object") return compile_object(o, path);
  if (type == "array") return compile_array(o, path);
  if (type == "string") return compile_string(o, path);
  if (type == "integer") return compile_integer(o, path);
  if (type == "number") return compile_number(o, path);
  if (type == "boolean") return j_.boolean();
  return j_.null();
}

// ---- $ref ----------------------------------------------------------------------

result<int32_t> schema_compiler::compile_ref(element e, const std::string& path) {
  std::string_view ref;
  if (e.get_string().get(ref) != simdjson::SUCCESS) return fail("'$ref' must be a string", path);
  if (ref.empty() || ref[0] != '#') {
    return fail("unsupported $ref '" + std::string(ref) +
                    "' (only references inside the schema, starting with '#')",
                path);
  }
  const std::string pointer = percent_decode(ref.substr(1));
  if (auto it = refs_.find(pointer); it != refs_.end()) return g_.ref(it->second);
  element target;
  if (!resolve(pointer, target)) return fail("unresolved $ref '" + std::string(ref) + "'", path);
  const int32_t rule = g_.add_rule(std::string(ref));
  refs_.emplace(pointer, rule);
  pending_.push_back({rule, target, pointer});
  return g_.ref(rule);
}

// A JSON pointer ("" or "/a/b", ~0 and ~1 escapes) from the schema's root.
bool schema_compiler::resolve(std::string_view pointer, element& out) const {
  element at = root_;
  if (!pointer.empty() && pointer[0] != '/') return false;
  for (size_t pos = 1; pos <= pointer.size();) {
    const size_t end = std::min(pointer.find('/', pos), pointer.size());
    std::string token;
    for (size_t i = pos; i < end; ++i) {
      if (pointer[i] == '~' && i + 1 < end && (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
        token += pointer[++i] == '0' ? '~' : '/';
      } else {
        token += pointer[i];
      }
    }
    if (at.type() == element_type::OBJECT) {
      if (at.get_object().value_unsafe().at_key(token).get(at) != simdjson::SUCCESS) return false;
    } else if (at.type() == element_type::ARRAY) {
      if (token.empty() || token.size() > 9 || token.find_first_not_of("0123456789") != std::string::npos ||
          (token.size() > 1 && token[0] == '0')) {
        return false;
      }
      if (at.get_array().value_unsafe().at(std::stoul(token)).get(at) != simdjson::SUCCESS) return false;
    } else {
      return false;
    }
    pos = end + 1;
  }
  out = at;
  return true;
}

// ---- enum and const ---------------------------------------------------------------

result<int32_t> schema_compiler::compile_values(std::vector<element> values,
                                                const std::vector<std::string_view>& types) {
  std::vector<int32_t> alts;
  for (element v : values) {
    bool typed = types.empty();
    for (std::string_view t : types) typed = typed || has_type(v, t);
    if (typed) alts.push_back(literal(v));
  }
  return j_.any(std::move(alts));
}

// A JSON value, written with the separators and whitespace of the options.
int32_t schema_compiler::literal(element e) {
  switch (e.type()) {
    case element_type::STRING: return g_.literal(json_quote(e.get_string().value_unsafe()));
    case element_type::INT64: return g_.literal(std::to_string(e.get_int64().value_unsafe()));
    case element_type::UINT64: return g_.literal(std::to_string(e.get_uint64().value_unsafe()));
    case element_type::DOUBLE: {
      const std::string text = json_schema_detail::format_double(e.get_double().value_unsafe());
      if (text.find_first_of(".eE") != std::string::npos) return g_.literal(text);
      return g_.alt({g_.literal(text), g_.literal(text + ".0")});  // 1.0 as either
    }
    case element_type::BOOL: return g_.literal(e.get_bool().value_unsafe() ? "true" : "false");
    case element_type::NULL_VALUE: return g_.literal("null");
    case element_type::ARRAY: {
      std::vector<int32_t> parts = {g_.byte('['), j_.ws()};
      bool first = true;
      for (element item : simdjson::dom::array(e.get_array().value_unsafe())) {
        if (!first) parts.push_back(j_.comma());
        first = false;
        parts.insert(parts.end(), {literal(item), j_.after()});
      }
      parts.push_back(g_.byte(']'));
      return j_.cat(std::move(parts));
    }
    case element_type::OBJECT: {
      std::vector<int32_t> parts = {g_.byte('{'), j_.ws()};
      bool first = true;
      for (auto field : simdjson::dom::object(e.get_object().value_unsafe())) {
        if (!first) parts.push_back(j_.comma());
        first = false;
        parts.insert(parts.end(), {g_.literal(json_quote(field.key)), j_.colon(), literal(field.value),
                                   j_.after()});
      }
      parts.push_back(g_.byte('}'));
      return j_.cat(std::move(parts));
    }
  }
  return g_.nothing();
}

}  // namespace troupe::grammar::json_schema_detail

namespace troupe::grammar {

using json_schema_detail::element;
using json_schema_detail::json_builder;

result<grammar> json_schema_grammar(std::string_view schema, const json_options& options) {
  const simdjson::padded_string padded(schema);
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(padded).get(root); err != simdjson::SUCCESS) {
    const size_t at = json_schema_detail::json_error_offset(schema);
    const std::string where = at == std::string_view::npos ? "" : " at byte " + std::to_string(at);
    return make_error("JSON Schema: invalid JSON" + where + ": " + simdjson::error_message(err));
  }
  return json_schema_detail::schema_compiler(options, root).run();
}

grammar json_object_grammar(const json_options& options) {
  grammar g;
  json_builder j(g, options);
  g.set_root(g.add_rule("root", g.ref(j.object_rule())));
  return g;
}

}  // namespace troupe::grammar
