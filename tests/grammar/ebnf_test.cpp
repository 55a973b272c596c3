// EBNF (GBNF) text to grammars: what the parsed grammars accept, checked
// through the compiled automaton (tests/grammar/accepts.h), and every parse
// error with its line:column.
#include "grammar/ebnf.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

// The error parse_ebnf gives, or "(no error)".
std::string error_of(std::string_view text) {
  const result<grammar> r = parse_ebnf(text);
  return r.ok() ? "(no error)" : r.error_message();
}

// Parses `text` and checks that it accepts every string of `yes` and none
// of `no`.
void expect_language(std::string_view text, std::initializer_list<std::string_view> yes,
                     std::initializer_list<std::string_view> no) {
  SCOPED_TRACE(std::string("grammar:\n") + std::string(text));
  const result<grammar> r = parse_ebnf(text);
  ASSERT_TRUE(r.ok()) << r.error_message();
  for (std::string_view s : yes) EXPECT_TRUE(grammar_accepts(*r, s)) << "should accept: " << s;
  for (std::string_view s : no) EXPECT_FALSE(grammar_accepts(*r, s)) << "should reject: " << s;
}

constexpr std::string_view kJson = R"ebnf(
root   ::= object
object ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair   ::= string ws ":" ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] digit* ) ( "." digit+ )? ( [eE] [-+]? digit+ )?
hex    ::= [0-9a-fA-F]
digit  ::= [0-9]
ws     ::= [ \t\n]*
)ebnf";

TEST(Ebnf, JsonLike) {
  expect_language(kJson,
                  {
                      "{}",
                      "{ }",
                      R"json({"a": 1})json",
                      R"json({"a":-0.5e+3,"b":[true, false, null, "x"]})json",
                      R"json({"nested": {"deep": [[], {}, [1, [2]]]}})json",
                      R"json({"esc": "q\"uote \\ \/ \n \u00e9"})json",
                      R"json({"héllo": "wörld ✓ 😀"})json",
                      "{\n  \"a\" : 1 ,\n\t\"b\" : 2\n}",
                  },
                  {
                      "",
                      "[1]",
                      R"json({"a" 1})json",
                      R"json({"a": 01})json",
                      R"json({"a": 1,})json",
                      R"json({"a": tru})json",
                      R"json({"a": "x\q"})json",
                      R"json({"a": "\u00g0"})json",
                      "{\"a\": \"line\nbreak\"}",
                      R"json({"a": 1)json",
                      R"json({'a': 1})json",
                  });
}

TEST(Ebnf, ArithmeticWithRecursionThroughGroups) {
  expect_language(R"ebnf(
root   ::= expr
expr   ::= term ("+" term)*
term   ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")"
)ebnf",
                  {"1", "12+3", "1*2+3*(4+5)", "((7))", "(1+2)*(3+4)*5", "(((1)+2)*3)"},
                  {"", "1+", "(1", "1)", "+1", "1**2", "()", "1 + 2", "(1+2"});
}

TEST(Ebnf, RightRecursion) {
  expect_language("root ::= list\nlist ::= item (\",\" list)?\nitem ::= [a-z]+",
                  {"a", "ab,c,def"}, {"", "a,", ",a", "a,,b"});
  // Not a regular language: as many b as a.
  expect_language(R"(root ::= "a" root "b" | "")", {"", "ab", "aabb", "aaabbb"},
                  {"a", "aab", "abb", "ba", "abab"});
}

TEST(Ebnf, Literals) {
  expect_language(R"(root ::= "héllo")", {"héllo"}, {"hello", "héll", "héllo!", ""});
  // Escapes are codepoints, written out as UTF-8.
  expect_language(R"(root ::= "h\u00e9llo")", {"héllo"}, {"h\xe9llo", "hello"});
  expect_language(R"(root ::= "\x41\U0001F600\xe9")", {"A😀é"}, {"A", "A\xe9"});
  expect_language(R"(root ::= "\n\r\t\\\"\'")", {"\n\r\t\\\"'"}, {"nrt"});
  // Single quotes too; the other quote needs no escape inside.
  expect_language(R"(root ::= 'it"s' | "it's" | 'a\'b')", {"it\"s", "it's", "a'b"},
                  {"its", ""});
  expect_language(R"(root ::= "" "a" "")", {"a"}, {"", "aa"});
  // \[ \] \- \^ are accepted in literals as well as classes (as in GBNF).
  expect_language(R"(root ::= "\[\]\-\^")", {"[]-^"}, {""});
}

