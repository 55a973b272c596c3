// grammar: the builder, codepoint classes as exactly the shortest-form UTF-8
// encodings of their codepoints, the readable form, the UTF-8 helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(cp, s);
  return s;
}

bool surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

bool in_set(const codepoint_ranges& ranges, uint32_t c) {
  if (c > 0x10FFFF || surrogate(c)) return false;
  return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first <= c && c <= r.second; });
}

// Where matches of node `id` starting at any position in `from` end (bit p:
// position p; strings of up to 30 bytes): a direct reading of the nodes
// codepoints() builds (bytes, seq, alt), fast enough for exhaustive checks.
uint32_t ends(const grammar& g, int32_t id, std::string_view s, uint32_t from) {
  const node& n = g.at(id);
  uint32_t out = 0;
  switch (n.kind) {
    case node::bytes:
      for (size_t p = 0; p < s.size(); ++p)
        if ((from >> p & 1) && n.set.test(static_cast<uint8_t>(s[p]))) out |= 1u << (p + 1);
      return out;
    case node::alt:
      for (int32_t item : n.items) out |= ends(g, item, s, from);
      return out;
    case node::seq:
      for (int32_t item : n.items) from = ends(g, item, s, from);
      return from;
    default:
      ADD_FAILURE() << "codepoints() built a node of kind " << n.kind;
      return 0;
  }
}

bool direct_accepts(const grammar& g, int32_t id, std::string_view s) {
  return s.size() <= 30 && (ends(g, id, s, 1) >> s.size() & 1);
}

// Checks codepoints(ranges) every way: all codepoints through the nodes
// directly, every 1- and 2-byte string and many 3-byte ones, and a sample
// (every codepoint below 0x800, a stride above, every range's edges)
// through the compiled automaton.
void check_codepoints(const codepoint_ranges& ranges) {
  grammar g;
  const int32_t id = g.codepoints(ranges);
  g.set_root(g.add_rule("root", id));

  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (surrogate(c)) continue;
    ASSERT_EQ(direct_accepts(g, id, utf8(c)), in_set(ranges, c)) << std::hex << "U+" << c;
  }
  // Any accepted byte string is exactly one valid encoding of a member.
  auto check_bytes = [&](const std::string& s) {
    std::vector<uint32_t> cps;
    const bool valid = decode_utf8(s, cps) && cps.size() == 1 && in_set(ranges, cps[0]);
    ASSERT_EQ(direct_accepts(g, id, s), valid) << "bytes of length " << s.size() << " starting " << int(uint8_t(s[0]));
  };
  for (int a = 0; a < 256; ++a) {
    check_bytes(std::string(1, char(a)));
    for (int b = 0; b < 256; ++b) check_bytes(std::string{char(a), char(b)});
  }
  for (int a : {0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0})
    for (int b = 0x70; b < 0xC4; ++b)
      for (int c = 0x7C; c < 0xC4; ++c) check_bytes(std::string{char(a), char(b), char(c)});
  EXPECT_FALSE(direct_accepts(g, id, ""));

  std::vector<uint32_t> sample = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (uint32_t c = 0; c < 0x800; ++c) sample.push_back(c);
  for (uint32_t c = 0x800; c < 0x3000; c += 13) sample.push_back(c);
  for (uint32_t c = 0x3000; c <= 0x10FFFF; c += 1021) sample.push_back(c);
  for (const auto& [lo, hi] : ranges) {
    for (uint32_t c : {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1}) sample.push_back(c);
  }
  for (uint32_t c : sample) {
    if (c > 0x10FFFF || surrogate(c)) continue;
    EXPECT_EQ(grammar_accepts(g, utf8(c)), in_set(ranges, c)) << std::hex << "U+" << c;
  }
  EXPECT_FALSE(grammar_accepts(g, ""));
  EXPECT_FALSE(grammar_accepts(g, "\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(grammar_accepts(g, "\xE0\x80\x80"));      // overlong
  EXPECT_FALSE(grammar_accepts(g, "\xF0\x80\x80\x80"));  // overlong
  EXPECT_FALSE(grammar_accepts(g, "\xED\xA0\x80"));      // surrogate D800
  EXPECT_FALSE(grammar_accepts(g, "\xED\xBF\xBF"));      // surrogate DFFF
  EXPECT_FALSE(grammar_accepts(g, "\xF4\x90\x80\x80"));  // 0x110000
}

TEST(grammar_codepoints, everything) { check_codepoints({{0, 0x10FFFF}}); }

TEST(grammar_codepoints, ascii_and_greek) { check_codepoints({{'a', 'z'}, {0x3B1, 0x3C9}}); }

TEST(grammar_codepoints, all_but_one) { check_codepoints({{0, 'a' - 1}, {'a' + 1, 0x10FFFF}}); }

TEST(grammar_codepoints, encoding_boundaries_and_surrogates) {
  check_codepoints({{0x80, 0x80}, {0x7FF, 0x801}, {0xD7FF, 0xE000}, {0xFFFF, 0x10000}, {0x10FFFF, 0x10FFFF}});
}

TEST(grammar_codepoints, unsorted_overlapping_and_out_of_range) {
  check_codepoints({{0x1000, 0x2000}, {0x500, 0x1500}, {0x20000, 0x3FFFF}, {0x2001, 0x2001}, {0x110000, 0x120000}});
}

TEST(grammar_codepoints, random_sets) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 2; ++round) {
    codepoint_ranges ranges;
    for (int i = 0; i < 12; ++i) {
      const uint32_t lo = rng() % 0x110000;
      const uint32_t len = (i % 3 == 0) ? rng() % 5 : rng() % 0x4000;
      ranges.push_back({lo, std::min<uint32_t>(lo + len, 0x10FFFF)});
    }
    SCOPED_TRACE(round);
    check_codepoints(ranges);
  }
}

