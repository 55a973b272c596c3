// The matcher's token masks against its own token-by-token reading (two
// paths: the per-state splits with their uncertain walks, and a direct walk
// of one token), the compiler's refusals, and tokens' bytes from real
// tokenizers.
#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/compiled.h"
#include "grammar/constraint_cache.h"
#include "grammar/ebnf.h"
#include "grammar/regex.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/grammar/accepts.h"

namespace troupe::grammar {
namespace {

std::shared_ptr<const token_grammar> make(const grammar& g, std::shared_ptr<const token_vocabulary> v) {
  auto compiled = compiled_grammar::compile(g);
  EXPECT_TRUE(compiled.ok()) << (compiled.ok() ? "" : compiled.error_message());
  return std::make_shared<const token_grammar>(*compiled, std::move(v));
}

// Every byte, then random strings over JSON-ish characters, then two ids
// with no bytes; the model's vocabulary is larger still (padding).
std::shared_ptr<const token_vocabulary> synthetic_vocab(uint32_t seed) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  const std::string alphabet = "{}[]\":, \n0123456789-.eEabcnulltrfs\\";
  std::mt19937 rng(seed);
  for (int i = 0; i < 1500; ++i) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  for (const char* s : {"\"name\"", "\": \"", "\"}", "true", "null", "},{", "\u00e9t\u00e9", "\xe2\x82"}) bytes.emplace_back(s);
  bytes.emplace_back();  // a special token
  bytes.emplace_back();
  return std::make_shared<const token_vocabulary>(std::move(bytes), static_cast<int64_t>(bytes.size()) + 40);
}

bool bit(const std::vector<uint32_t>& m, int64_t t) { return (m[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u; }

// Random walks: at each step the mask must equal "accept() takes it" for
// every token; an ended walk's text must be in the language.
void check_walks(const grammar& g, const std::shared_ptr<const token_vocabulary>& vocab, int walks, int steps,
                 uint32_t seed) {
  auto tg = make(g, vocab);
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  int ended = 0;
  for (int w = 0; w < walks; ++w) {
    matcher m(tg);
    std::string text;
    for (int s = 0; s < steps; ++s) {
      m.fill_mask(mask.data());
      std::vector<int32_t> allowed;
      for (int64_t t = 0; t < vocab->size(); ++t) {
        matcher copy = m;
        const bool takes = copy.accept(static_cast<int32_t>(t));
        ASSERT_EQ(bit(mask, t), takes) << "token " << t << " '" << vocab->bytes_of(t) << "' after '" << text << "'";
        if (takes) allowed.push_back(static_cast<int32_t>(t));
      }
      if (m.can_end()) {
        EXPECT_TRUE(grammar_accepts(g, text)) << text;
      }
      if (allowed.empty() || (m.can_end() && rng() % 4 == 0)) break;
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept(t));
      text += vocab->bytes_of(t);
    }
    if (m.can_end()) ++ended;
  }
  EXPECT_GT(ended, 0);
}

void expect_compile_error(const output_constraint& c, const std::string& part) {
  auto r = compile_constraint(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find(part), std::string::npos) << r.error_message();
}

grammar ebnf(const char* text) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error_message());
  return g.ok() ? std::move(g).value() : grammar();
}

TEST(Matcher, MaskEqualsAcceptOnAJsonGrammar) {
  const grammar g = ebnf(R"(
root   ::= object
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+ ( "." [0-9]+ )?
ws     ::= [ \n]?
)");
  check_walks(g, synthetic_vocab(1), 30, 40, 7);
}

TEST(Matcher, MaskEqualsAcceptOnRegexAndChoice) {
  auto re = regex_grammar("(ab|a)*c?[0-9]{2,4}");
  ASSERT_TRUE(re.ok());
  check_walks(*re, synthetic_vocab(2), 30, 12, 3);
  grammar choice;
  choice.set_root(choice.add_rule("root", choice.alt({choice.literal("true"), choice.literal("tr"), choice.literal("null")})));
  check_walks(choice, synthetic_vocab(3), 20, 6, 4);
}

