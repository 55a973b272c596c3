// json_schema: each schema's grammar accepts exactly the JSON texts that
// validate (read through the compiled automaton, grammar_accepts):
// property subsets, nesting, arrays' counts, enum/const, combinators,
// recursive $refs, integer ranges checked exhaustively, string lengths in
// characters, patterns, formats, whitespace options, json_object; and the
// error messages, each naming the keyword and where it is.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/compiled.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

json_options compact(bool compact_separators = true) {
  json_options o;
  o.any_whitespace = false;
  o.compact_separators = compact_separators;
  return o;
}

void check(std::string_view schema, const std::vector<std::string>& yes, const std::vector<std::string>& no,
           const json_options& options = {}) {
  SCOPED_TRACE(std::string("schema ") + std::string(schema));
  const result<grammar> g = json_schema_grammar(schema, options);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->root(), g->find_rule("root"));
  for (const std::string& s : yes) EXPECT_TRUE(grammar_accepts(*g, s)) << "should accept " << s;
  for (const std::string& s : no) EXPECT_FALSE(grammar_accepts(*g, s)) << "should reject " << s;
}

std::string error_of(std::string_view schema, const json_options& options = {}) {
  const result<grammar> g = json_schema_grammar(schema, options);
  return g.ok() ? std::string("(no error)") : g.error_message();
}

// ---- objects -------------------------------------------------------------------

TEST(json_schema, every_subset_of_optional_properties_in_order) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"], "additionalProperties": false})";
  const result<grammar> g = json_schema_grammar(schema, compact());
  ASSERT_TRUE(g.ok()) << g.error_message();
  const std::string pairs[] = {R"("a":1)", R"("b":"x")", R"("c":true)"};
  for (int mask = 0; mask < 8; ++mask) {
    std::string text = "{";
    for (int i = 0; i < 3; ++i) {
      if (!(mask >> i & 1)) continue;
      if (text.size() > 1) text += ',';
      text += pairs[i];
    }
    text += '}';
    EXPECT_EQ(grammar_accepts(*g, text), (mask & 2) != 0) << text;
  }
  for (const char* bad : {R"({"b":"x","a":1})", R"({,"b":"x"})", R"({"b":"x",})", R"({"a":1,,"b":"x"})",
                          R"({"a":1"b":"x"})", R"({"b":"x","b":"x"})", R"({"b":"x","d":1})",
                          R"({"a":"1","b":"x"})", R"({"b":"x","c":null})", R"({"b":"x"} )"}) {
    EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
  }
}

TEST(json_schema, whitespace_between_every_token) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}},
      "required": ["a"], "additionalProperties": false})";
  check(schema, {R"({"a":1})", R"({ "a" : 1 })", "{\n\t\"a\":\n1 ,\n \"b\" : [ 1 ,2 ] }", R"({"a":1,"b":[]})",
                 R"({"a":1,"b":[ ]})"},
        {R"( {"a":1})", R"({"a":1} )", "{\"a\":1\r}", R"({"a":1,"b":[1 2]})"});
  json_options two;
  two.max_whitespace = 2;
  check(schema, {R"({"a":  1})", "{\n\n\"a\":1}"}, {R"({"a":   1})", "{ \n\t\"a\":1}"}, two);
  json_options unbounded;
  unbounded.max_whitespace = -1;
  check(schema, {"{\"a\":" + std::string(100, ' ') + "1}"}, {}, unbounded);
  check(schema, {R"({"a":1,"b":[1,2]})"}, {R"({"a": 1})", R"({ "a":1})", R"({"a":1, "b":[1,2]})"}, compact());
  check(schema, {R"({"a": 1, "b": [1, 2]})", R"({"a": 1})"}, {R"({"a":1,"b":[1,2]})", R"({"a":  1})"},
        compact(false));
}

