// Tagged JSON sequences (grammar/structural.h): the spec's JSON form round
// trips, items are alternatives each with its own schema, the separator,
// prefix, suffix and item counts hold, and a bad schema names its item.
#include <gtest/gtest.h>

#include "grammar/structural.h"
#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

structural_spec two_items() {
  structural_spec spec;
  spec.prefix = "<calls>";
  spec.separator = "|";
  spec.suffix = "</calls>";
  spec.min_items = 1;
  spec.max_items = 2;
  spec.items.push_back({"A=", R"({"type":"integer","minimum":0,"maximum":9})", ";", false});
  spec.items.push_back({"B=", R"({"type":"object","properties":{"x":{"const":true}}})", ";", true});
  return spec;
}

bool admits(const structural_spec& spec, const std::string& text) {
  json_options options;
  options.any_whitespace = false;
  auto g = structural_grammar(structural_to_json(spec), options);
  if (!g) {
    ADD_FAILURE() << g.error_message();
    return false;
  }
  return grammar_accepts(*g, text);
}

TEST(structural, spec_round_trips) {
  const structural_spec spec = two_items();
  auto back = parse_structural(structural_to_json(spec));
  ASSERT_TRUE(back) << back.error_message();
  EXPECT_EQ(back->prefix, spec.prefix);
  EXPECT_EQ(back->max_items, 2);
  ASSERT_EQ(back->items.size(), 2u);
  EXPECT_EQ(back->items[1].schema, spec.items[1].schema);
  EXPECT_TRUE(back->items[1].strict);
  EXPECT_FALSE(parse_structural("{}"));
  EXPECT_FALSE(parse_structural("[1]"));
}

TEST(structural, items_separator_and_counts) {
  structural_spec spec = two_items();
  EXPECT_TRUE(admits(spec, "<calls>A=7;</calls>"));
  EXPECT_TRUE(admits(spec, "<calls>B={\"x\": true};|A=0;</calls>"));  // json.dumps' separators
  EXPECT_FALSE(admits(spec, "<calls>B={\"x\":true};</calls>"));
  EXPECT_FALSE(admits(spec, "<calls>B={\"x\": true, \"y\": 1};</calls>"));  // strict: no more keys
  EXPECT_FALSE(admits(spec, "<calls>A=10;</calls>"));
  EXPECT_FALSE(admits(spec, "<calls></calls>"));
  EXPECT_FALSE(admits(spec, "<calls>A=1;|A=2;|A=3;</calls>"));  // max_items 2
  EXPECT_FALSE(admits(spec, "A=1;"));
  spec.max_items = -1;
  EXPECT_TRUE(admits(spec, "<calls>A=1;|A=2;|A=3;</calls>"));
  spec.min_items = 2;
  EXPECT_FALSE(admits(spec, "<calls>A=1;</calls>"));
}

TEST(structural, errors_name_the_item) {
  structural_spec spec = two_items();
  spec.items[1].schema = R"({"type":"object","not":{}})";
  json_options options;
  auto g = structural_grammar(structural_to_json(spec), options);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error_message(), "items[1]: JSON Schema: unsupported keyword 'not' at the root");
  spec = two_items();
  spec.min_items = 0;
  EXPECT_FALSE(structural_grammar(structural_to_json(spec), options));
}

}  // namespace
}  // namespace troupe::grammar