TEST(grammar_codepoints, empty_sets_are_nothing) {
  for (const codepoint_ranges& r : {codepoint_ranges{}, codepoint_ranges{{0xD800, 0xDFFF}},
                                    codepoint_ranges{{0x110000, 0x200000}}}) {
    grammar g;
    const int32_t id = g.codepoints(r);
    EXPECT_EQ(g.at(id).kind, node::bytes);
    EXPECT_TRUE(g.at(id).set.none());
  }
}

TEST(grammar_codepoints, compact) {
  grammar g;
  const int32_t ascii = g.codepoints({{'a', 'z'}, {'0', '9'}, {'_', '_'}});
  ASSERT_EQ(g.at(ascii).kind, node::bytes);  // the ASCII part is one bytes node
  EXPECT_EQ(g.at(ascii).set.count(), 37u);

  grammar all;
  all.codepoints({{0, 0x10FFFF}});
  EXPECT_LE(all.nodes().size(), 45u);

  grammar greek;  // [αγε]: one lead byte CE, one set of continuation bytes
  greek.codepoints({{0x3B1, 0x3B1}, {0x3B3, 0x3B3}, {0x3B5, 0x3B5}});
  EXPECT_LE(greek.nodes().size(), 3u);

  grammar cjk;
  cjk.codepoints({{0x4E00, 0x9FFF}});
  EXPECT_LE(cjk.nodes().size(), 12u);
}