TEST(json_schema, nested_objects) {
  check(R"({"type": "object", "properties": {"user": {"type": "object", "properties": {
          "name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"],
          "additionalProperties": false}}, "required": ["user"], "additionalProperties": false})",
        {R"({"user":{"name":"Ann","age":31}})", R"({ "user" : { "name" : "Ann" , "age" : 31 } })"},
        {R"({"user":{"name":"Ann"}})", R"({"user":{}})", R"({})", R"({"user":{"age":31,"name":"Ann"}})",
         R"({"user":{"name":"Ann","age":31,"x":1}})"});
}

TEST(json_schema, additional_properties) {
  const std::string listed = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  check(listed, {R"({"a":1})", R"({"a":1,"b":[true]})", R"({"b":2})", R"({})", R"({"b":2,"c":{}})"},
        {R"({"b":2,"a":1,})", R"({"a":1,})"});
  // Additional keys are any strings, a listed one included (documented).
  check(listed, {R"({"a":"x"})"}, {});
  json_options strict;
  strict.strict = true;
  check(listed, {R"({"a":1})", R"({})"}, {R"({"a":1,"b":2})", R"({"b":2})"}, strict);
  check(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})",
        {R"({"a":1,"b":2})"}, {}, strict);
  check(R"({"type": "object", "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "string"}})",
        {R"({"a":1,"x":"y"})", R"({"x":"y","z":""})", R"({})"}, {R"({"a":1,"x":2})", R"({"x":null})"});
  check(R"({"type": "object", "additionalProperties": false})", {"{}", "{ }", "{\n}"},
        {R"({"a":1})", "{,}", "[]"});
  check(R"({"type": "object", "additionalProperties": false})", {"{}"}, {"{ }"}, compact());
  // A required name that is not listed: required, after the listed ones.
  check(R"({"type": "object", "required": ["id"]})", {R"({"id":5})", R"({"id":"x","more":1})"},
        {R"({})", R"({"more":1})"});
  check(R"({"type": "object", "properties": {"a\"b/c": {"const": 1}}, "required": ["a\"b/c"]})",
        {R"({"a\"b/c":1})"}, {R"({"a\"b/c":2})"});
}

TEST(json_schema, shared_rules_are_made_once) {
  const result<grammar> g = json_schema_grammar(
      R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"},
          "c": {"type": "array", "items": {"type": "number"}}, "d": {}, "e": {"type": "number"}}})",
      json_options{});
  ASSERT_TRUE(g.ok()) << g.error_message();
  for (const char* name : {"string", "number", "value", "ws", "integer", "object", "array"}) {
    int count = 0;
    for (const rule& r : g->rules()) count += r.name == name;
    EXPECT_EQ(count, 1) << name << "\n" << g->to_string();
  }
}

// ---- arrays --------------------------------------------------------------------

TEST(json_schema, arrays_with_counts) {
  check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
        {"[1]", "[1,2,3]", "[ 1 , 2 ]", "[-4,0]"},
        {"[]", "[1,2,3,4]", "[1,]", "[,1]", "[\"a\"]", "[1 2]", "1"});
  check(R"({"type": "array", "items": {"type": "string"}})", {"[]", "[ ]", R"(["a","b"])", R"(["a"])"},
        {R"(["a",1])", "[[]]"});
  check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  check(R"({"type": "array", "minItems": 2})", {R"([1,"a"])", R"([null,{},[],true])"}, {"[]", "[1]"});
  check(R"({"type": "array", "items": false})", {"[]"}, {"[1]"});
  check(R"({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1}})",
        {"[[],[true]]", "[]"}, {"[[true,false]]", "[true]"});
}

