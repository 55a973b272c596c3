// `troupe serve` on examples/deploy-qwen3-dummy-cpu.yaml: random weights in
// Qwen3's shape with the real Qwen3 tokenizer and chat template. The text is
// random, so the checks are about everything around it: usage equals the
// tokenizer's counts, stop strings end the text and never appear in it,
// streaming frames chat as OpenAI does and matches the non-streamed text.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {


const char* messages = R"("messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}])";

TEST(server_text, chat_usage_equals_token_counts) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const http_result tok = http_call(server.port(), "POST", "/tokenize", std::string("{") + messages + "}");
  ASSERT_EQ(tok.status, 200) << tok.body;
  const int64_t prompt_tokens = int64_t(parser.parse(tok.body)["count"]);
  const http_result r = http_call(server.port(), "POST", "/v1/chat/completions",
                                  std::string(R"({"model":"qwen3-tiny","max_tokens":8,)") + messages + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc = parser.parse(r.body);
  EXPECT_EQ(std::string_view(doc["object"]), "chat.completion");
  EXPECT_EQ(std::string_view(doc["model"]), "qwen3-tiny");
  EXPECT_EQ(std::string_view(doc["id"]).substr(0, 9), "chatcmpl-");
  simdjson::dom::element choice = doc["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["message"]["role"]), "assistant");
  EXPECT_FALSE(std::string_view(choice["message"]["content"]).empty());
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "length");
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), prompt_tokens);
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 8);
  EXPECT_EQ(int64_t(doc["usage"]["total_tokens"]), prompt_tokens + 8);
}

TEST(server_text, stop_string_ends_text_and_is_absent) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const std::string base = R"({"prompt":"The capital of France is","temperature":0,"ignore_eos":true,)";
  const http_result full = http_call(server.port(), "POST", "/v1/completions",
                                     base + R"("max_tokens":12,"return_token_ids":true})");
  ASSERT_EQ(full.status, 200) << full.body;
  simdjson::dom::element choice = parser.parse(full.body)["choices"].at(0);
  const std::string text{std::string_view(choice["text"])};
  std::vector<int64_t> ids;
  for (int64_t id : choice["token_ids"].get_array()) ids.push_back(id);
  ASSERT_EQ(ids.size(), 12u);
  // The stop string: the text of the 6th generated token.
  const http_result piece = http_call(server.port(), "POST", "/detokenize",
                                      R"({"tokens":[)" + std::to_string(ids[5]) + "]}");
  ASSERT_EQ(piece.status, 200) << piece.body;
  const std::string stop{std::string_view(parser.parse(piece.body)["prompt"])};
  ASSERT_FALSE(stop.empty());
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos);
  std::string stop_json;
  for (char c : stop) {
    if (c == '"' || c == '\\') stop_json += '\\';
    stop_json += c;
  }
  const http_result r = http_call(server.port(), "POST", "/v1/completions",
                                  base + R"("max_tokens":12,"stop":[")" + stop_json + R"("]})");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element stopped = parser.parse(r.body)["choices"].at(0);
  EXPECT_EQ(std::string_view(stopped["finish_reason"]), "stop");
  EXPECT_EQ(std::string(std::string_view(stopped["text"])), text.substr(0, at));
  EXPECT_EQ(std::string(std::string_view(stopped["text"])).find(stop), std::string::npos);
}

TEST(server_text, chat_stream_framing_matches_non_stream) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const std::string base = std::string(R"({"temperature":0,"max_tokens":10,"n":2,)") + messages;
  const http_result plain = http_call(server.port(), "POST", "/v1/chat/completions", base + "}");
  ASSERT_EQ(plain.status, 200) << plain.body;
  std::vector<std::string> expected;
  for (simdjson::dom::element c : parser.parse(plain.body)["choices"].get_array()) {
    expected.emplace_back(std::string_view(c["message"]["content"]));
  }
  ASSERT_EQ(expected.size(), 2u);
  const http_result r = http_call(server.port(), "POST", "/v1/chat/completions",
                                  base + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto events = sse_events(r.body);
  ASSERT_TRUE(events.has_value()) << r.body;
  ASSERT_GE(events->size(), 4u);
  EXPECT_EQ(events->back(), "[DONE]");
  std::vector<std::string> content(2);
  std::vector<int> chunks(2, 0);
  std::vector<std::string> finish(2);
  for (size_t i = 0; i + 2 < events->size(); ++i) {
    simdjson::dom::element chunk = parser.parse((*events)[i]);
    EXPECT_EQ(std::string_view(chunk["object"]), "chat.completion.chunk");
    simdjson::dom::element choice = chunk["choices"].at(0);
    const size_t index = size_t(int64_t(choice["index"]));
    ASSERT_LT(index, 2u);
    simdjson::dom::element role;
    const bool has_role = !choice["delta"]["role"].get(role);
    EXPECT_EQ(has_role, chunks[index] == 0) << "role only in the first chunk of each choice";
    EXPECT_TRUE(finish[index].empty()) << "a chunk after the finishing one";
    content[index] += std::string(std::string_view(choice["delta"]["content"]));
    if (!choice["finish_reason"].is_null()) finish[index] = std::string(std::string_view(choice["finish_reason"]));
    ++chunks[index];
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(content[i], expected[i]) << "choice " << i;
    EXPECT_EQ(finish[i], "length");
  }
  simdjson::dom::element usage = parser.parse((*events)[events->size() - 2]);
  EXPECT_EQ(usage["choices"].get_array().size(), 0u);
  EXPECT_EQ(int64_t(usage["usage"]["completion_tokens"]), 20);
}

