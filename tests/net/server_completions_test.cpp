// `troupe serve` on the tiny-llama fixture (no tokenizer: token ids in and
// out): models list, and completions at temperature 0 against the fixture's
// golden greedy ids (made by transformers), streaming and not.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/cli/golden.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

const std::string tiny_llama = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";

std::vector<std::string> tiny_llama_args() {
  return {"--model", tiny_llama, "--backend", "cpu", "--dtype", "float32", "--max-model-len",
          "2048", "--cpu-kvcache-space", "1"};
}

std::vector<int64_t> int_array(simdjson::dom::element e) {
  std::vector<int64_t> out;
  for (int64_t v : e.get_array()) out.push_back(v);
  return out;
}

TEST(server_completions, models_health_version) {
  server_process server(tiny_llama_args());
  ASSERT_NE(server.port(), 0) << server.log();
  EXPECT_EQ(http_call(server.port(), "GET", "/health").status, 200);
  const http_result version = http_call(server.port(), "GET", "/version");
  EXPECT_EQ(version.status, 200);
  EXPECT_EQ(version.body, R"({"version":"0.1.0"})");
  const http_result models = http_call(server.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(models.body);
  EXPECT_EQ(std::string_view(doc["object"]), "list");
  simdjson::dom::element m = doc["data"].at(0);
  EXPECT_EQ(std::string_view(m["id"]), tiny_llama);
  EXPECT_EQ(std::string_view(m["object"]), "model");
  EXPECT_EQ(std::string_view(m["owned_by"]), "troupe");
  EXPECT_EQ(std::string_view(m["root"]), tiny_llama);
  EXPECT_EQ(int64_t(m["max_model_len"]), 2048);
  EXPECT_GT(int64_t(m["created"]), 0);
}

// /metrics names the KV cache's configuration (vLLM's cache_config_info):
// the default cache, and an FP8 cache (kv_cache_dtype fp8 on the cpu
// backend), which also serves.
TEST(server_completions, metrics_name_the_kv_cache) {
  for (const char* kv : {"auto", "fp8"}) {
    std::vector<std::string> args = tiny_llama_args();
    args.insert(args.end(), {"--kv-cache-dtype", kv});
    server_process server(args);
    ASSERT_NE(server.port(), 0) << server.log();
    const std::string dtype = std::string(kv) == "fp8" ? "fp8_e4m3" : "auto";
    EXPECT_EQ(metric_value(server.port(), "cache_config_info",
                           "block_size=\"16\",cache_dtype=\"" + dtype + "\",enable_prefix_caching=\"True\""),
              1.0)
        << http_call(server.port(), "GET", "/metrics").body;
    const http_result r = http_call(server.port(), "POST", "/v1/completions",
                                    R"({"prompt":[1,2,3,4],"max_tokens":8,"temperature":0})");
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

TEST(server_completions, greedy_equals_golden) {
  server_process server(tiny_llama_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  for (const golden_case& g : load_golden(tiny_llama + "/golden.json")) {
    const std::string body = R"({"prompt":)" + ids_json(g.prompt_ids) + R"(,"max_tokens":)" +
                             std::to_string(g.greedy_ids.size()) +
                             R"(,"temperature":0,"ignore_eos":true})";
    const http_result r = http_call(server.port(), "POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    simdjson::dom::element doc = parser.parse(r.body);
    EXPECT_EQ(std::string_view(doc["object"]), "text_completion");
    EXPECT_EQ(std::string_view(doc["id"]).substr(0, 5), "cmpl-");
    simdjson::dom::element choice = doc["choices"].at(0);
    EXPECT_EQ(int_array(choice["token_ids"]), g.greedy_ids) << "prompt of " << g.prompt_ids.size();
    EXPECT_EQ(std::string_view(choice["finish_reason"]), "length");
    EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), int64_t(g.prompt_ids.size()));
    EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), int64_t(g.greedy_ids.size()));
    EXPECT_EQ(int64_t(doc["usage"]["total_tokens"]), int64_t(g.prompt_ids.size() + g.greedy_ids.size()));
  }
}

TEST(server_completions, stream_equals_golden_with_framing) {
  server_process server(tiny_llama_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  const golden_case g = load_golden(tiny_llama + "/golden.json").at(1);
  const std::string body = R"({"prompt":)" + ids_json(g.prompt_ids) + R"(,"max_tokens":)" +
                           std::to_string(g.greedy_ids.size()) +
                           R"(,"temperature":0,"ignore_eos":true,"stream":true,)"
                           R"("stream_options":{"include_usage":true}})";
  const http_result r = http_call(server.port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type.substr(0, 17), "text/event-stream");
  auto events = sse_events(r.body);
  ASSERT_TRUE(events.has_value()) << r.body;
  ASSERT_GE(events->size(), 3u);
  EXPECT_EQ(events->back(), "[DONE]");
  std::vector<int64_t> ids;
  std::string finish;
  for (size_t i = 0; i + 2 < events->size(); ++i) {
    simdjson::dom::element chunk = parser.parse((*events)[i]);
    EXPECT_EQ(std::string_view(chunk["object"]), "text_completion");
    simdjson::dom::element choice = chunk["choices"].at(0);
    for (int64_t id : int_array(choice["token_ids"])) ids.push_back(id);
    EXPECT_TRUE(finish.empty()) << "a chunk after the finishing one";
    if (!choice["finish_reason"].is_null()) finish = std::string(std::string_view(choice["finish_reason"]));
  }
  EXPECT_EQ(ids, g.greedy_ids);
  EXPECT_EQ(finish, "length");
  simdjson::dom::element usage_chunk = parser.parse((*events)[events->size() - 2]);
  EXPECT_EQ(usage_chunk["choices"].get_array().size(), 0u);
  EXPECT_EQ(int64_t(usage_chunk["usage"]["completion_tokens"]), int64_t(g.greedy_ids.size()));
  EXPECT_EQ(int64_t(usage_chunk["usage"]["prompt_tokens"]), int64_t(g.prompt_ids.size()));
}

TEST(server_completions, several_prompts_and_n_by_index) {
  server_process server(tiny_llama_args());
  ASSERT_NE(server.port(), 0) << server.log();
  const auto cases = load_golden(tiny_llama + "/golden.json");
  const std::string body = R"({"prompt":[)" + ids_json(cases[0].prompt_ids) + "," +
                           ids_json(cases[1].prompt_ids) +
                           R"(],"max_tokens":24,"temperature":0,"ignore_eos":true,"n":2})";
  const http_result r = http_call(server.port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.body);
  ASSERT_EQ(doc["choices"].get_array().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    simdjson::dom::element choice = doc["choices"].at(i);
    EXPECT_EQ(int64_t(choice["index"]), int64_t(i));
    EXPECT_EQ(int_array(choice["token_ids"]), cases[i / 2].greedy_ids) << "choice " << i;
  }
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]),
            int64_t(cases[0].prompt_ids.size() + cases[1].prompt_ids.size()));
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 4 * 24);
}


