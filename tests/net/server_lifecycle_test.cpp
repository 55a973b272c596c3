// Connections that go away and servers that are told to stop: a client that
// disconnects mid-stream aborts its request (no running request remains),
// and SIGTERM during 32 streams lets each stream end with [DONE], then the
// process exits 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

const std::string tiny_llama = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";

std::vector<std::string> args() {
  return {"--model", tiny_llama, "--backend", "cpu", "--dtype", "float32", "--max-model-len",
          "2048", "--cpu-kvcache-space", "1"};
}

const std::string long_stream =
    R"({"prompt":[1,2,3,4],"max_tokens":1900,"ignore_eos":true,"stream":true})";

// Sends a (non-streaming) request and closes the connection after `wait`
// without reading the response.
// Sends a request and closes the connection without reading, once
// `generating()` holds (polled, at most 10 s): the generation has begun.
template <class Pred>
void send_then_disconnect(int port, const std::string& body, Pred generating) {
  asio::io_context ioc;
  asio::ip::tcp::socket socket(ioc);
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  socket.async_connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)},
                       [&](beast::error_code ec) {
                         if (!ec) asio::async_write(socket, asio::buffer(request), [](beast::error_code, size_t) {});
                       });
  ioc.run_for(std::chrono::seconds(5));  // returns once the request is written
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!generating() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  socket.close();
}

// A troupe: series from /metrics as an integer, or -1.
int64_t metric(int port, const std::string& name) {
  return static_cast<int64_t>(metric_value(port, name).value_or(-1));
}

// Running requests, polled until they reach 0 or a second has passed.
int64_t running_after_one_second(int port) {
  return static_cast<int64_t>(
      metric_settles_at(port, "num_requests_running", 0, std::chrono::milliseconds(1000)));
}

TEST(server_lifecycle, disconnect_mid_stream_aborts_request) {
  server_process server(args());
  ASSERT_NE(server.port(), 0) << server.log();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(stream_then_disconnect(server.port(), long_stream, std::chrono::seconds(30)));
  }
  EXPECT_EQ(http_call(server.port(), "GET", "/v1/models").status, 200);
  EXPECT_EQ(running_after_one_second(server.port()), 0) << server.log();
  // Aborted, not run to the end: 4 x 1900 tokens were asked for.
  const int64_t generated = metric(server.port(), "generation_tokens_total");
  EXPECT_GE(generated, 4);
  EXPECT_LT(generated, 1900) << server.log();
}

TEST(server_lifecycle, disconnect_while_not_streaming_aborts_request) {
  server_process server(args());
  ASSERT_NE(server.port(), 0) << server.log();
  send_then_disconnect(server.port(), R"({"prompt":[1,2,3],"max_tokens":1900,"ignore_eos":true})",
                       [&] { return metric(server.port(), "generation_tokens_total") >= 1; });
  EXPECT_EQ(running_after_one_second(server.port()), 0) << server.log();
  const int64_t generated = metric(server.port(), "generation_tokens_total");
  EXPECT_GE(generated, 1);
  EXPECT_LT(generated, 1900) << server.log();
}

TEST(server_lifecycle, sigterm_during_streams_finishes_them_and_exits_0) {
  server_process server(args());
  ASSERT_NE(server.port(), 0) << server.log();
  constexpr int num_streams = 32;
  std::vector<http_result> results(num_streams);
  std::vector<std::thread> clients;
  for (int i = 0; i < num_streams; ++i) {
    clients.emplace_back([&, i] {
      results[i] = http_call(server.port(), "POST", "/v1/completions",
                             R"({"prompt":[1,2,3],"max_tokens":200,"ignore_eos":true,"stream":true})",
                             {}, std::chrono::seconds(60));
    });
  }
  // SIGTERM once every stream runs (bounded wait).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t running = 0;
  while ((running = metric(server.port(), "num_requests_running")) < num_streams &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int exit_code = server.stop(SIGTERM, std::chrono::seconds(30));
  for (std::thread& t : clients) t.join();
  const std::string server_log = server.log();
  EXPECT_GT(running, 0) << "the streams should still run when SIGTERM arrives";
  EXPECT_EQ(exit_code, 0) << server.log();
  for (int i = 0; i < num_streams; ++i) {
    EXPECT_EQ(results[i].status, 200) << "stream " << i;
    const auto events = sse_events(results[i].body);
    ASSERT_TRUE(events.has_value()) << results[i].body;
    ASSERT_FALSE(events->empty());
    EXPECT_EQ(events->back(), "[DONE]") << "stream " << i;
    // Drained, not cut: every stream got all its tokens.
    EXPECT_EQ(streamed_token_count(*events), 200u) << "stream " << i;
  }
  EXPECT_NE(server_log.find("signal 15 received"), std::string::npos) << server_log;
}

TEST(server_lifecycle, full_waiting_queue_is_503_with_retry_after) {
  std::vector<std::string> a = args();
  a.insert(a.end(), {"--max-num-seqs", "1", "--max-waiting-seqs", "4"});  // 4 waiting sequences
  auto server = std::make_unique<server_process>(a);
  ASSERT_NE(server->port(), 0) << server->log();
  const int port = server->port();
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([port] {
      http_call(port, "POST", "/v1/completions",
                R"({"prompt":[1,2,3],"max_tokens":1900,"ignore_eos":true})", {}, std::chrono::seconds(60));
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (metric(port, "num_requests_waiting") < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const http_result r = http_call(port, "POST", "/v1/completions", R"({"prompt":[1],"max_tokens":1})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.retry_after, "1");
  EXPECT_NE(r.body.find("ServiceUnavailableError"), std::string::npos) << r.body;
  server.reset();  // SIGKILL: the waiting clients see their connections close
  for (std::thread& t : clients) t.join();
}

}  // namespace
}  // namespace troupe::testing