TEST(Ebnf, CharacterClasses) {
  expect_language(R"(root ::= "\"" [^"\\]* "\"")", {"\"abc\"", "\"héllo\"", "\"\""},
                  {"\"a\"b\"", "\"a\\b\"", "abc", "\""});
  expect_language("root ::= [α-ω]+", {"αβγ", "ω"}, {"", "abc", "Ω"});
  expect_language("root ::= [^a-z]", {"A", "é", "😀", "\n", "{"},
                  {"a", "z", "", "AB", "\xff", "\xc3", "\xed\xa0\x80"});
  expect_language(R"(root ::= [\]\[\-\^\\])", {"]", "[", "-", "^", "\\"}, {"a", "", "]]"});
  // - first or last is a member, ^ other than first too.
  expect_language("root ::= [-a] [b-] [a^]", {"-b^", "a-a"}, {"bb^", "ab"});
  expect_language(R"(root ::= [\x41-\x43\u00e9 ])", {"A", "C", "é", " "}, {"D", "e", ""});
  // [^] is any codepoint; [] none.
  expect_language("root ::= [^]", {"x", "😀", "\n"}, {"", "xy", "\xff"});
  expect_language("root ::= \"a\" | []", {"a"}, {"", "b"});
}

TEST(Ebnf, DotIsAnyCodepoint) {
  expect_language(R"(root ::= "<" . ">")", {"<a>", "<é>", "<😀>", "<\n>", "<>>"},
                  {"<>", "<ab>", "<\xff>", "<\xc3>"});
  expect_language("root ::= .*", {"", "anything é 😀"}, {"\xff"});
}

TEST(Ebnf, Repetition) {
  expect_language(R"(root ::= "a"*  "b"+ "c"?)", {"b", "aabbc", "bbb"}, {"", "ac", "bcc"});
  expect_language(R"(root ::= "a"{3})", {"aaa"}, {"aa", "aaaa", ""});
  expect_language(R"(root ::= "ab"{2,})", {"abab", "ababab"}, {"ab", "aba", ""});
  expect_language("root ::= [0-9]{1,3}", {"1", "123"}, {"", "1234", "a"});
  expect_language(R"(root ::= "x"{0} "y")", {"y"}, {"xy", ""});
  expect_language(R"(root ::= ("a" | "b"){ 2 , 3 })", {"ab", "bba", "aa"}, {"a", "abab", ""});
  expect_language(R"(root ::= "a"{0,} "b"{0,1})", {"", "aaaa", "aab", "b"}, {"bb", "ba"});
  EXPECT_TRUE(parse_ebnf(R"(root ::= "a"{10000})").ok());
  EXPECT_TRUE(parse_ebnf(R"(root ::= "a"{0,10000})").ok());
}

TEST(Ebnf, Comments) {
  expect_language(R"(# a grammar with comments
root ::= greeting  # trailing comment
         name      # another one
# a comment line between rules
greeting ::= "hi" | "#"   # a # in a literal is not a comment
name ::= [#a-z]+ # nor in a class
)",
                  {"hibob", "##", "hi#x"}, {"hi", "hi bob", "#"});
}

TEST(Ebnf, RulesSpanLinesAndStartAtNameAssign) {
  expect_language(R"(
root ::=
    first
  | second
    third
first ::= "a"
second ::=
  "b"
third
  ::= "c"
)",
                  {"a", "bc"}, {"b", "abc", "c", ""});
  // A new rule may even start on the same line.
  expect_language(R"(root ::= a  a ::= "x")", {"x"}, {"", "a"});
  // Names: letters, digits, - and _; used before they are defined.
  expect_language("root ::= my-rule_2 Other9\nmy-rule_2 ::= \"ok\"\nOther9 ::= \"!\"", {"ok!"},
                  {"ok"});
  // CRLF line ends.
  expect_language("root ::= \"a\"\r\n  | b\r\nb ::= \"b\"\r\n", {"a", "b"}, {"\r", "ab"});
}