// vLLM's prompt_logprobs over HTTP: each prompt token's logprob (after the
// first, which has none) equals the fixture's reference within 1e-3, and it
// is listed among its own entries with its rank.
TEST(server_completions, prompt_logprobs_equal_golden) {
  server_process server(tiny_llama_args());
  ASSERT_NE(server.port(), 0) << server.log();
  simdjson::dom::parser parser;
  for (const golden_case& g : load_golden(tiny_llama + "/golden.json")) {
    const std::string body = R"({"prompt":)" + ids_json(g.prompt_ids) +
                             R"(,"max_tokens":1,"temperature":0,"prompt_logprobs":2})";
    const http_result r = http_call(server.port(), "POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    simdjson::dom::element plp = parser.parse(r.body)["choices"].at(0)["prompt_logprobs"];
    ASSERT_EQ(plp.get_array().size(), g.prompt_ids.size());
    EXPECT_TRUE(plp.at(0).is_null());
    for (size_t i = 1; i < g.prompt_ids.size(); ++i) {
      simdjson::dom::object entries = plp.at(i).get_object();
      EXPECT_LE(entries.size(), 3u);  // the prompt token and the top 2
      simdjson::dom::element own = entries[std::to_string(g.prompt_ids[i])];
      ASSERT_TRUE(g.prompt_logprobs[i].has_value());
      EXPECT_NEAR(double(own["logprob"]), *g.prompt_logprobs[i], 1e-3) << "position " << i;
      EXPECT_GE(int64_t(own["rank"]), 1);
    }
  }
  // Not with streaming (as vLLM).
  EXPECT_EQ(http_call(server.port(), "POST", "/v1/completions",
                      R"({"prompt":[1,2],"prompt_logprobs":1,"stream":true})").status, 400);
}

}  // namespace
}  // namespace troupe::testing