TEST(grammar_builder, nodes) {
  grammar g;
  const int32_t e = g.literal("");
  EXPECT_EQ(g.at(e).kind, node::seq);
  EXPECT_TRUE(g.at(e).items.empty());
  const int32_t none = g.alt({});
  EXPECT_EQ(g.at(none).kind, node::bytes);
  EXPECT_TRUE(g.at(none).set.none());
  const int32_t a = g.byte('a');
  EXPECT_EQ(g.seq({a}), a);
  EXPECT_EQ(g.alt({a}), a);
  const int32_t r = g.repeat(a, 2, 5);
  EXPECT_EQ(g.at(r).kind, node::repeat);
  EXPECT_EQ(g.at(r).items, std::vector<int32_t>{a});
  EXPECT_EQ(g.at(r).min, 2);
  EXPECT_EQ(g.at(r).max, 5);
  const int32_t range = g.byte_range('0', '9');
  EXPECT_EQ(g.at(range).set.count(), 10u);
  EXPECT_TRUE(g.at(range).set.test('5'));
  const int32_t lit = g.literal("hi");
  ASSERT_EQ(g.at(lit).kind, node::seq);
  ASSERT_EQ(g.at(lit).items.size(), 2u);
  EXPECT_TRUE(g.at(g.at(lit).items[1]).set.test('i'));
}

TEST(grammar_builder, rules) {
  grammar g;
  const int32_t x = g.add_rule("x");
  EXPECT_EQ(g.rules()[x].body, -1);
  const int32_t y = g.add_rule("y", g.ref(x));
  g.add_rule("x", g.empty());
  g.set_body(x, g.literal("x"));
  EXPECT_EQ(g.find_rule("x"), x);  // the first of that name
  EXPECT_EQ(g.find_rule("y"), y);
  EXPECT_EQ(g.find_rule("z"), -1);
  EXPECT_GE(g.rules()[x].body, 0);
  EXPECT_EQ(g.at(g.rules()[y].body).kind, node::rule_ref);
  EXPECT_EQ(g.at(g.rules()[y].body).rule, x);
}

TEST(grammar_builder, accepts) {
  grammar g;
  g.set_root(g.add_rule("root", g.seq({g.literal("ab"), g.star(g.byte_range('0', '9')),
                                       g.optional(g.alt({g.literal("x"), g.literal("yz")}))})));
  for (const char* yes : {"ab", "ab123", "abx", "ab9yz"}) EXPECT_TRUE(grammar_accepts(g, yes)) << yes;
  for (const char* no : {"", "a", "ab1x2", "abxyz", "aab"}) EXPECT_FALSE(grammar_accepts(g, no)) << no;

  grammar rep;
  rep.set_root(rep.add_rule("root", rep.repeat(rep.literal("ab"), 2, 3)));
  EXPECT_FALSE(grammar_accepts(rep, "ab"));
  EXPECT_TRUE(grammar_accepts(rep, "abab"));
  EXPECT_TRUE(grammar_accepts(rep, "ababab"));
  EXPECT_FALSE(grammar_accepts(rep, "abababab"));

  grammar parens;  // p ::= ("(" p ")")*
  const int32_t p = parens.add_rule("p");
  parens.set_body(p, parens.star(parens.seq({parens.byte('('), parens.ref(p), parens.byte(')')})));
  parens.set_root(p);
  for (const char* yes : {"", "()", "(())()", "((()))"}) EXPECT_TRUE(grammar_accepts(parens, yes)) << yes;
  for (const char* no : {"(", "(()", ")(", "())"}) EXPECT_FALSE(grammar_accepts(parens, no)) << no;

  grammar none;  // nothing() admits no string (compile refuses a root of only that)
  none.set_root(none.add_rule("root", none.alt({none.seq({none.byte('a'), none.nothing()}), none.byte('b')})));
  EXPECT_TRUE(grammar_accepts(none, "b"));
  EXPECT_FALSE(grammar_accepts(none, "a"));
  EXPECT_FALSE(grammar_accepts(none, ""));
  grammar empty;
  empty.set_root(empty.add_rule("root", empty.empty()));
  EXPECT_TRUE(grammar_accepts(empty, ""));
  EXPECT_FALSE(grammar_accepts(empty, "a"));
}