TEST(json_schema, prefix_items) {
  check(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})",
        {R"([1,"a"])", "[1]", "[]"}, {R"([1,"a",2])", R"(["a"])", R"([1,2])"});
  check(R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"},
            "minItems": 2, "maxItems": 3})",
        {"[1,true]", "[1,true,false]"}, {"[1]", "[1,true,false,true]", "[true,true]", "[1,2]"});
  check(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "maxItems": 1})",
        {"[]", "[1]"}, {"[1,2]"});
  check(R"({"type": "array", "prefixItems": [{"type": "null"}]})", {"[]", "[null]", "[null,1,\"x\"]"},
        {"[1]"});
  check(R"({"type": "array", "items": [{"type": "integer"}, {"type": "string"}]})",
        {R"([1,"a",null])", "[1]"}, {R"(["a"])"});
}

// ---- enum, const, combinators ------------------------------------------------------------

TEST(json_schema, enum_and_const) {
  check(R"({"enum": ["red", "green", null, 42, 1.5, true, {"a": [1, 2]}, [], "日本"]})",
        {R"("red")", R"("green")", "null", "42", "1.5", "true", R"({"a":[1,2]})", R"({ "a" : [ 1 , 2 ] })",
         "[]", R"("日本")"},
        {R"("blue")", "43", "false", R"({"a":[1]})", R"("Red")", "1.50", R"({"a":[1,2],"b":1})"});
  check(R"({"enum": [{"a": [1, 2]}]})", {R"({"a": [1, 2]})"}, {R"({"a":[1,2]})"}, compact(false));
  check(R"({"const": "a\"b\\c\nd\u0001"})", {R"("a\"b\\c\nd\u0001")"}, {R"("abcd")"});
  check(R"({"const": 2.0})", {"2", "2.0"}, {"2.00", "3"});
  check(R"({"const": -12345678901234})", {"-12345678901234"}, {"12345678901234"});
  check(R"({"type": "string", "enum": ["a", 1]})", {R"("a")"}, {"1"});
  check(R"({"type": ["integer", "null"], "enum": [1, 2.5, null, "x"]})", {"1", "null"}, {"2.5", R"("x")"});
}

TEST(json_schema, combinators_and_type_lists) {
  check(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})", {"5", R"("ab")"},
        {R"("abc")", "true", "1.5"});
  check(R"({"oneOf": [{"type": "boolean"}, {"type": "null"}], "description": "flag"})", {"true", "null"},
        {"0"});
  check(R"({"allOf": [{"type": "boolean"}]})", {"false"}, {"null"});
  check(R"({"type": ["string", "null"], "maxLength": 1})", {R"("a")", "null"}, {R"("ab")", "1"});
  check(R"({"type": ["integer", "array"], "minimum": 0, "items": {"type": "integer"}})", {"3", "[1,-1]"},
        {"-3", "[\"a\"]"});
}

TEST(json_schema, type_inferred_from_keywords) {
  check(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})", {R"({"a":1})"},
        {"1", R"({})", "[]"});
  check(R"({"items": {"type": "integer"}})", {"[1]"}, {"1", "{}"});
  check(R"({"minLength": 2})", {R"("ab")"}, {R"("a")", "12"});
  check(R"({"description": "anything"})", {"1", R"("x")", "[1,{\"a\":null}]", "{}"}, {"", "nul"});
  check("{}", {"1", "-2.5e3", "true", "null", R"({"a":[{},[]]})"}, {"", "[1,]", "tru"});
  check("true", {"[]", R"({ "x" : "y" })"}, {"{"});
}

TEST(json_schema, false_schemas_admit_nothing) {
  const result<grammar> g = json_schema_grammar("false", json_options{});
  ASSERT_TRUE(g.ok()) << g.error_message();
  const auto compiled = compiled_grammar::compile(*g);
  ASSERT_FALSE(compiled.ok());
  EXPECT_NE(compiled.error_message().find("admits no string"), std::string::npos) << compiled.error_message();
  check(R"({"type": "object", "properties": {"a": false, "b": {"type": "integer"}}})", {R"({"b":1})", "{}"},
        {R"({"a":1})"}, [] {
          json_options o;
          o.strict = true;
          return o;
        }());
}

// ---- $ref ----------------------------------------------------------------------