TEST(Matcher, RecursionAndNullableRules) {
  // Nested brackets (recursion below the top rule), and a nullable rule
  // between two reads (its end decided only by the next token).
  const grammar g = ebnf(R"(
root ::= item ("," opt item)*
item ::= "[" item* "]" | [0-9]
opt  ::= " "?
)");
  check_walks(g, synthetic_vocab(4), 40, 30, 5);
}

TEST(Matcher, EndOnlyWhereTheGrammarEnds) {
  auto re = regex_grammar("ab");
  ASSERT_TRUE(re.ok());
  auto tg = make(*re, std::make_shared<const token_vocabulary>(std::vector<std::string>{"a", "b", "ab", "abc"}, 4));
  matcher m(tg);
  EXPECT_FALSE(m.can_end());
  std::vector<uint32_t> mask(1);
  m.fill_mask(mask.data());
  EXPECT_EQ(mask[0], 0b0101u);  // "a" and "ab"; not "abc" (past the end)
  EXPECT_FALSE(m.accept(1));
  ASSERT_TRUE(m.accept(2));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_terminated());
  m.fill_mask(mask.data());
  EXPECT_EQ(mask[0], 0u);
}

TEST(Compile, RefusesLeftRecursionNothingAndUndefinedRules) {
  auto left = compiled_grammar::compile(ebnf("root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]"));
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.error_message().find("left recursion"), std::string::npos) << left.error_message();
  EXPECT_NE(left.error_message().find("expr"), std::string::npos) << left.error_message();

  grammar none;
  const int32_t loop = none.add_rule("loop");
  none.set_body(loop, none.seq({none.literal("a"), none.ref(loop)}));  // never ends
  none.set_root(none.add_rule("root", none.ref(loop)));
  auto nothing = compiled_grammar::compile(none);
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.error_message().find("admits no string"), std::string::npos) << nothing.error_message();

  grammar undefined;
  const int32_t missing = undefined.add_rule("missing");
  undefined.set_root(undefined.add_rule("root", undefined.ref(missing)));
  auto und = compiled_grammar::compile(undefined);
  ASSERT_FALSE(und.ok());
  EXPECT_NE(und.error_message().find("'missing'"), std::string::npos) << und.error_message();
}

// Found in review: repeats of an item that adds no state multiplied without
// bound (the state limit never saw them); an ambiguous grammar's parses
// doubled with every token.
TEST(Compile, RunawayRepeatsAndAmbiguityAreBounded) {
  output_constraint c;
  c.kind = output_constraint::regex;
  c.text = "(((){0,10000}){10000}){10000}";
  expect_compile_error(c, "too large");
  // Found by fuzz_grammar (CI, 2026-11-29): nested counted repeats of "."
  // made a few thousand subsets of thousands of NFA states each (over a
  // minute of subset construction under the state limit); the work of
  // making the automata deterministic is bounded too.
  c.text = "(.{0,40}){0,40}";
  expect_compile_error(c, "making its automata deterministic");
  // The bound leaves large legitimate grammars alone: a JSON Schema enum of
  // 5,000 distinct words (a root state with 5,000 literal edges).
  c.kind = output_constraint::json_schema;
  c.text = "{\"enum\": [";
  for (int i = 0; i < 5000; ++i) {
    std::string word;
    for (int v = i; word.size() < 3 || v > 0; v /= 26) word += static_cast<char>('a' + v % 26);
    c.text += (i ? ", \"" : "\"") + word + "x" + std::to_string(i % 97) + "\"";
  }
  c.text += "]}";
  auto big = compile_constraint(c);
  EXPECT_TRUE(big.ok()) << big.error_message();

  const grammar g = ebnf("root ::= s\ns ::= \"x\" s | \"x\" t | \"\"\nt ::= s\n");
  auto vocab = std::make_shared<const token_vocabulary>(std::vector<std::string>{"x", "xx", "y"}, 3);
  matcher m(make(g, vocab));
  std::vector<uint32_t> mask(1);
  for (int i = 0; i < 60; ++i) {
    m.fill_mask(mask.data());
    matcher copy = m;
    EXPECT_EQ(bit(mask, 1), copy.accept(1));
    ASSERT_TRUE(bit(mask, 0));
    ASSERT_TRUE(m.accept(0));
    EXPECT_TRUE(m.can_end());
  }
}