TEST(server_text, tokenize_detokenize_round_trip) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const http_result tok = http_call(server.port(), "POST", "/tokenize", R"({"prompt":"Hello world"})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  simdjson::dom::element doc = parser.parse(tok.body);
  EXPECT_EQ(int64_t(doc["max_model_len"]), 4096);
  std::string ids;
  for (int64_t id : doc["tokens"].get_array()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  EXPECT_EQ(ids, "9707,1879");  // Qwen3's "Hello", " world"
  EXPECT_EQ(int64_t(doc["count"]), 2);
  const http_result detok = http_call(server.port(), "POST", "/detokenize", R"({"tokens":[)" + ids + "]}");
  ASSERT_EQ(detok.status, 200) << detok.body;
  EXPECT_EQ(std::string_view(parser.parse(detok.body)["prompt"]), "Hello world");
}


// echo: the text starts with the prompt as written, and with logprobs the
// prompt's tokens come first (the first without a logprob), then the
// completion's; streamed, the first chunk carries the prompt.
TEST(server_text, echo_returns_prompt_and_its_logprobs_first) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const std::string prompt = "Hello world, über alles";
  const http_result tok = http_call(server.port(), "POST", "/tokenize",
                                    R"({"prompt":")" + prompt + R"("})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  const int64_t prompt_tokens = int64_t(parser.parse(tok.body)["count"]);
  const std::string body = R"({"prompt":")" + prompt +
                           R"(","max_tokens":4,"temperature":0,"ignore_eos":true,"echo":true,"logprobs":1)";
  const http_result r = http_call(server.port(), "POST", "/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc = parser.parse(r.body);
  simdjson::dom::element choice = doc["choices"].at(0);
  const std::string text{std::string_view(choice["text"])};
  EXPECT_EQ(text.substr(0, prompt.size()), prompt);
  EXPECT_GT(text.size(), prompt.size());
  simdjson::dom::element lps = choice["logprobs"];
  EXPECT_EQ(int64_t(lps["tokens"].get_array().size()), prompt_tokens + 4);
  EXPECT_TRUE(lps["token_logprobs"].at(0).is_null());
  EXPECT_TRUE(lps["top_logprobs"].at(0).is_null());
  for (size_t i = 1; i < size_t(prompt_tokens + 4); ++i) {
    EXPECT_LE(double(lps["token_logprobs"].at(i)), 0.0) << i;
  }
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 4);
  // Streamed: the same text, the prompt with the first chunk.
  const http_result s = http_call(server.port(), "POST", "/v1/completions", body + R"(,"stream":true})");
  ASSERT_EQ(s.status, 200) << s.body;
  const auto events = sse_events(s.body);
  ASSERT_TRUE(events.has_value() && events->size() >= 2) << s.body;
  std::string streamed;
  for (size_t i = 0; i + 1 < events->size(); ++i) {
    streamed += std::string(std::string_view(parser.parse((*events)[i])["choices"].at(0)["text"]));
    if (i == 0) { EXPECT_EQ(streamed.substr(0, prompt.size()), prompt); }
  }
  EXPECT_EQ(streamed, text);
}

// lm-eval's log-likelihood request: echo with max_tokens 0 gives the prompt
// and its logprobs, no completion token, finish_reason "length".
TEST(server_text, echo_with_max_tokens_zero_returns_the_prompt_only) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const std::string prompt = "The capital of France is Paris";
  const http_result tok = http_call(server.port(), "POST", "/tokenize",
                                    R"({"prompt":")" + prompt + R"("})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  const int64_t prompt_tokens = int64_t(parser.parse(tok.body)["count"]);
  const std::string body = R"({"prompt":")" + prompt +
                           R"(","max_tokens":0,"temperature":0,"echo":true,"logprobs":1)";
  for (const char* stream : {"", R"(,"stream":true,"stream_options":{"include_usage":true})"}) {
    const http_result r = http_call(server.port(), "POST", "/v1/completions", body + stream + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    std::string text, finish;
    int64_t lp_tokens = 0, completion_tokens = -1;
    auto take = [&](simdjson::dom::element doc) {
      simdjson::dom::array choices = doc["choices"];
      if (choices.size() > 0) {
        simdjson::dom::element c = choices.at(0);
        text += std::string(std::string_view(c["text"]));
        if (c["logprobs"].is_object()) lp_tokens += int64_t(c["logprobs"]["tokens"].get_array().size());
        if (!c["finish_reason"].is_null()) finish = std::string(std::string_view(c["finish_reason"]));
      }
      simdjson::dom::element usage;
      if (doc["usage"].get(usage) == simdjson::SUCCESS && !usage.is_null()) {
        completion_tokens = int64_t(usage["completion_tokens"]);
      }
    };
    if (*stream == '\0') {
      take(parser.parse(r.body));
    } else {
      const auto events = sse_events(r.body);
      ASSERT_TRUE(events.has_value()) << r.body;
      for (size_t i = 0; i + 1 < events->size(); ++i) take(parser.parse((*events)[i]));
    }
    EXPECT_EQ(text, prompt) << stream;
    EXPECT_EQ(lp_tokens, prompt_tokens) << stream;
    EXPECT_EQ(finish, "length") << stream;
    EXPECT_EQ(completion_tokens, 0) << stream;
  }
  // Without echo, max_tokens 0 is still a 400.
  const http_result plain = http_call(server.port(), "POST", "/v1/completions",
                                      R"({"prompt":"x","max_tokens":0})");
  EXPECT_EQ(plain.status, 400) << plain.body;
}

}  // namespace
}  // namespace troupe::testing