TEST(json_schema, recursive_linked_list) {
  check(R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
            "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
            "required": ["value", "next"], "additionalProperties": false}},
          "$ref": "#/$defs/node"})",
        {R"({"value":1,"next":null})", R"({"value":1,"next":{"value":2,"next":{"value":3,"next":null}}})"},
        {R"({"value":1})", R"({"value":1,"next":{"value":2}})", R"({"value":1,"next":{}})", "null"});
}

TEST(json_schema, recursive_tree_through_the_root) {
  check(R"({"type": "object", "properties": {"name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#"}}},
          "required": ["name", "children"], "additionalProperties": false})",
        {R"({"name":"a","children":[]})",
         R"({"name":"a","children":[{"name":"b","children":[]},{"name":"c","children":[{"name":"d","children":[]}]}]})"},
        {R"({"name":"a","children":[{"name":"b"}]})", R"({"name":"a","children":[1]})"});
}

TEST(json_schema, refs_through_definitions_and_escaped_pointers) {
  check(R"({"definitions": {"a/b": {"type": "integer"}, "t~": {"type": "string"}},
          "type": "array", "prefixItems": [{"$ref": "#/definitions/a~1b"}, {"$ref": "#/definitions/t~0"}],
          "items": {"$ref": "#/definitions/a~1b"}})",
        {R"([1,"x",2,3])", "[1]"}, {R"(["x"])", R"([1,"x","y"])"});
  // The same target from two places is one rule.
  const result<grammar> g = json_schema_grammar(
      R"({"$defs": {"p": {"type": "integer"}}, "type": "object",
          "properties": {"x": {"$ref": "#/$defs/p"}, "y": {"$ref": "#/$defs/p"}}})",
      json_options{});
  ASSERT_TRUE(g.ok()) << g.error_message();
  int count = 0;
  for (const rule& r : g->rules()) count += r.name == "#/$defs/p";
  EXPECT_EQ(count, 1) << g->to_string();
}

// ---- integers --------------------------------------------------------------------

void check_integer_range(const std::string& schema, int64_t lo, int64_t hi, int64_t from, int64_t to) {
  SCOPED_TRACE(schema);
  const result<grammar> g = json_schema_grammar(schema, json_options{});
  ASSERT_TRUE(g.ok()) << g.error_message();
  for (int64_t v = from; v <= to; ++v) {
    EXPECT_EQ(grammar_accepts(*g, std::to_string(v)), lo <= v && v <= hi) << v;
  }
  for (const char* bad : {"-0", "00", "01", "-01", "007", "+1", "1.0", "", "-", "1e1"}) {
    EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
  }
}

TEST(json_schema, integer_ranges_exactly) {
  const std::pair<int64_t, int64_t> ranges[] = {{0, 0},     {0, 9},    {1, 100}, {-5, 5},   {-123, -7},
                                                {95, 1005}, {-1, -1},  {-10, 0}, {13, 13},  {-200, 37}};
  for (auto [lo, hi] : ranges) {
    const std::string schema = R"({"type": "integer", "minimum": )" + std::to_string(lo) +
                               R"(, "maximum": )" + std::to_string(hi) + "}";
    check_integer_range(schema, lo, hi, lo - 50, hi + 50);
  }
  check_integer_range(R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 7})", -2, 6, -60, 60);
  check_integer_range(
      R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true})",
      6, 9, -50, 60);
  check_integer_range(R"({"type": "integer", "minimum": 1.5, "maximum": 4.5})", 2, 4, -50, 55);
  check_integer_range(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": 2, "maximum": 9})", 3, 9, -50,
                      60);
}

