// Test harness for `troupe serve`: starts the server as a subprocess on
// 127.0.0.1 with a free port, waits for /health, and talks raw HTTP to it
// with a small Beast client whose every call is bounded in time.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace troupe::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

struct http_result {
  int status = 0;  // 0: no response (connection failed or timed out)
  std::string body;
  std::string content_type;
  std::string retry_after;
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
  bool running() const { return pid_ > 0; }
  std::string log() const {
    std::FILE* f = std::fopen((log_dir_ / "log").c_str(), "r");
    std::string out;
    if (f == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
  }

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
    std::vector<std::string> argv{TROUPE_BINARY, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* a : {"--host", "127.0.0.1", "--port"}) argv.emplace_back(a);
    argv.push_back(std::to_string(port));
    const std::string log_path = (log_dir_ / "log").string();
    pid_ = fork();
    if (pid_ == 0) {
      std::FILE* f = std::fopen(log_path.c_str(), "a");
      if (f != nullptr) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
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

inline std::string repo_path(const std::string& relative) {
  return std::string(TROUPE_TEST_DATA) + "/../../" + relative;
}

}  // namespace troupe::testing
