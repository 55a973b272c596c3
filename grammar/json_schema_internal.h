// json_schema_internal: what the JSON Schema compiler's three files share.
// json_schema.cpp: the walk over a schema ($ref, enum/const, combinators,
// types) and the public functions; json_schema_types.cpp: objects, arrays,
// strings and numbers; json_schema_rules.cpp: the pieces that need no
// schema (the shared JSON rules and separators, integer ranges, string
// formats, JSON literals, error positions). Not for use elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "common/result.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace troupe::grammar::json_schema_detail {

// The rules every JSON grammar shares (made on first use, one rule each,
// then referenced), and the separators the options ask for. Every call
// returns new nodes; -1 stands for "nothing here" (no whitespace in the
// compact forms), which cat() drops.
//
// Layout: exactly one whitespace run between two tokens inside a
// container: "{" ws key colon value ws ("," ws key colon value ws)* "}",
// the same for arrays, colon being ws ":" ws. None outside the root value.
class json_builder {
 public:
  json_builder(grammar& g, const json_options& options) : g_(g), o_(options) {}

  int32_t cat(std::vector<int32_t> items);  // a seq of the items that are not -1
  int32_t any(std::vector<int32_t> items);  // an alt (one item: itself; none: nothing)
  int32_t ws();                             // the ws rule; -1 in the compact forms
  int32_t after() { return ws(); }          // after a value inside [] or {}
  int32_t comma();                          // "," ws | "," | ", "
  int32_t colon();                          // ws ":" ws | ":" | ": "

  int32_t char_node();  // new nodes: one character of a string's content
  int32_t chr();        // the same as the rule "char"
  int32_t string() { return g_.ref(string_rule()); }
  int32_t integer() { return g_.ref(integer_rule()); }
  int32_t number() { return g_.ref(number_rule()); }
  int32_t boolean();
  int32_t null();
  int32_t value() { return g_.ref(value_rule()); }
  int32_t value_rule();
  int32_t object_rule();  // any JSON object
  int32_t unsigned_number();  // new nodes: a number without the '-'

 private:
  int32_t string_rule();
  int32_t integer_rule();
  int32_t number_rule();
  int32_t natural();  // new nodes: 0 | [1-9][0-9]*
  void define_values();

  grammar& g_;
  json_options o_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1;
  int32_t boolean_ = -1, null_ = -1, value_ = -1, object_ = -1, array_ = -1;
};

// The canonical decimal spellings (no leading zeros, no "-0") of the
// integers in [lo, hi]; an absent bound is unbounded. Requires lo <= hi
// where both are given.
int32_t integer_range(grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi);

// A regex (grammar/regex.h) for a JSON Schema "format", matching the raw
// content between the quotes; nullptr for a format not supported.
const char* format_regex(std::string_view format);

// `text` as a JSON string literal, quotes included: " \ and control
// characters escaped (\n \r \t \b \f, else \u00XX), everything else as is.
std::string json_quote(std::string_view text);

// A double the way a JSON text would spell it: the shortest form that
// reads back as the same value.
std::string format_double(double value);

// Where a JSON text stops being valid (a byte offset), or npos when this
// scanner finds no error (simdjson may still reject it, e.g. for depth).
size_t json_error_offset(std::string_view text);

using element = simdjson::dom::element;
using element_type = simdjson::dom::element_type;
using json_object = simdjson::dom::object;
using json_array = simdjson::dom::array;

// Helpers of the compiler (json_schema.cpp).
std::string child(const std::string& path, std::string_view key);  // a JSON pointer one step down
std::string child(const std::string& path, std::string_view key, size_t index);
error fail(const std::string& what, const std::string& path);  // "JSON Schema: <what> at <path>"
bool member(json_object o, std::string_view key, element& out);
bool is_number(element e);

// One schema turned into one grammar: each schema object a node, each $ref
// target a rule (memoized by pointer, compiled from a queue, so recursion
// works). The types' keywords are in json_schema_types.cpp.
class schema_compiler {
 public:
  schema_compiler(const json_options& options, element root)
      : options_(options), j_(g_, options), root_(root) {}

  result<grammar> run();  // the grammar, its root rule "root"

 private:
  struct pending {
    int32_t rule;
    element schema;
    std::string path;
  };

  result<int32_t> compile(element s, const std::string& path);
  result<int32_t> compile_ref(element ref, const std::string& path);
  result<int32_t> compile_values(std::vector<element> values, const std::vector<std::string_view>& types);
  result<int32_t> compile_type(std::string_view type, json_object o, const std::string& path);
  result<int32_t> compile_object(json_object o, const std::string& path);
  result<int32_t> compile_array(json_object o, const std::string& path);
  result<int32_t> compile_string(json_object o, const std::string& path);
  result<int32_t> compile_integer(json_object o, const std::string& path);
  result<int32_t> compile_number(json_object o, const std::string& path);
  result<std::vector<std::string_view>> types_of(json_object o, const std::string& path);
  result<int32_t> count(json_object o, std::string_view key, const std::string& path, int32_t absent);
  result<std::optional<int64_t>> integer_bound(element e, std::string_view key, bool lower,
                                               bool exclusive, const std::string& path);
  bool resolve(std::string_view pointer, element& out) const;
  int32_t literal(element e);

  // The schema as a rule, to be referenced from several places.
  result<int32_t> rule_of(element s, const std::string& path) {
    auto n = compile(s, path);
    if (!n) return n;
    if (g_.at(*n).kind == node::rule_ref) return g_.at(*n).rule;
    return g_.add_rule(path.empty() ? "root'" : path, *n);
  }

  json_options options_;
  grammar g_;
  json_builder j_;
  element root_;
  std::map<std::string, int32_t, std::less<>> refs_;  // $ref pointer -> rule
  std::deque<pending> pending_;                       // $ref rules still to define
};

}  // namespace troupe::grammar::json_schema_detail