TEST(grammar_to_string, readable) {
  grammar g;
  const int32_t digit = g.add_rule("digit", g.byte_range('0', '9'));
  byte_set control;
  for (int b = 0; b < 0x20; ++b) control.set(b);
  g.set_root(g.add_rule("root", g.seq({g.literal("id:"), g.plus(g.ref(digit)),
                                       g.optional(g.alt({g.literal("x"), g.literal("yz")})), g.bytes(control)})));
  byte_set special;
  for (char c : {'-', ']', 'a', '"'}) special.set(static_cast<uint8_t>(c));
  g.add_rule("misc", g.seq({g.repeat(g.literal("ab"), 2, 5), g.repeat(g.byte('q'), 3, 3),
                            g.repeat(g.byte('\n'), 2, -1), g.bytes(special), g.bytes(~byte_set().set('a')),
                            g.empty(), g.nothing(), g.byte(0xff)}));
  g.add_rule("later");
  EXPECT_EQ(g.to_string(),
            "digit ::= [0-9]\n"
            "root ::= \"id:\" digit+ (\"x\" | \"yz\")? [\\x00-\\x1f]\n"
            "misc ::= \"ab\"{2,5} \"q\"{3} \"\\n\"{2,} [\"\\-\\]a] [^a] \"\" [] \"\\xff\"\n"
            "later ::= <undefined>\n");
}

TEST(grammar_utf8, known_encodings) {
  EXPECT_EQ(utf8('A'), "A");
  EXPECT_EQ(utf8(0), std::string(1, '\0'));
  EXPECT_EQ(utf8(0xE9), "\xC3\xA9");
  EXPECT_EQ(utf8(0x7FF), "\xDF\xBF");
  EXPECT_EQ(utf8(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(utf8(0xFFFF), "\xEF\xBF\xBF");
  EXPECT_EQ(utf8(0x1F600), "\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8(0x10FFFF), "\xF4\x8F\xBF\xBF");
  // Not scalar values: the replacement character.
  EXPECT_EQ(utf8(0xD800), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8(0x110000), "\xEF\xBF\xBD");
}

TEST(grammar_utf8, round_trips) {
  std::string text;
  std::vector<uint32_t> cps;
  for (uint32_t c = 0; c <= 0x10FFFF; c += (c < 0x3000 ? 1 : 97)) {
    if (surrogate(c)) continue;
    const std::string one = utf8(c);
    EXPECT_EQ(one.size(), c < 0x80 ? 1u : c < 0x800 ? 2u : c < 0x10000 ? 3u : 4u);
    std::vector<uint32_t> back{42, 43};  // replaced, not appended to
    ASSERT_TRUE(decode_utf8(one, back)) << c;
    ASSERT_EQ(back, std::vector<uint32_t>{c});
    text += one;
    cps.push_back(c);
  }
  std::vector<uint32_t> back;
  ASSERT_TRUE(decode_utf8(text, back));
  EXPECT_EQ(back, cps);
  EXPECT_TRUE(decode_utf8("", back));
  EXPECT_TRUE(back.empty());
}

TEST(grammar_utf8, strict_decoding) {
  std::vector<uint32_t> out;
  for (const char* bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xF0\x80\x80\x80",
                          "\xF0\x8F\xBF\xBF", "\xED\xA0\x80", "\xED\xBF\xBF", "\xF4\x90\x80\x80",
                          "\xF5\x80\x80\x80", "\xF8\x88\x80\x80\x80", "\xFF", "\x80", "a\xBF", "\xE2\x82",
                          "\xE2\x82z", "\xF0\x9F\x98", "\xC3"}) {
    EXPECT_FALSE(decode_utf8(bad, out)) << bad;
  }
  EXPECT_TRUE(decode_utf8("\xED\x9F\xBF\xEE\x80\x80", out));  // D7FF and E000 are fine
  EXPECT_EQ(out, (std::vector<uint32_t>{0xD7FF, 0xE000}));
}

}  // namespace
}  // namespace troupe::grammar
