// regex: patterns match exactly the whole strings they fully match in
// Python's re.fullmatch; everything outside the supported subset is an
// error naming the problem and its byte position.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

void check(std::string_view pattern, const std::vector<std::string>& yes, const std::vector<std::string>& no) {
  SCOPED_TRACE(std::string("pattern ") + std::string(pattern));
  const result<grammar> g = regex_grammar(pattern);
  ASSERT_TRUE(g.ok()) << g.error_message();
  ASSERT_GE(g->find_rule("root"), 0);
  EXPECT_EQ(g->root(), g->find_rule("root"));
  for (const std::string& s : yes) EXPECT_TRUE(grammar_accepts(*g, s)) << "should match '" << s << "'";
  for (const std::string& s : no) EXPECT_FALSE(grammar_accepts(*g, s)) << "should not match '" << s << "'";
}

void check_error(std::string_view pattern, std::string_view problem, size_t position) {
  SCOPED_TRACE(std::string("pattern ") + std::string(pattern));
  const result<grammar> g = regex_grammar(pattern);
  ASSERT_FALSE(g.ok());
  const std::string& m = g.error_message();
  EXPECT_EQ(m.rfind("regex: ", 0), 0u) << m;
  EXPECT_NE(m.find(problem), std::string::npos) << m;
  const std::string at = " at position " + std::to_string(position);
  EXPECT_TRUE(m.size() >= at.size() && m.compare(m.size() - at.size(), at.size(), at) == 0) << m;
}

TEST(regex, literals_and_empty) {
  check("abc", {"abc"}, {"", "ab", "abcd", "abC", "xabc"});
  check("", {""}, {"a", " "});
  check("a|", {"a", ""}, {"aa"});
  check("()", {""}, {"()"});
  check("héllo wörld", {"héllo wörld"}, {"hello world", "héllo"});
  check("日本", {"日本"}, {"日", "本日"});
}

TEST(regex, alternation_groups_and_repetition) {
  check("(ab|cd)*e", {"e", "abe", "cde", "cdabe", "ababcde"}, {"", "ae", "abce", "eab", "abab"});
  check("a{2,3}", {"aa", "aaa"}, {"", "a", "aaaa"});
  check("a{2}", {"aa"}, {"a", "aaa"});
  check("a{2,}", {"aa", "aaaaaaa"}, {"a", ""});
  check("a{,2}", {"", "a", "aa"}, {"aaa"});
  check("a{0}", {""}, {"a"});
  check("(?:ab)+c?", {"ab", "ababc"}, {"", "c", "abb"});
  check("(a|b){2}c?", {"ab", "ba", "bbc"}, {"a", "abab", "c"});
  check("x(y(z|w)*)?", {"x", "xy", "xyzwz"}, {"xz", "y"});
  check("(?P<year>\\d{4})-(?<month>\\d\\d)", {"2024-05"}, {"2024-5", "24-05"});
  check("cat|dog|bird", {"cat", "dog", "bird"}, {"catdog", "do", ""});
}

TEST(regex, lazy_quantifiers_change_nothing) {
  check("a+?b", {"ab", "aaab"}, {"b", "a"});
  check("a*?", {"", "aaa"}, {"b"});
  check("a{1,3}?b", {"ab", "aaab"}, {"aaaab", "b"});
  check("(ab)??c", {"c", "abc"}, {"ababc"});
  check("<.+?>", {"<a>", "<a><b>"}, {"<>"});
}

TEST(regex, anchors_at_the_ends) {
  check("^abc$", {"abc"}, {"", "abcabc", "ab"});
  check("^(a|b)$", {"a", "b"}, {"ab"});
  check("^a|^b$", {"a", "b"}, {"ab"});
  check("^$", {""}, {"a"});
}

