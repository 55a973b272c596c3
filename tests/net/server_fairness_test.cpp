// Issue 19's starvation case on the default CPU model: one cheap request
// (10 prompts of 2,000 token ids, n = 1000, max_tokens 1: 10,000 sequences)
// must not starve a small chat sent while it runs, and aborting it (its
// client disconnects) must empty the engine within a step. The bounds here
// are generous (CTest runs tests in parallel on two cores); the figures
// printed are what docs/reliability.md reports.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "tests/net/raw_client.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

std::string huge_request() {
  std::mt19937 rng(19);
  std::string body = R"({"prompt":[)";
  for (int p = 0; p < 10; ++p) {
    body += p ? ",[" : "[";
    for (int i = 0; i < 2000; ++i) body += (i ? "," : "") + std::to_string(1000 + rng() % 99000);
    body += "]";
  }
  return body + R"(],"n":1000,"max_tokens":1})";
}

// Seconds from sending a streamed chat to its first token (the first event
// after the role chunk); -1 when none came.
double chat_first_token(int port) {
  const auto start = clock_type::now();
  double first = -1;
  // Read incrementally: the first token's arrival is what is timed.
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket sock(ioc);
  boost::system::error_code ec;
  sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  if (ec) return -1;
  const std::string req = http_request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Hello!"}],"max_tokens":4,"stream":true})");
  asio::write(sock, asio::buffer(req), ec);
  std::string seen;
  char buf[4096];
  while (!ec && seconds_since(start) < 60) {
    const size_t n = sock.read_some(asio::buffer(buf), ec);
    seen.append(buf, n);
    // The role chunk carries "role"; the next data event is the first token.
    size_t events = 0, pos = 0;
    while ((pos = seen.find("data: {", pos)) != std::string::npos) ++events, ++pos;
    if (first < 0 && events >= 2) first = seconds_since(start);
    if (seen.find("data: [DONE]") != std::string::npos) break;
  }
  return first;
}

TEST(server_fairness, a_small_chat_starts_while_10000_sequences_run_and_an_abort_drains_them) {
  server_process server(default_cpu_args(
      {"--max-n", "1000", "--max-waiting-seqs", "10000", "--log-level", "info"}));
  ASSERT_NE(server.port(), 0) << server.log();
  const int port = server.port();
  const std::string body = huge_request();
  // The huge request, on a socket this test closes to abort it.
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket big(ioc);
  big.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  asio::write(big, asio::buffer(http_request("POST", "/v1/completions", body)));
  const auto deadline = clock_type::now() + std::chrono::seconds(60);
  while (metric_value(port, "num_requests_waiting").value_or(0) < 1000 && clock_type::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(metric_value(port, "num_requests_waiting").value_or(0), 1000) << server.log();
  std::vector<double> ttft;
  for (int i = 0; i < 3; ++i) ttft.push_back(chat_first_token(port));
  const double running = metric_value(port, "num_requests_running").value_or(-1);
  const double waiting = metric_value(port, "num_requests_waiting").value_or(-1);
  std::printf("small chat TTFT beside the 10,000-sequence request: %.3f %.3f %.3f s "
              "(running %.0f, waiting %.0f)\n", ttft[0], ttft[1], ttft[2], running, waiting);
  for (double t : ttft) {
    EXPECT_GT(t, 0) << "the chat got no token";
    EXPECT_LT(t, 10.0) << "the small chat starved";
  }
  EXPECT_GT(waiting, 0) << "the huge request finished before the chats were measured";
  // The client goes away: every one of its sequences is released at once.
  const auto abort_start = clock_type::now();
  boost::system::error_code ec;
  big.close(ec);
  double drained = -1;
  while (seconds_since(abort_start) < 30) {
    if (metric_value(port, "num_requests_running").value_or(-1) == 0 &&
        metric_value(port, "num_requests_waiting").value_or(-1) == 0) {
      drained = seconds_since(abort_start);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("abort of the 10,000-sequence request: running and waiting 0 after %.3f s\n", drained);
  EXPECT_GE(drained, 0) << server.log();
  EXPECT_LT(drained, 5.0);
  EXPECT_EQ(metric_value(port, "kv_cache_usage_perc"), 0.0);
  EXPECT_EQ(http_call(port, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace troupe::testing
