// bench serve's reading of a streamed response: SSE framing, which chunks
// carry tokens, and the request record (TTFT, ITL, E2EL, output tokens,
// failure reasons) from made-up bytes and arrival times.
#include <gtest/gtest.h>

#include "cli/bench/stream_recorder.h"

namespace troupe::bench {
namespace {

std::vector<std::string> split(sse_splitter& s, std::string_view bytes) {
  std::vector<std::string> out;
  s.feed(bytes, [&](const std::string& e) { out.push_back(e); });
  return out;
}

TEST(bench_sse, events_across_reads_crlf_comments_and_multiline_data) {
  sse_splitter s;
  EXPECT_TRUE(split(s, "data: {\"a\":").empty());
  EXPECT_TRUE(s.has_partial());
  EXPECT_EQ(split(s, "1}\n\ndata: [DONE]\n"), (std::vector<std::string>{"{\"a\":1}"}));
  EXPECT_EQ(split(s, "\n"), (std::vector<std::string>{"[DONE]"}));
  EXPECT_FALSE(s.has_partial());
  EXPECT_EQ(split(s, ": ping\n\ndata:x\r\n\r\nevent: e\ndata: a\ndata: b\n\n"),
            (std::vector<std::string>{"x", "a\nb"}));
}

TEST(bench_sse, which_chunks_carry_tokens) {
  simdjson::dom::parser p;
  const stream_chunk role = parse_stream_chunk(
      p, R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})");
  EXPECT_FALSE(role.has_tokens);
  const stream_chunk content = parse_stream_chunk(
      p, R"({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})");
  EXPECT_TRUE(content.has_tokens);
  // vLLM's role chunk with the first token's text counts.
  EXPECT_TRUE(parse_stream_chunk(p, R"({"choices":[{"delta":{"role":"assistant","content":"Hi"}}]})").has_tokens);
  const stream_chunk text = parse_stream_chunk(
      p, R"({"choices":[{"index":0,"text":"","finish_reason":"length","token_ids":[5,6]}]})");
  EXPECT_TRUE(text.has_tokens);  // empty text still counts (a special token, held-back bytes)
  EXPECT_EQ(text.num_token_ids, 2);
  EXPECT_EQ(text.finish_reason, "length");
  const stream_chunk usage = parse_stream_chunk(
      p, R"({"choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}})");
  EXPECT_FALSE(usage.has_tokens);
  EXPECT_EQ(usage.completion_tokens, 3);
  EXPECT_EQ(usage.prompt_tokens, 7);
  EXPECT_FALSE(parse_stream_chunk(p, R"({"choices":[{"text":"a"}],"usage":null})").completion_tokens);
  EXPECT_TRUE(parse_stream_chunk(p, "[DONE]").done);
  EXPECT_TRUE(parse_stream_chunk(p, "{oops").invalid);
  EXPECT_EQ(parse_stream_chunk(p, R"({"error":{"message":"boom","code":500}})").error, "boom");
}

TEST(bench_sse, error_bodies) {
  simdjson::dom::parser p;
  EXPECT_EQ(error_body_message(p, R"({"error":{"message":"The model `x` does not exist.","type":"NotFoundError"}})"),
            "The model `x` does not exist.");
  EXPECT_EQ(error_body_message(p, R"({"detail":"Not Found"})"), "Not Found");
  EXPECT_EQ(error_body_message(p, "  Bad Gateway\n"), "Bad Gateway");
}

using namespace std::chrono_literals;

std::string chunk(const std::string& token_ids, const char* finish = "null") {
  return "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":" + std::string(finish) +
         ",\"token_ids\":[" + token_ids + "]}]}\n\n";
}

TEST(bench_stream_recorder, ttft_itl_e2el_and_usage_tokens) {
  simdjson::dom::parser p;
  const bench_clock::time_point t0{};
  stream_recorder rec(t0, 5);
  rec.on_status(200);
  // Two chunks arrive in one read at 100 ms: ITL 0 between them, as vLLM.
  rec.on_body(chunk("1") + chunk("2"), t0 + 100ms, p);
  rec.on_body(chunk("3,4"), t0 + 130ms, p);
  rec.on_body(chunk("5", "\"length\"").substr(0, 20), t0 + 150ms, p);  // half a chunk
  rec.on_body(chunk("5", "\"length\"").substr(20), t0 + 170ms, p);
  rec.on_body("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n",
              t0 + 400ms, p);
  const request_record r = rec.finish("", p);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft, 0.1);
  ASSERT_EQ(r.itl.size(), 3u);
  EXPECT_DOUBLE_EQ(r.itl[0], 0.0);
  EXPECT_NEAR(r.itl[1], 0.03, 1e-12);
  EXPECT_NEAR(r.itl[2], 0.04, 1e-12);
  EXPECT_NEAR(r.latency, 0.17, 1e-12);  // the last token chunk, not [DONE] or usage
  EXPECT_EQ(r.output_tokens, 5);        // usage
  EXPECT_EQ(r.prompt_len, 6);           // usage beats the dataset's 5
  EXPECT_NEAR(r.ttft + (r.latency - r.ttft) / (r.output_tokens - 1) * (r.output_tokens - 1), r.latency, 1e-12);
}

TEST(bench_stream_recorder, output_tokens_without_usage) {
  simdjson::dom::parser p;
  const bench_clock::time_point t0{};
  stream_recorder with_ids(t0, 5);
  with_ids.on_status(200);
  with_ids.on_body(chunk("1,2") + chunk("3"), t0 + 10ms, p);
  EXPECT_EQ(with_ids.finish("", p).output_tokens, 3);  // the token_ids sent
  stream_recorder text_only(t0, 5);
  text_only.on_status(200);
  for (int i = 0; i < 4; ++i) {
    text_only.on_body("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", t0 + i * 10ms, p);
  }
  const request_record r = text_only.finish("", p);
  EXPECT_EQ(r.output_tokens, 4);  // one per chunk
  EXPECT_EQ(r.prompt_len, 5);
}

TEST(bench_stream_recorder, failure_reasons) {
  simdjson::dom::parser p;
  const bench_clock::time_point t0{};
  const auto run = [&](int status, const std::string& body, const std::string& transport = "") {
    stream_recorder rec(t0, 5);
    rec.on_status(status);
    rec.on_body(body, t0 + 1ms, p);
    return rec.finish(transport, p);
  };
  EXPECT_EQ(run(400, R"({"error":{"message":"too long","type":"BadRequestError"}})").error, "HTTP 400: too long");
  EXPECT_EQ(run(200, chunk("1"), "timed out after 5 s").error, "timed out after 5 s");
  EXPECT_EQ(run(200, "data: [DONE]\n\n").error.rfind("no token chunk", 0), 0u);
  EXPECT_EQ(run(200, chunk("1") + "data: {\"error\":{\"message\":\"boom\"}}\n\n").error, "error in the stream: boom");
  EXPECT_EQ(run(200, chunk("1", "\"abort\"")).error, "finish_reason abort");
  EXPECT_EQ(run(200, "data: nope\n\n").error, "a stream chunk is not JSON");
  EXPECT_EQ(run(200, R"({"choices":[{"text":"hi"}]})").error.rfind("the reply is not an event stream", 0), 0u);
  EXPECT_FALSE(run(400, "x").success);
  EXPECT_TRUE(run(200, chunk("1", "\"stop\"")).success);
}

}  // namespace
}  // namespace troupe::bench