TEST(json_schema, integer_one_sided_bounds) {
  check_integer_range(R"({"type": "integer", "minimum": 0})", 0, INT64_MAX, -50, 250);
  check_integer_range(R"({"type": "integer", "minimum": 17})", 17, INT64_MAX, -50, 250);
  check_integer_range(R"({"type": "integer", "minimum": -17})", -17, INT64_MAX, -80, 150);
  check_integer_range(R"({"type": "integer", "maximum": -3})", INT64_MIN, -3, -250, 50);
  check_integer_range(R"({"type": "integer", "maximum": 42})", INT64_MIN, 42, -150, 150);
  check(R"({"type": "integer", "minimum": 0})", {"123456789012345678901234567890"},
        {"-123456789012345678901234567890"});
  check(R"({"type": "integer", "maximum": 0})", {"-123456789012345678901234567890", "0"}, {"1"});
  check(R"({"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807})",
        {"-9223372036854775808", "9223372036854775807", "0", "-1"},
        {"-9223372036854775809", "9223372036854775808", "10000000000000000000"});
  check(R"({"type": "integer"})", {"0", "-0", "123", "-45"}, {"01", "1.0", "+1", "1e3", ""});
}

// ---- numbers, booleans, null -------------------------------------------------------------

TEST(json_schema, numbers) {
  check(R"({"type": "number"})", {"0", "-0", "1.5", "-1.5e-3", "1E+9", "10", "0.0001"},
        {"01", "1.", ".5", "+1", "1e", "--1", "NaN", "1.5.2", ""});
  check(R"({"type": "number", "minimum": 0})", {"0", "2.5", "1e10"}, {"-1", "-0.5"});
  check(R"({"type": "number", "exclusiveMaximum": 0})", {"-0.5", "-3"}, {"0", "1", "0.5"});
  check(R"({"type": "number", "minimum": -5, "maximum": 5})", {"-5", "7.5"}, {"x"});  // bounds not checked
  check(R"({"type": "boolean"})", {"true", "false"}, {"null", "True", "1"});
  check(R"({"type": "null"})", {"null"}, {"false", "nil"});
}

// ---- strings -------------------------------------------------------------------

TEST(json_schema, strings_are_valid_json_strings) {
  check(R"({"type": "string"})",
        {R"("")", R"("a\"b")", R"("\/\\\b\f\n\r\t")", R"("\uABCD\u00e9")", "\"é😀\x7f\""},
        {"\"a\nb\"", R"("a\x")", R"("a\")", "\"\xff\"", R"("\u12")", "abc", R"("a"b")", "\"\x01\"",
         "\"\xed\xa0\x80\""});
}

TEST(json_schema, string_lengths_count_characters) {
  check(R"({"type": "string", "minLength": 2, "maxLength": 3})",
        {R"("ab")", R"("abc")", R"("é日")", R"("😀😀😀")", R"("a\n")", R"("\u00e9x")", R"("\"\\\/")"},
        {R"("a")", R"("abcd")", R"("😀")", R"("")", R"("😀😀😀😀")", R"("\n")"});
  check(R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"});
  check(R"({"type": "string", "minLength": 1})", {R"("a")", R"("日本語です")"}, {R"("")"});
}

TEST(json_schema, patterns) {
  check(R"({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"})", {R"("ab-12")", R"("x-00")"},
        {R"("ab-1")", R"("AB-12")", R"("ab-123")", R"("")", "ab-12"});
  check(R"({"type": "string", "pattern": "(cat|dog)s?"})", {R"("cat")", R"("dogs")"}, {R"("a cat")"});
}