TEST(Compile, TrimsBranchesThatCannotFinish) {
  // "a" then a rule that never ends: only "b" is a way on.
  grammar g;
  const int32_t loop = g.add_rule("loop");
  g.set_body(loop, g.seq({g.literal("x"), g.ref(loop)}));
  g.set_root(g.add_rule("root", g.alt({g.seq({g.literal("a"), g.ref(loop)}), g.literal("b")})));
  auto tg = make(g, std::make_shared<const token_vocabulary>(std::vector<std::string>{"a", "b"}, 2));
  matcher m(tg);
  std::vector<uint32_t> mask(1);
  m.fill_mask(mask.data());
  EXPECT_EQ(mask[0], 0b10u);
}

TEST(Constraint, CompileErrorsNameTheProblem) {
  output_constraint c;
  c.kind = output_constraint::regex;
  c.text = "a(b";
  expect_compile_error(c, "position");
  c.kind = output_constraint::choice;
  c.choices = {"yes", "no"};
  EXPECT_TRUE(compile_constraint(c).ok());
  c.kind = output_constraint::json_schema;
  c.text = R"({"type": "object", "not": {}})";
  expect_compile_error(c, "'not'");
}

std::unique_ptr<tokenizer> load(const char* name) {
  auto tok = tokenizer::load(std::string(TROUPE_TEST_DATA) + "/tokenizers/" + name);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error_message());
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(TokenBytes, ByteLevelAndByteFallbackTokenizers) {
  for (const char* name : {"llama3_1", "llama2", "qwen3"}) {
    auto tok = load(name);
    ASSERT_NE(tok, nullptr);
    // A word with a leading space is one token in each; its bytes keep the space.
    const std::vector<int32_t> ids = tok->encode("Hello world", false);
    std::string joined;
    for (int32_t id : ids) joined += tok->token_bytes(id);
    EXPECT_EQ(joined.substr(joined.size() - 6), " world") << name;
    for (int32_t id : tok->eos_token_ids()) EXPECT_EQ(tok->token_bytes(id), "") << name;
  }
  auto llama2 = load("llama2");
  ASSERT_NE(llama2, nullptr);
  const auto nl = llama2->token_to_id("<0x0A>");
  ASSERT_TRUE(nl.has_value());
  EXPECT_EQ(llama2->token_bytes(*nl), "\n");
  const auto e9 = llama2->token_to_id("<0xE9>");  // half of a UTF-8 sequence: the raw byte
  ASSERT_TRUE(e9.has_value());
  EXPECT_EQ(llama2->token_bytes(*e9), "\xE9");
}

TEST(Matcher, RealVocabularyJsonSchemaMasks) {
  auto tok = load("llama3_1");
  ASSERT_NE(tok, nullptr);
  auto vocab = token_vocabulary::of(*tok, tok->vocab_size() + 10);
  output_constraint c;
  c.kind = output_constraint::json_schema;
  c.text = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": false})";
  c.any_whitespace = false;
  auto tg = token_grammar_for(c, vocab);
  ASSERT_TRUE(tg.ok()) << tg.error_message();
  matcher m(*tg);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  // Walk a fixed text token by token; at each step the next token is in the
  // mask and a sample of the others agrees with accept().
  const std::vector<int32_t> ids = tok->encode(R"({"name":"Ada Lovelace","age":36})", false);
  std::mt19937 rng(9);
  for (int32_t next : ids) {
    m.fill_mask(mask.data());
    ASSERT_TRUE(bit(mask, next)) << tok->id_to_token(next);
    for (int k = 0; k < 3000; ++k) {
      const auto t = static_cast<int32_t>(rng() % vocab->size());
      matcher copy = m;
      ASSERT_EQ(bit(mask, t), copy.accept(t)) << "token " << t << " " << tok->id_to_token(t);
    }
    ASSERT_TRUE(m.accept(next));
  }
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_terminated());
}

}  // namespace
}  // namespace troupe::grammar
