// The request fields that steer sampling beyond temperature and the
// penalties (vLLM's and OpenAI's), through `troupe serve` on the dummy
// Qwen3 model with its real tokenizer: best_of, logit_bias,
// allowed_token_ids, min_tokens and bad_words, on completions and chat, with
// speculative decoding too; each out-of-range value a 400 naming the field.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

constexpr int64_t eos = 151645;  // examples/models/qwen3-tiny-151k

std::vector<std::string> qwen3_args(std::vector<std::string> more = {}) {
  std::vector<std::string> args = default_cpu_args();
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

struct completion {
  int status = 0;
  std::string body;
  std::vector<int64_t> tokens;
  std::string finish;
};

completion complete(server_process& server, const std::string& fields) {
  completion c;
  const http_result r = http_call(server.port(), "POST", "/v1/completions",
                                  R"({"prompt":"Once upon a time","return_token_ids":true,)" + fields + "}");
  c.status = r.status;
  c.body = r.body;
  if (r.status != 200) return c;
  simdjson::dom::parser parser;
  simdjson::dom::element choice = parser.parse(r.body)["choices"].at(0);
  for (int64_t t : choice["token_ids"].get_array()) c.tokens.push_back(t);
  c.finish = std::string(std::string_view(choice["finish_reason"]));
  return c;
}

std::string error_param(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element e = parser.parse(body)["error"];
  std::string_view param;
  if (e["param"].get(param) != simdjson::SUCCESS) return "";
  return std::string(param);
}

TEST(server_sampling, best_of_equal_to_n_is_accepted_others_are_400) {
  server_process server(qwen3_args());
  ASSERT_NE(server.port(), 0) << server.log();
  // vLLM's benchmark client sends "best_of": 1 on every request.
  EXPECT_EQ(complete(server, R"("max_tokens":2,"best_of":1)").status, 200);
  EXPECT_EQ(complete(server, R"("max_tokens":2,"n":2,"best_of":2)").status, 200);
  const completion more = complete(server, R"("max_tokens":2,"best_of":3)");
  EXPECT_EQ(more.status, 400);
  EXPECT_NE(more.body.find("best_of"), std::string::npos) << more.body;
  EXPECT_EQ(error_param(more.body), "best_of");
  EXPECT_EQ(complete(server, R"("max_tokens":2,"n":2,"best_of":1)").status, 400);
}

TEST(server_sampling, logit_bias_and_allowed_token_ids_steer_every_token) {
  server_process server(qwen3_args());
  ASSERT_NE(server.port(), 0) << server.log();
  for (const char* temperature : {"0", "1.0"}) {
    const completion forced =
        complete(server, std::string(R"("max_tokens":6,"temperature":)") + temperature +
                             R"(,"logit_bias":{"1234":100})");
    ASSERT_EQ(forced.status, 200) << forced.body;
    EXPECT_EQ(forced.tokens, std::vector<int64_t>(6, 1234)) << temperature;
    const completion allowed =
        complete(server, std::string(R"("max_tokens":12,"temperature":)") + temperature +
                             R"(,"allowed_token_ids":[100,200,300])");
    ASSERT_EQ(allowed.status, 200) << allowed.body;
    ASSERT_EQ(allowed.tokens.size(), 12u);
    for (int64_t t : allowed.tokens) EXPECT_TRUE(t == 100 || t == 200 || t == 300) << t;
  }
  // A ban inside the allowed set: -100 keeps 200 out.
  const completion banned = complete(
      server, R"("max_tokens":8,"allowed_token_ids":[100,200],"logit_bias":{"100":-100})");
  ASSERT_EQ(banned.status, 200) << banned.body;
  EXPECT_EQ(banned.tokens, std::vector<int64_t>(8, 200));
  // Chat takes them too.
  const http_result chat = http_call(
      server.port(), "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"logit_bias":{"1234":100},"return_token_ids":true})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  simdjson::dom::parser parser;
  std::vector<int64_t> chat_tokens;
  for (int64_t t : parser.parse(chat.body)["choices"].at(0)["token_ids"].get_array()) chat_tokens.push_back(t);
  EXPECT_EQ(chat_tokens, std::vector<int64_t>(3, 1234));
  for (const char* bad : {R"("logit_bias":{"abc":1})", R"("logit_bias":{"5":101})",
                          R"("logit_bias":{"999999999":1})", R"("logit_bias":[1])",
                          R"("allowed_token_ids":[])", R"("allowed_token_ids":[-1])"}) {
    const completion c = complete(server, std::string(R"("max_tokens":2,)") + bad);
    EXPECT_EQ(c.status, 400) << bad;
    EXPECT_TRUE(c.body.find("logit_bias") != std::string::npos ||
                c.body.find("allowed_token_ids") != std::string::npos) << c.body;
  }
}

TEST(server_sampling, min_tokens_holds_eos_back) {
  server_process server(qwen3_args());
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string eos_up = R"("max_tokens":10,"logit_bias":{")" + std::to_string(eos) + R"(":100})";
  const completion at_once = complete(server, eos_up);
  ASSERT_EQ(at_once.status, 200) << at_once.body;
  EXPECT_EQ(at_once.finish, "stop");
  EXPECT_LE(at_once.tokens.size(), 1u);
  const completion held = complete(server, eos_up + R"(,"min_tokens":4)");
  ASSERT_EQ(held.status, 200) << held.body;
  EXPECT_EQ(held.finish, "stop");
  ASSERT_GE(held.tokens.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(held.tokens[i], eos) << i;
  EXPECT_LE(held.tokens.size(), 5u);
  const completion bad = complete(server, R"("max_tokens":3,"min_tokens":4)");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("min_tokens"), std::string::npos) << bad.body;
}

// The token that stopped a request (EOS here, forced once the choice is
// complete) is not in the text even with skip_special_tokens false, unless
// include_stop_str_in_output (vLLM's detokenizer does the same).
TEST(server_sampling, the_stop_token_text_is_left_out) {
  server_process server(qwen3_args());
  ASSERT_NE(server.port(), 0) << server.log();
  for (const char* include : {"false", "true"}) {
    const completion c = complete(server, std::string(R"("max_tokens":8,"skip_special_tokens":false,)") +
                                              R"("guided_choice":["yes"],"include_stop_str_in_output":)" + include);
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.finish, "stop");
    ASSERT_FALSE(c.tokens.empty());
    EXPECT_EQ(c.tokens.back(), eos);
    simdjson::dom::parser parser;
    const std::string_view text = parser.parse(c.body)["choices"].at(0)["text"];
    EXPECT_EQ(text, std::string(include) == "true" ? "yes<|im_end|>" : "yes") << c.body;
  }
}

TEST(server_sampling, bad_words_are_never_written) {
  server_process server(qwen3_args({"--speculative-config",
                                    R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1})"}));
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const http_result tok = http_call(server.port(), "POST", "/tokenize", R"({"prompt":"hello"})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  std::vector<int64_t> word;
  for (int64_t t : parser.parse(tok.body)["tokens"].get_array()) word.push_back(t);
  ASSERT_EQ(word.size(), 1u) << tok.body;
  const std::string up = R"("max_tokens":8,"temperature":0,"logit_bias":{")" + std::to_string(word[0]) + R"(":50})";
  // Forced, the output repeats the word (and the n-gram drafter proposes it).
  const completion forced = complete(server, up);
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.tokens, std::vector<int64_t>(8, word[0]));
  const completion clean = complete(server, up + R"(,"bad_words":["hello"])");
  ASSERT_EQ(clean.status, 200) << clean.body;
  ASSERT_EQ(clean.tokens.size(), 8u);
  for (int64_t t : clean.tokens) EXPECT_NE(t, word[0]);
  EXPECT_EQ(complete(server, R"("max_tokens":2,"bad_words":5)").status, 400);
}

}  // namespace
}  // namespace troupe::testing