TEST(json_schema, formats) {
  auto quoted = [](std::vector<std::string> v) {
    for (std::string& s : v) s = '"' + s + '"';
    return v;
  };
  check(R"({"type": "string", "format": "date"})", quoted({"2024-02-29", "1999-12-31"}),
        quoted({"2024-13-01", "2024-1-01", "2024-01-32", "24-01-01", ""}));
  check(R"({"type": "string", "format": "time"})", quoted({"12:34:56Z", "23:59:60+05:30", "00:00:00.123z"}),
        quoted({"24:00:00Z", "12:34:56", "12:34Z", "12:60:00Z"}));
  check(R"({"type": "string", "format": "date-time"})", quoted({"2024-05-01T12:00:00Z", "2024-05-01t12:00:00.5-01:00"}),
        quoted({"2024-05-01 12:00:00Z", "2024-05-01", "T12:00:00Z"}));
  check(R"({"type": "string", "format": "email"})", quoted({"a.b+c@example.com", "x@y", "o'neil@ex-ample.org"}),
        quoted({"@x.com", "a@", "a@-x.com", "a b@x.com", "a@x..com", ".a@x.com"}));
  check(R"({"type": "string", "format": "uuid"})", quoted({"123e4567-e89b-12d3-a456-426614174000"}),
        quoted({"123e4567-e89b-12d3-a456-42661417400", "123e4567e89b12d3a456426614174000",
                "g23e4567-e89b-12d3-a456-426614174000"}));
  check(R"({"type": "string", "format": "ipv4"})", quoted({"192.168.0.1", "255.255.255.255", "0.0.0.0"}),
        quoted({"256.1.1.1", "01.1.1.1", "1.2.3", "1.2.3.4.5"}));
  check(R"({"type": "string", "format": "uri"})",
        quoted({"https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c", "http://x/%20y"}),
        quoted({"example.com", "http://a b", "1http://x", "http://x/%zz"}));
}

// ---- json_object ---------------------------------------------------------------

TEST(json_schema, json_object_grammar_any_object) {
  const grammar g = json_object_grammar(json_options{});
  for (const char* yes : {"{}", "{ }", R"({"a":1})", R"({"a":1,"b":[true,null,{"c":"d"}],"e":-1.5e10})",
                          R"({ "a" : { "b" : [ ] } })", R"({"a":1,"a":2})"}) {
    EXPECT_TRUE(grammar_accepts(g, yes)) << yes;
  }
  for (const char* no : {"[]", "1", R"("x")", "null", R"({"a"})", R"({"a":1,})", "{a:1}", R"({"a":01})", "",
                         " {}", R"({"a":[1,]})"}) {
    EXPECT_FALSE(grammar_accepts(g, no)) << no;
  }
  const grammar c = json_object_grammar(compact());
  EXPECT_TRUE(grammar_accepts(c, R"({"a":[1,{"b":null}]})"));
  EXPECT_FALSE(grammar_accepts(c, R"({"a": 1})"));
  EXPECT_FALSE(grammar_accepts(c, "{ }"));
  const grammar s = json_object_grammar(compact(false));
  EXPECT_TRUE(grammar_accepts(s, R"({"a": [1, {"b": null}], "c": 2})"));
  EXPECT_FALSE(grammar_accepts(s, R"({"a":1})"));
}

// ---- errors --------------------------------------------------------------------

TEST(json_schema, errors_name_the_keyword_and_the_place) {
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {"not": {}}}})"),
            "JSON Schema: unsupported keyword 'not' at /properties/a");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"type": "string", "contentMediaType": "x"}})"),
            "JSON Schema: unsupported keyword 'contentMediaType' at /items");
  EXPECT_EQ(error_of(R"({"properties": {"a/b~": {"not": 1}}})"),
            "JSON Schema: unsupported keyword 'not' at /properties/a~1b~0");
  EXPECT_EQ(error_of(R"({"foo": 1})"), "JSON Schema: unsupported keyword 'foo' at the root");
  EXPECT_EQ(error_of(R"({"type": "array", "additionalItems": false})"),
            "JSON Schema: unsupported keyword 'additionalItems' at the root");
  EXPECT_EQ(error_of(R"({"anyOf": [{"type": "string"}, {"type": "integer", "multipleOf": 2}]})"),
            "JSON Schema: unsupported keyword 'multipleOf' at /anyOf/1");
  EXPECT_EQ(error_of(R"({"$defs": {"x": {"uniqueItems": true}}, "$ref": "#/$defs/x"})"),
            "JSON Schema: unsupported keyword 'uniqueItems' at /$defs/x");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}, {"minLength": 1}]}}})"),
            "JSON Schema: allOf with more than one schema is not supported at /properties/x");
  EXPECT_EQ(error_of(R"({"type": "string", "anyOf": [{"minLength": 1}]})"),
            "JSON Schema: 'anyOf' together with 'type' is not supported at the root");
}

