// Every error `troupe serve` answers, with its status and OpenAI's envelope
// {"error":{"message","type","param","code"}}, over raw HTTP.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

const std::string tiny_llama = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";

std::vector<std::string> args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--model", tiny_llama, "--backend", "cpu", "--dtype", "float32",
                             "--max-model-len", "2048", "--cpu-kvcache-space", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Checks the envelope; returns the message.
std::string expect_error(const http_result& r, int status, const std::string& type) {
  EXPECT_EQ(r.status, status) << r.body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(r.body).get(doc)) {
    ADD_FAILURE() << "not JSON: " << r.body;
    return "";
  }
  simdjson::dom::element e = doc["error"];
  EXPECT_EQ(std::string_view(e["type"]), type) << r.body;
  EXPECT_EQ(int64_t(e["code"]), status) << r.body;
  simdjson::dom::element param;
  EXPECT_FALSE(e["param"].get(param)) << "param present (maybe null)";
  return std::string(std::string_view(e["message"]));
}

std::vector<std::string> suite_args() { return args(); }
class server_errors : public shared_server_suite<suite_args> {};

TEST_F(server_errors, invalid_json_and_types) {
  ASSERT_NE(port(), 0) << server_->log();
  EXPECT_NE(expect_error(post("/v1/completions", R"({"prompt":[1,2,3],"max_tok)"), 400, "BadRequestError")
                .find("invalid JSON"), std::string::npos);
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1,2],"max_tokens":"x"})"), 400, "BadRequestError"),
            "max_tokens: expected an integer");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1,2],"temperature":"hot"})"), 400, "BadRequestError"),
            "temperature: expected a number");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":{"a":1}})"), 400, "BadRequestError").substr(0, 16),
            "prompt: expected");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1],"stream":1})"), 400, "BadRequestError"),
            "stream: expected a boolean");
  expect_error(post("/v1/completions", "[1,2]"), 400, "BadRequestError");
  EXPECT_NE(expect_error(http_call(port(), "POST", "/v1/completions", R"({"prompt":[1]})",
                                   {{"Content-Type", "text/plain"}}),
                         400, "BadRequestError")
                .find("Content-Type"), std::string::npos);
  // Unknown fields are refused, naming the field (and the nearest known
  // one); OpenAI's optional hints are accepted.
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1],"max_tokens":1,"no_such_field":[1,{}]})"),
                         400, "BadRequestError"),
            "no_such_field: unknown field");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1],"max_token":1})"), 400, "BadRequestError"),
            "max_token: unknown field (did you mean 'max_tokens'?)");
  EXPECT_EQ(post("/v1/completions", R"({"prompt":[1],"max_tokens":1,"user":"u-1"})").status, 200);
}

TEST_F(server_errors, bad_sampling_values) {
  ASSERT_NE(port(), 0) << server_->log();
  EXPECT_NE(expect_error(post("/v1/completions", R"({"prompt":[1,2],"temperature":-1})"), 400, "BadRequestError")
                .find("temperature"), std::string::npos);
  EXPECT_NE(expect_error(post("/v1/completions", R"({"prompt":[1,2],"top_p":1.5})"), 400, "BadRequestError")
                .find("top_p"), std::string::npos);
  expect_error(post("/v1/completions", R"({"prompt":[1,2],"max_tokens":0})"), 400, "BadRequestError");
  expect_error(post("/v1/completions", R"({"prompt":[1,999999]})"), 400, "BadRequestError");
  // The fixture has no tokenizer: text prompts cannot be served.
  expect_error(post("/v1/completions", R"({"prompt":"hello"})"), 400, "BadRequestError");
}

TEST_F(server_errors, prompt_too_long_has_vllm_message) {
  ASSERT_NE(port(), 0) << server_->log();
  std::string ids;
  for (int i = 0; i < 2000; ++i) ids += (i ? "," : "") + std::to_string(1 + i % 500);
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[)" + ids + R"(],"max_tokens":100})"), 400,
                         "BadRequestError"),
            "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
            "(2000 in the messages, 100 in the completion). Please reduce the length of the messages "
            "or completion.");
}

TEST_F(server_errors, body_too_large_is_413) {
  ASSERT_NE(port(), 0) << server_->log();
  const std::string big = R"({"prompt":")" + std::string(10 << 20, 'a') + R"("})";
  expect_error(post("/v1/completions", big), 413, "RequestEntityTooLargeError");
  EXPECT_EQ(http_call(port(), "GET", "/health").status, 200);  // the server is fine
}

TEST_F(server_errors, unknown_model_route_and_method) {
  ASSERT_NE(port(), 0) << server_->log();
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"model":"nope","prompt":[1]})"), 404, "NotFoundError"),
            "The model `nope` does not exist.");
  expect_error(http_call(port(), "GET", "/v1/nothing"), 404, "NotFoundError");
  expect_error(http_call(port(), "GET", "/v1/completions"), 405, "MethodNotAllowedError");
}

TEST_F(server_errors, unsupported_chat_fields) {
  ASSERT_NE(port(), 0) << server_->log();
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(expect_error(post("/v1/chat/completions", "{" + msgs + R"(,"tools":[{"type":"function"}]})"), 400,
                         "BadRequestError"),
            "tools[0]: expected {\"type\": \"function\", \"function\": {\"name\", \"description\", "
            "\"parameters\"}}");
  EXPECT_EQ(expect_error(post("/v1/chat/completions", "{" + msgs + R"(,"function_call":"auto"})"), 400,
                         "BadRequestError"),
            "function_call: deprecated by OpenAI and not served; send tools and tool_choice");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt":[1],"response_format":{"type":"json_object"}})"),
                         400, "BadRequestError"),
            "structured outputs need a tokenizer; this model is served without one");
  expect_error(post("/v1/completions", R"({"prompt":[1],"echo":true})"), 400, "BadRequestError");
}

TEST(server_auth, api_key_required_on_v1) {
  server_process server(args({"--api-key", "secret"}));
  ASSERT_NE(server.port(), 0) << server.log();
  expect_error(http_call(server.port(), "GET", "/v1/models"), 401, "AuthenticationError");
  expect_error(http_call(server.port(), "GET", "/v1/models", "", {{"Authorization", "Bearer wrong"}}), 401,
               "AuthenticationError");
  EXPECT_EQ(http_call(server.port(), "GET", "/v1/models", "", {{"Authorization", "Bearer secret"}}).status, 200);
  EXPECT_EQ(http_call(server.port(), "POST", "/v1/completions", R"({"prompt":[1],"max_tokens":2})",
                      {{"Authorization", "Bearer secret"}}).status, 200);
  EXPECT_EQ(http_call(server.port(), "GET", "/health").status, 200);
}

}  // namespace
}  // namespace troupe::testing