TEST(regex, classes) {
  check("[abc]", {"a", "b", "c"}, {"d", "", "ab"});
  check("[a-z0-9_]+", {"abc_123"}, {"ABC", "a-b", ""});
  check("[^a]", {"b", "\n", "é", "😀", "Z"}, {"a", "", "bb"});
  check("[^\\d]", {"a", " "}, {"5"});
  check("[\\d\\s]", {"5", " ", "\t", "\n", "\v", "\f", "\r"}, {"a", "_"});
  check("[\\w-]+", {"a-b_c9"}, {"a b", "a.b"});
  check("[a\\-z]", {"a", "-", "z"}, {"b"});
  check("[-a]", {"-", "a"}, {"b"});
  check("[a-]", {"-", "a"}, {"b"});
  check("[]a]", {"]", "a"}, {"b"});
  check("[.*+?(){}|^$]", {".", "*", "+", "?", "(", ")", "{", "}", "|", "^", "$"}, {"a", "\\"});
  check("[\\]\\\\]", {"]", "\\"}, {"a"});
  check("[\\b]", {"\b"}, {"b"});
  check("[\\x41-\\x43\\u00e9]", {"A", "B", "C", "é"}, {"D", "e"});
  check("a[^\\x00-\\u{10FFFF}]|b", {"b"}, {"", "a", "aé", "a\n"});
}

TEST(regex, utf8_classes) {
  check("[α-ω]+", {"α", "ω", "αβγ", "λογος"}, {"", "Α", "a", "αa"});
  check("[α-ω]", {"α", "μ", "ω"}, {"ό", "Ω", "ϊ", "a", "αβ"});
  check("[😀-😂]", {"😀", "😁", "😂"}, {"😃", "🙂", "a"});
  check("[a-zà-ÿ]+", {"café", "naïve"}, {"Café"});
  check("[^α-ω]", {"a", "Ω", "😀", "\n"}, {"α", "ω", ""});
  check("[一-龥]+", {"日本語"}, {"abc", "日本語!"});
}

TEST(regex, dot) {
  check(".", {"a", " ", "é", "€", "😀", "\x7f", std::string(1, '\0'), "\r"}, {"\n", "", "ab", "\xC0\x80", "\xED\xA0\x80", "\xff"});
  check("a.c", {"abc", "a.c", "aéc"}, {"ac", "a\nc", "abbc"});
  check(".*", {"", "anything at all", "ünïcödé 😀"}, {"two\nlines"});
}

TEST(regex, escapes) {
  check("\\d{3}-\\d{4}", {"555-1234", "000-0000"}, {"5551234", "55-1234", "555-12345", "５５５-１２３４", "abc-defg"});
  check("\\w+\\s\\W", {"ab_9 !", "x\t."}, {"ab_9  !", "a b", "a !!"});
  check("\\D\\S", {"ab", "-x"}, {"1a", "a "});
  check("\\x41\\u00e9\\u{1F600}", {"Aé😀"}, {"Ae😀"});
  check("\\uD83D\\uDE00", {"😀"}, {"\xED\xA0\xBD\xED\xB8\x80"});
  check("\\t\\n\\r\\f\\v", {"\t\n\r\f\v"}, {"tnrfv"});
  check("\\0", {std::string(1, '\0')}, {"0", ""});
  check("a\\.b\\+\\*\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$\\/\\-", {"a.b+*?()[]{}|\\^$/-"}, {"axb+*?()[]{}|\\^$/-"});
  check("\\é", {"é"}, {"e"});
}

TEST(regex, braces_that_are_not_quantifiers_are_literals) {
  check("x{", {"x{"}, {"x"});
  check("a{b}", {"a{b}"}, {"ab"});
  check("a{,}", {"a{,}"}, {"a"});
  check("{", {"{"}, {""});
  check("}", {"}"}, {""});
  check("]", {"]"}, {""});
}

TEST(regex, realistic_patterns) {
  check("[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}",
        {"john.doe@example.com", "a+b@x.io", "x_y%z@sub.domain.org"},
        {"john@example", "@example.com", "john@example.c", "john doe@example.com", "john@@example.com"});
  check("\\w+([.-]?\\w+)*@\\w+([.-]?\\w+)*(\\.\\w{2,3})+", {"user.name@mail-server.co.uk"}, {"user@", "user@host"});
  check("-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?", {"0", "-0.5e10", "12", "3.14", "1E-7"}, {"01", "1.", ".5", "+1", "-"});
  check("\\d{4}-\\d{2}-\\d{2}", {"2024-01-31"}, {"2024-1-31", "2024/01/31"});
  check("(yes|no|maybe)", {"yes", "no", "maybe"}, {"Yes", "yesno"});
  check("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"});
  check("(\\+\\d{1,3} )?\\(\\d{3}\\) \\d{3}-\\d{4}", {"(555) 123-4567", "+1 (555) 123-4567"}, {"555 123-4567"});
}