TEST(Ebnf, EmptyAlternatives) {
  expect_language("root ::= \"x\" |\nunused ::= \"y\"", {"x", ""}, {"y"});
  expect_language(R"(root ::= "a" ( | "b" ))", {"a", "ab"}, {"", "b"});
  expect_language(R"(root ::= | "a" |)", {"", "a"}, {"aa"});
  expect_language("root ::= ()", {""}, {"a"});
  expect_language("root ::=", {""}, {"a"});
  expect_language("root ::= e \"a\" e\ne ::=", {"a"}, {"", "aa"});
}

TEST(Ebnf, RootIsTheRuleNamedRoot) {
  const result<grammar> r = parse_ebnf("a ::= \"x\"\nroot ::= a \"y\"");
  ASSERT_TRUE(r.ok()) << r.error_message();
  ASSERT_GE(r->root(), 0);
  EXPECT_EQ(r->rules().at(static_cast<size_t>(r->root())).name, "root");
  EXPECT_TRUE(grammar_accepts(*r, "xy"));
  EXPECT_FALSE(grammar_accepts(*r, "x"));
}

TEST(Ebnf, DeepNesting) {
  const std::string open(1000, '('), close(1000, ')');
  const result<grammar> r = parse_ebnf("root ::= " + open + "\"a\"" + close);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_TRUE(grammar_accepts(*r, "a"));
  EXPECT_EQ(error_of("root ::= " + open + "(\"a\")" + close),
            "EBNF: groups nested too deeply at line 1, column 1010");
}

TEST(Ebnf, ErrorUndefinedRule) {
  EXPECT_EQ(error_of("root ::= a foo\na ::= \"x\""),
            "EBNF: undefined rule 'foo' at line 1, column 12");
  EXPECT_EQ(error_of("root ::= a\na ::= \"x\" b\n"),
            "EBNF: undefined rule 'b' at line 2, column 11");
  // The first reference, and the first undefined rule referenced.
  EXPECT_EQ(error_of("root ::= x x\nz ::= x"), "EBNF: undefined rule 'x' at line 1, column 10");
  EXPECT_EQ(error_of("root ::= b a"), "EBNF: undefined rule 'b' at line 1, column 10");
  // Without ::= after it, a name is a reference.
  EXPECT_EQ(error_of("root ::= \"x\"\nfoo bar ::= \"y\""),
            "EBNF: undefined rule 'foo' at line 2, column 1");
}

TEST(Ebnf, ErrorRuleDefinedTwice) {
  EXPECT_EQ(error_of("root ::= a\na ::= \"x\"\na ::= \"y\""),
            "EBNF: rule 'a' defined twice at line 3, column 1");
  EXPECT_EQ(error_of("root ::= \"x\"\n  root ::= \"y\""),
            "EBNF: rule 'root' defined twice at line 2, column 3");
}

TEST(Ebnf, ErrorNoRoot) {
  EXPECT_EQ(error_of("a ::= \"x\""), "EBNF: no rule named 'root'");
  EXPECT_EQ(error_of(""), "EBNF: no rule named 'root'");
  EXPECT_EQ(error_of("# only a comment\n"), "EBNF: no rule named 'root'");
}

TEST(Ebnf, ErrorUnterminatedLiteral) {
  EXPECT_EQ(error_of("root ::= \"abc"), "EBNF: unterminated string literal at line 1, column 10");
  EXPECT_EQ(error_of("root ::= 'abc\""), "EBNF: unterminated string literal at line 1, column 10");
  EXPECT_EQ(error_of(R"(root ::= "ab\")"),
            "EBNF: unterminated string literal at line 1, column 10");
  EXPECT_EQ(error_of("root ::= \"ab\\"), "EBNF: unterminated string literal at line 1, column 10");
  // A literal ends on its line.
  EXPECT_EQ(error_of("root ::= \"ab\ncd\""),
            "EBNF: unterminated string literal at line 1, column 10");
  EXPECT_EQ(error_of("root ::= a\na ::= \"x"),
            "EBNF: unterminated string literal at line 2, column 7");
}

TEST(Ebnf, ErrorUnterminatedClass) {
  EXPECT_EQ(error_of("root ::= [a-z"), "EBNF: unterminated character class at line 1, column 10");
  EXPECT_EQ(error_of(R"(root ::= [a\])"),
            "EBNF: unterminated character class at line 1, column 10");
  EXPECT_EQ(error_of("root ::= [a-"), "EBNF: unterminated character class at line 1, column 10");
  EXPECT_EQ(error_of("root ::= [^\n]"), "EBNF: unterminated character class at line 1, column 10");
}

