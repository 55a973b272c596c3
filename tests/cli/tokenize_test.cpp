// `troupe tokenize` / `troupe detokenize` against the fixtures' references
// (tokenizers 0.23.2 ids and decodes; transformers 5.17 apply_chat_template
// renders and ids).
#include <gtest/gtest.h>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

std::string tok_dir(const std::string& name) {
  return std::string(TROUPE_TEST_DATA) + "/tokenizers/" + name;
}

simdjson::dom::element golden() {
  static simdjson::dom::parser parser;
  static simdjson::dom::element doc = parser.load(std::string(TROUPE_TEST_DATA) + "/tokenizers/golden.json");
  return doc["tokenizers"];
}

std::vector<int64_t> ids_of(simdjson::dom::element arr) {
  std::vector<int64_t> out;
  for (int64_t id : arr.get_array()) out.push_back(id);
  return out;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

class tokenize_cli : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenize_cli, text_and_ids_match_tokenizers) {
  simdjson::dom::parser parser;
  for (simdjson::dom::element c : golden()[GetParam()]["encode"].get_array()) {
    const std::string text{std::string_view(c["text"])};
    const run_result r = run_troupe({"tokenize", "--tokenizer", tok_dir(GetParam()), "--text", text, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    simdjson::dom::element out = parser.parse(r.out);
    EXPECT_EQ(ids_of(out["ids"]), ids_of(c["ids"])) << text;
    EXPECT_EQ(std::string_view(out["text"]), text);
    if (ids_of(c["ids"]).empty()) continue;
    const run_result d = run_troupe({"detokenize", "--tokenizer", tok_dir(GetParam()), "--ids",
                                     join(ids_of(c["ids"])), "--json"});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(std::string_view(parser.parse(d.out)["text"]), std::string_view(c["decoded"]));
  }
}

TEST_P(tokenize_cli, chat_renders_like_apply_chat_template) {
  simdjson::dom::element chats;
  if (golden()[GetParam()]["chat"].get(chats)) GTEST_SKIP() << "no chat references";
  simdjson::dom::parser parser;
  for (simdjson::dom::element c : chats.get_array()) {
    const temp_dir dir("chat");
    dir.write("chat.json", "{\"messages\":" + simdjson::minify(c["messages"]) + "}");
    std::vector<std::string> args = {"tokenize", "--tokenizer", tok_dir(GetParam()), "--chat",
                                     (dir / "chat.json").string(), "--json"};
    if (bool(c["add_generation_prompt"])) args.push_back("--add-generation-prompt");
    const run_result r = run_troupe(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    simdjson::dom::element out = parser.parse(r.out);
    EXPECT_EQ(std::string_view(out["text"]), std::string_view(c["text"]));
    EXPECT_EQ(ids_of(out["ids"]), ids_of(c["ids"]));
  }
}

INSTANTIATE_TEST_SUITE_P(tokenizers, tokenize_cli,
                         ::testing::Values("qwen3", "llama3_1", "llama2", "deepseek_v3"));

TEST(tokenize_cli_errors, clear_messages) {
  const temp_dir dir("chat");
  dir.write("chat.json", "[{\"role\":\"user\",\"content\":\"hi\"}]");
  run_result r = run_troupe({"tokenize", "--tokenizer", tok_dir("llama2"), "--chat",
                             (dir / "chat.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: the tokenizer has no chat template (tokenizer_config.json has "
                   "no chat_template; the chat_template config key gives one)\n");
  // The chat_template key gives one (inline text here), tools included.
  dir.write("request.json", "{\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}], "
                            "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}");
  r = run_troupe({"tokenize", "--tokenizer", tok_dir("llama2"), "--chat", (dir / "request.json").string(),
                  "--chat-template", "{% for t in tools %}<{{ t.function.name }}>{% endfor %}"
                                     "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"text\":\"<f>[user]hi\""), std::string::npos) << r.out;
  dir.write("bad.json", "[{\"content\":\"hi\"}]");
  r = run_troupe({"tokenize", "--tokenizer", tok_dir("qwen3"), "--chat", (dir / "bad.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("messages[0].role: expected a string"), std::string::npos) << r.err;
  r = run_troupe({"tokenize", "--tokenizer", "/nonexistent", "--text", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("troupe: error:"), std::string::npos);
  r = run_troupe({"detokenize", "--tokenizer", tok_dir("qwen3"), "--ids", "1,999999999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("token id 999999999 is out of range"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace troupe::testing