TEST(regex, large_bounds) {
  check("a{10000}", {std::string(10000, 'a')}, {std::string(9999, 'a'), std::string(10001, 'a')});
  check("a{0,10000}", {"", std::string(10000, 'a')}, {std::string(10001, 'a')});
}

TEST(regex, errors) {
  check_error("ab)", "unbalanced ')'", 2);
  check_error(")", "unbalanced ')'", 0);
  check_error("(ab", "unbalanced '('", 0);
  check_error("a(b(c)", "unbalanced '('", 1);
  check_error("é)", "unbalanced ')'", 2);  // byte offsets, not codepoints
  check_error("[abc", "unterminated character class", 0);
  check_error("ab[^", "unterminated character class", 2);
  check_error("[]", "unterminated character class", 0);
  check_error("(a)b\\1", "backreferences are not supported", 4);
  check_error("(?P<n>a)(?P=n)", "backreferences are not supported", 8);
  check_error("(a)\\k<n>", "backreferences are not supported", 3);
  check_error("(?=a)", "lookaround is not supported", 0);
  check_error("(?!a)b", "lookaround is not supported", 0);
  check_error("a(?<=b)", "lookaround is not supported", 1);
  check_error("a(?<!b)", "lookaround is not supported", 1);
  check_error("*a", "nothing to repeat", 0);
  check_error("a|*", "nothing to repeat", 2);
  check_error("(+)", "nothing to repeat", 1);
  check_error("{2}", "nothing to repeat", 0);
  check_error("^*", "nothing to repeat", 1);
  check_error("a**", "multiple repeat", 2);
  check_error("a{2}{3}", "multiple repeat", 4);
  check_error("a*?+", "multiple repeat", 3);
  check_error("a{3,2}", "min repeat greater than max repeat", 1);
  check_error("ab{10001}", "repetition bound too large", 2);
  check_error("a{0,10001}", "repetition bound too large", 1);
  check_error("a{99999999999999999999}", "repetition bound too large", 1);
  check_error("a^b", "'^'", 1);
  check_error("(^a)", "'^'", 1);
  check_error("a$b", "'$'", 1);
  check_error("(a$)", "'$'", 2);
  check_error("\\bfoo", "word boundaries are not supported", 0);
  check_error("foo\\B", "word boundaries are not supported", 3);
  check_error("\\Afoo", "anchor", 0);
  check_error("\\q", "bad escape \\q", 0);
  check_error("a\\", "trailing backslash", 1);
  check_error("[z-a]", "bad character range z-a", 1);
  check_error("[\\d-z]", "bad character range", 1);
  check_error("[ω-α]", "bad character range", 1);
  check_error("\\xZZ", "bad \\x escape", 0);
  check_error("ab\\u12", "bad \\u escape", 2);
  check_error("\\u{110000}", "bad \\u escape", 0);
  check_error("\\uD800", "surrogate", 0);
  check_error("\\p{L}", "unicode property escapes are not supported", 0);
  check_error("(?P<1a>x)", "bad group name", 4);
  check_error("(?<name", "unterminated group name", 3);
  check_error("(?i)abc", "unsupported group syntax", 0);
  check_error("\\012", "octal escapes are not supported", 0);
  check_error("ab\xff", "not valid UTF-8", 2);
  check_error("\xC0\x80", "not valid UTF-8", 0);
  check_error(std::string(600, '(') + std::string(600, ')'), "nested too deeply", 500);
}

TEST(regex, add_regex_into_a_larger_grammar) {
  grammar g;
  const result<int32_t> digits = add_regex(g, "[0-9]+");
  ASSERT_TRUE(digits.ok()) << digits.error_message();
  const result<int32_t> word = add_regex(g, "[a-z]+");
  ASSERT_TRUE(word.ok()) << word.error_message();
  g.set_root(g.add_rule("root", g.seq({*digits, g.byte(':'), *word})));
  EXPECT_TRUE(grammar_accepts(g, "42:abc"));
  EXPECT_FALSE(grammar_accepts(g, "42:"));
  EXPECT_FALSE(grammar_accepts(g, "abc:42"));

  grammar h;
  const size_t before = h.nodes().size();
  const result<int32_t> bad = add_regex(h, "(a");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error_message(), "regex: unbalanced '(' at position 0");
  EXPECT_GE(h.nodes().size(), before);  // nodes may be left behind, unreferenced
}

}  // namespace
}  // namespace troupe::grammar
