// The request parser and the response builder on their own (no server):
// typed fields, every accepted prompt shape, type errors naming the field,
// and the generation's SSE framing and usage arithmetic.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "net/generation.h"
#include "net/openai_request.h"

namespace troupe {
namespace {

template <class T>
const T& ok(const parse_result<T>& r) {
  if (const auto* e = std::get_if<api_error>(&r)) ADD_FAILURE() << e->message;
  return std::get<T>(r);
}

template <class T>
std::string err(const parse_result<T>& r) {
  const auto* e = std::get_if<api_error>(&r);
  return e == nullptr ? "(parsed)" : e->message;
}

TEST(openai_request, completion_fields) {
  auto parsed = parse_completion_request(
      R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,)"
      R"("min_p":0.1,"seed":3,"n":2,"stop":"x","stop_token_ids":[4],"ignore_eos":true,)"
      R"("presence_penalty":0.2,"frequency_penalty":0.3,"repetition_penalty":1.1,"logprobs":2,)"
      R"("stream":true,"stream_options":{"include_usage":true},"return_token_ids":true})");
  if (std::holds_alternative<api_error>(parsed)) FAIL() << err(parsed);
  const completion_request& r = std::get<completion_request>(parsed);
  EXPECT_EQ(r.common.model, "m");
  EXPECT_TRUE(r.prompt_is_text);
  EXPECT_EQ(r.text_prompts, std::vector<std::string>{"hi"});
  EXPECT_EQ(r.common.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.common.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.common.params.top_p, 0.9f);
  EXPECT_EQ(r.common.params.top_k, 5);
  EXPECT_FLOAT_EQ(r.common.params.min_p, 0.1f);
  EXPECT_TRUE(r.common.params.has_seed);
  EXPECT_EQ(r.common.params.seed, 3);
  EXPECT_EQ(r.common.params.n, 2);
  EXPECT_EQ(r.common.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.common.params.stop_token_ids, std::vector<int32_t>{4});
  EXPECT_TRUE(r.common.params.ignore_eos);
  EXPECT_FLOAT_EQ(r.common.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.common.params.logprobs, 2);
  EXPECT_TRUE(r.common.stream);
  EXPECT_TRUE(r.common.include_usage);
  EXPECT_TRUE(r.common.return_token_ids);
}

TEST(openai_request, prompt_shapes) {
  EXPECT_EQ(ok(parse_completion_request(R"({"prompt":["a","b"]})")).text_prompts.size(), 2u);
  const auto ids = ok(parse_completion_request(R"({"prompt":[1,2,3]})"));
  EXPECT_FALSE(ids.prompt_is_text);
  EXPECT_EQ(ids.id_prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(ok(parse_completion_request(R"({"prompt":[[1],[2,3]]})")).id_prompts,
            (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1,"a"]})")).substr(0, 16), "prompt: expected");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[]})")), "prompt: must not be empty");
  EXPECT_EQ(err(parse_completion_request(R"({"max_tokens":3})")), "prompt: required");
}

TEST(openai_request, type_errors_name_the_field) {
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"max_tokens":1.5})")), "max_tokens: expected an integer");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"stop":[1]})")), "stop: expected a string or a list of strings");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"n":99999999999})")), "n: 99999999999 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"stream_options":{"include_usage":true}})")),
            "stream_options: only allowed when stream is true");
  EXPECT_EQ(err(parse_chat_request(R"({"messages":[],"top_logprobs":2})")), "top_logprobs: requires logprobs to be true");
  EXPECT_EQ(err(parse_chat_request(R"({"model":"m"})")), "messages: required");
  EXPECT_EQ(err(parse_chat_request(R"({"messages":[],"tool_choice":"auto"})")), "tool_choice: not supported yet");
  // null means absent.
  EXPECT_FALSE(ok(parse_completion_request(R"({"prompt":[1],"max_tokens":null})")).common.max_tokens.has_value());
}

TEST(openai_request, chat_max_completion_tokens_and_logprobs) {
  const chat_request r = ok(parse_chat_request(
      R"({"messages":[],"max_tokens":5,"max_completion_tokens":9,"logprobs":true,"top_logprobs":3})"));
  EXPECT_EQ(r.common.max_tokens, 9);
  EXPECT_EQ(r.common.params.logprobs, 3);
}

generation_context two_choice_context(bool stream) {
  generation_context ctx;
  ctx.kind = generation_kind::chat;
  ctx.id = "chatcmpl-x";
  ctx.model = "m";
  ctx.stream = stream;
  ctx.include_usage = true;
  ctx.choice_prompt_ids = {{1, 2, 3}, {1, 2, 3}};
  ctx.choice_counts_prompt = {true, false};
  return ctx;
}

request_output output(std::vector<int32_t> ids, finish_reason f) {
  request_output o;
  o.new_token_ids = std::move(ids);
  o.finish = f;
  return o;
}

TEST(generation, usage_counts_prompt_once_per_prompt) {
  generation g(two_choice_context(false));
  g.on_output(0, output({5, 6}, finish_reason::none));
  g.on_output(1, output({7}, finish_reason::length));
  EXPECT_FALSE(g.done());
  g.on_output(0, output({8}, finish_reason::stop));
  ASSERT_TRUE(g.done());
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(g.response_body());
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), 3);
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 4);
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_EQ(std::string_view(doc["choices"].at(1)["finish_reason"]), "length");
}

TEST(generation, stream_ends_with_usage_then_done) {
  generation g(two_choice_context(true));
  const std::string start = g.stream_start();
  EXPECT_EQ(std::count(start.begin(), start.end(), '\n'), 4);  // two role frames
  EXPECT_NE(start.find(R"("role":"assistant")"), std::string::npos);
  EXPECT_EQ(g.on_output(0, output({5}, finish_reason::length)).find("[DONE]"), std::string::npos);
  const std::string last = g.on_output(1, output({6}, finish_reason::length));
  const size_t usage = last.find(R"("choices":[],"usage")");
  ASSERT_NE(usage, std::string::npos) << last;
  EXPECT_EQ(last.substr(last.size() - 14), "data: [DONE]\n\n");
  EXPECT_LT(usage, last.find("[DONE]"));
}

}  // namespace
}  // namespace troupe
