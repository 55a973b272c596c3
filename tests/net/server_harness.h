// Test harness for `troupe serve`: starts the server as a subprocess on
// 127.0.0.1 with a free port, waits for /health, and talks raw HTTP to it
// with a small Beast client whose every call is bounded in time.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"
#include "tests/troupe_child.h"

namespace troupe::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

struct http_result {
  int status = 0;  // 0: no response (connection failed or timed out)
  std::string body;
  std::string content_type;
  std::string retry_after;
  std::string www_authenticate;
};

// One request on a fresh connection; the whole exchange is bounded by
// `timeout`.
inline http_result http_call(int port, const std::string& method, const std::string& target,
                             const std::string& body = "",
                             const std::vector<std::pair<std::string, std::string>>& headers = {},
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http_result out;
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  stream.expires_after(timeout);
  const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  stream.async_connect(ep, [&](beast::error_code ec) {
    if (ec) return;
    http::async_write(stream, req, [&](beast::error_code ec2, size_t) {
      if (ec2) return;
      http::async_read(stream, buffer, parser, [&](beast::error_code ec3, size_t) {
        if (ec3) return;
        const auto& res = parser.get();
        out.status = static_cast<int>(res.result_int());
        out.body = res.body();
        out.content_type = std::string(res[http::field::content_type]);
        out.retry_after = std::string(res[http::field::retry_after]);
        out.www_authenticate = std::string(res[http::field::www_authenticate]);
      });
    });
  });
  ioc.run_for(timeout + std::chrono::seconds(1));
  return out;
}

// Server-sent events: the payloads of "data: ...\n\n" frames, in order.
// Returns nullopt when the body is not made only of such frames.
inline std::optional<std::vector<std::string>> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos || body.compare(pos, 6, "data: ") != 0) return std::nullopt;
    events.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return events;
}

// The default model of scripts/run-default.sh (examples/deploy-qwen3-dummy-cpu.yaml):
// a small Qwen3-shaped model with random weights, the real Qwen3 tokenizer
// and chat template, on the CPU; paths made absolute.
inline std::vector<std::string> default_cpu_args(std::vector<std::string> extra = {}) {
  const std::string root = std::string(TROUPE_TEST_DATA) + "/../..";
  std::vector<std::string> a{
      "--model", root + "/examples/models/qwen3-tiny-151k", "--tokenizer",
      root + "/tests/data/tokenizers/qwen3", "--served-model-name", "qwen3-tiny",
      "--load-format", "dummy", "--backend", "cpu", "--dtype", "float32", "--seed", "0",
      "--max-model-len", "4096", "--cpu-kvcache-space", "1", "--max-num-seqs", "64",
      "--max-num-batched-tokens", "2048"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// `troupe serve ARGS --host 127.0.0.1 --port P` as a child process.
class server_process {
 public:
  explicit server_process(std::vector<std::string> args) : log_dir_("serve") {
    for (int attempt = 0; attempt < 5 && port_ == 0; ++attempt) {
      const int port = 20000 + static_cast<int>((getpid() * 37 + attempt * 7919) % 30000);
      start(args, port);
      if (wait_healthy()) port_ = port;
      else stop(SIGKILL, std::chrono::seconds(5));
    }
  }
  ~server_process() {
    if (pid_ > 0) stop(SIGKILL, std::chrono::seconds(5));
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  int port() const { return port_; }  // 0: never became healthy
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  std::string log() const { return read_log(log_dir_ / "log"); }

  // Sends `sig` and waits up to `timeout`; returns the exit status, or -1
  // (then the process is killed).
  int stop(int sig, std::chrono::seconds timeout) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

 private:
  void start(const std::vector<std::string>& args, int port) {
    std::vector<std::string> argv{"serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* a : {"--host", "127.0.0.1", "--port"}) argv.emplace_back(a);
    argv.push_back(std::to_string(port));
    pid_ = spawn_troupe(argv, (log_dir_ / "log").string());
    probe_port_ = port;
  }

  bool wait_healthy() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (http_call(probe_port_, "GET", "/health", "", {}, std::chrono::seconds(2)).status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  temp_dir log_dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int probe_port_ = 0;
};

// A test suite sharing one server, started with make_args() before its first
// test and stopped after its last.
template <std::vector<std::string> (*make_args)()>
class shared_server_suite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new server_process(make_args()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  int port() const { return server_->port(); }
  http_result post(const std::string& target, const std::string& body) const {
    return http_call(port(), "POST", target, body);
  }
  static inline server_process* server_ = nullptr;
};

// The value of a troupe: series from /metrics: the first sample named
// `name` (e.g. "num_requests_running", "e2e_request_latency_seconds_count")
// whose labels contain `label` (e.g. "finished_reason=\"abort\""), or
// nullopt when there is none.
inline std::optional<double> metric_value(int port, const std::string& name,
                                          const std::string& label = "") {
  const http_result r = http_call(port, "GET", "/metrics", "", {}, std::chrono::seconds(5));
  if (r.status != 200) return std::nullopt;
  const std::string prefix = "troupe:" + name + "{";
  size_t pos = 0;
  while (pos < r.body.size()) {
    size_t end = r.body.find('\n', pos);
    if (end == std::string::npos) end = r.body.size();
    const std::string line = r.body.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t close = line.find("} ");
    if (close == std::string::npos || line.substr(0, close).find(label) == std::string::npos) continue;
    return std::stod(line.substr(close + 2));
  }
  return std::nullopt;
}

// Polls `name` until it equals `want` or `timeout` passes; returns the last value (-1: none).
inline double metric_settles_at(int port, const std::string& name, double want,
                                std::chrono::milliseconds timeout, const std::string& label = "") {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  double v = metric_value(port, name, label).value_or(-1);
  while (v != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    v = metric_value(port, name, label).value_or(-1);
  }
  return v;
}

// Sends a streaming request, reads until the first SSE frame, then closes
// the connection. Returns whether a frame arrived (bounded by `timeout`).
inline bool stream_then_disconnect(int port, const std::string& body, std::chrono::seconds timeout) {
  asio::io_context ioc;
  asio::ip::tcp::socket socket(ioc);
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string received;
  std::array<char, 4096> buf{};
  bool saw_frame = false;
  std::function<void()> read_more = [&] {
    socket.async_read_some(asio::buffer(buf), [&](beast::error_code ec, size_t n) {
      if (ec) return;
      received.append(buf.data(), n);
      if (received.find("data: ") != std::string::npos) {
        saw_frame = true;
        socket.close();
        return;
      }
      read_more();
    });
  };
  socket.async_connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)},
                       [&](beast::error_code ec) {
                         if (ec) return;
                         asio::async_write(socket, asio::buffer(request), [&](beast::error_code ec2, size_t) {
                           if (!ec2) read_more();
                         });
                       });
  ioc.run_for(timeout);
  return saw_frame;
}

// Completion tokens in an SSE body: the token_ids of every frame.
inline size_t streamed_token_count(const std::vector<std::string>& events) {
  size_t tokens = 0;
  for (const std::string& e : events) {
    const size_t at = e.find("\"token_ids\":[");
    if (at == std::string::npos) continue;
    const std::string list = e.substr(at + 13, e.find(']', at) - at - 13);
    if (!list.empty()) tokens += 1 + static_cast<size_t>(std::count(list.begin(), list.end(), ','));
  }
  return tokens;
}

inline std::string repo_path(const std::string& relative) {
  return std::string(TROUPE_TEST_DATA) + "/../../" + relative;
}

}  // namespace troupe::testing