TEST(Ebnf, ErrorInvalidEscape) {
  EXPECT_EQ(error_of(R"(root ::= "a\qb")"), "EBNF: invalid escape '\\q' at line 1, column 12");
  EXPECT_EQ(error_of(R"(root ::= [\q])"), "EBNF: invalid escape '\\q' at line 1, column 11");
  EXPECT_EQ(error_of(R"(root ::= "\x4G")"),
            "EBNF: invalid escape '\\x4': expected 2 hex digits at line 1, column 11");
  EXPECT_EQ(error_of(R"(root ::= "\u12")"),
            "EBNF: invalid escape '\\u12': expected 4 hex digits at line 1, column 11");
  EXPECT_EQ(error_of(R"(root ::= "\U00110000")"),
            "EBNF: invalid codepoint U+110000 at line 1, column 11");
  EXPECT_EQ(error_of(R"(root ::= [\uD800])"),
            "EBNF: invalid codepoint U+D800 at line 1, column 11");
}

TEST(Ebnf, ErrorExpectedAssign) {
  EXPECT_EQ(error_of("root = \"x\""), "EBNF: expected '::=' at line 1, column 6");
  EXPECT_EQ(error_of("root"), "EBNF: expected '::=' at line 1, column 5");
  EXPECT_EQ(error_of("root := \"x\""), "EBNF: expected '::=' at line 1, column 6");
}

TEST(Ebnf, ErrorUnexpected) {
  EXPECT_EQ(error_of(R"(root ::= "a"))"), "EBNF: unexpected ')' at line 1, column 13");
  EXPECT_EQ(error_of(R"(root ::= ("a")))"), "EBNF: unexpected ')' at line 1, column 15");
  EXPECT_EQ(error_of(")"), "EBNF: unexpected ')' at line 1, column 1");
  EXPECT_EQ(error_of(R"(root ::= *"a")"), "EBNF: unexpected '*' at line 1, column 10");
  EXPECT_EQ(error_of(R"(root ::= "a" | +)"), "EBNF: unexpected '+' at line 1, column 16");
  EXPECT_EQ(error_of(R"(root ::= "a" ; "b")"), "EBNF: unexpected ';' at line 1, column 14");
  EXPECT_EQ(error_of("root ::= \"x\"\n::= \"y\""), "EBNF: unexpected ':' at line 2, column 1");
  EXPECT_EQ(error_of("\"x\""), "EBNF: expected a rule name, found '\"' at line 1, column 1");
  EXPECT_EQ(error_of(R"(root ::= ("a")"), "EBNF: unclosed '(' at line 1, column 10");
  EXPECT_EQ(error_of("root ::= (\"a\"\nb ::= \"c\""), "EBNF: unclosed '(' at line 1, column 10");
  // Positions after comments and lines; columns count bytes.
  EXPECT_EQ(error_of("# comment\nroot ::= \"x\" ]"),
            "EBNF: unexpected ']' at line 2, column 14");
  EXPECT_EQ(error_of(R"(root ::= "é" ))"), "EBNF: unexpected ')' at line 1, column 15");
}

TEST(Ebnf, ErrorRepetitionBounds) {
  EXPECT_EQ(error_of(R"(root ::= "a"{3,1})"),
            "EBNF: repetition bound {3,1}: max below min at line 1, column 13");
  EXPECT_EQ(error_of(R"(root ::= "a"{10001})"), "EBNF: bound too large at line 1, column 13");
  EXPECT_EQ(error_of(R"(root ::= [a]{0,99999999999999999999})"),
            "EBNF: bound too large at line 1, column 13");
  EXPECT_EQ(error_of(R"(root ::= "a"{2)"),
            "EBNF: expected '}' in repetition bound at line 1, column 15");
  EXPECT_EQ(error_of(R"(root ::= "a"{,2})"),
            "EBNF: expected a number in repetition bound at line 1, column 14");
}

TEST(Ebnf, ErrorBadText) {
  EXPECT_EQ(error_of("root ::= [z-a]"),
            "EBNF: reversed range 'z-a' in character class at line 1, column 11");
  EXPECT_EQ(error_of("root ::= \"\xff\""), "EBNF: invalid UTF-8 in string literal at line 1, column 11");
  EXPECT_EQ(error_of("root ::= [\xc3]"),
            "EBNF: invalid UTF-8 in character class at line 1, column 11");
}

}  // namespace
}  // namespace troupe::grammar