TEST(json_schema, errors_for_bad_values) {
  EXPECT_EQ(error_of(R"({"type": "array", "minItems": -1})"),
            "JSON Schema: 'minItems' must be a non-negative integer at the root");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"type": "array", "maxItems": "3"}})"),
            "JSON Schema: 'maxItems' must be a non-negative integer at /items");
  EXPECT_EQ(error_of(R"({"type": "array", "minItems": 3, "maxItems": 2})"),
            "JSON Schema: 'maxItems' is less than 'minItems' at the root");
  EXPECT_EQ(error_of(R"({"type": "string", "minLength": 1.5})"),
            "JSON Schema: 'minLength' must be a non-negative integer at the root");
  EXPECT_EQ(error_of(R"({"type": "text"})"), "JSON Schema: unknown type 'text' at the root");
  EXPECT_EQ(error_of(R"({"type": []})"),
            "JSON Schema: 'type' must be a type name or a non-empty array of them at the root");
  EXPECT_EQ(error_of(R"({"type": "string", "format": "hostname"})"),
            "JSON Schema: unsupported format 'hostname' at the root");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 5, "maximum": 3})"),
            "JSON Schema: no integer is within the bounds at the root");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": "0"})"), "JSON Schema: 'minimum' must be a number at the root");
  EXPECT_EQ(error_of(R"({"properties": {"a": 3}})"),
            "JSON Schema: a schema must be an object or a boolean at /properties/a");
  EXPECT_EQ(error_of(R"({"type": "object", "required": ["a"], "additionalProperties": false})"),
            "JSON Schema: required property 'a' is not in 'properties' and additionalProperties is false "
            "at the root");
  const std::string pattern = error_of(R"({"type": "string", "pattern": "a(b"})");
  EXPECT_EQ(pattern.rfind("JSON Schema: bad 'pattern' (regex: ", 0), 0u) << pattern;
  EXPECT_NE(pattern.find("at the root"), std::string::npos) << pattern;
}

TEST(json_schema, errors_for_refs) {
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/missing"})"), "JSON Schema: unresolved $ref '#/$defs/missing' at the root");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"$ref": "#/definitions/x"}, "definitions": {}})"),
            "JSON Schema: unresolved $ref '#/definitions/x' at /items");
  const std::string remote = error_of(R"({"$ref": "http://example.com/s.json"})");
  EXPECT_EQ(remote.rfind("JSON Schema: unsupported $ref 'http://example.com/s.json'", 0), 0u) << remote;
  EXPECT_EQ(error_of(R"({"$ref": 5})"), "JSON Schema: '$ref' must be a string at the root");
}

TEST(json_schema, errors_for_invalid_json) {
  const std::string trailing = error_of(R"({"type": "object",})");
  EXPECT_EQ(trailing.rfind("JSON Schema: invalid JSON at byte 18: ", 0), 0u) << trailing;
  const std::string empty = error_of("");
  EXPECT_EQ(empty.rfind("JSON Schema: invalid JSON at byte 0: ", 0), 0u) << empty;
  const std::string unclosed = error_of(R"({"type": "str)");
  EXPECT_EQ(unclosed.rfind("JSON Schema: invalid JSON at byte 13: ", 0), 0u) << unclosed;
  const std::string extra = error_of(R"({} x)");
  EXPECT_EQ(extra.rfind("JSON Schema: invalid JSON at byte 3: ", 0), 0u) << extra;
}

}  // namespace
}  // namespace troupe::grammar
