// The HTTP/1.1 client of `bench serve` (Boost.Beast over Asio, plain TCP).
//
// http_client runs on one io_context and is used from that io_context's one
// thread only. Each send() writes a pre-serialized request on a connection
// of its own (one per request in flight), reads the response header, then
// hands every piece of the body to the caller as it arrives, stamped with
// steady_clock at the read's completion (before any parsing). Connections
// whose response ended cleanly with keep-alive go back to an idle pool and
// are reused; a reused connection that fails before any response byte
// (the server closed it while idle) is retried once on a fresh one. Every
// exchange is bounded by the timeout (connect, write and the whole read).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace troupe::bench {

using bench_clock = std::chrono::steady_clock;

// http://host[:port][/prefix] (https is not supported).
struct http_endpoint {
  std::string host;  // without brackets for IPv6
  std::string port = "80";
  std::string prefix;  // path prefix without the trailing '/', e.g. "" or "/api"
  std::string url() const;
};
result<http_endpoint> parse_base_url(const std::string& url);

using header_list = std::vector<std::pair<std::string, std::string>>;

// "METHOD prefix+target HTTP/1.1" with Host, the headers, and for a body
// Content-Type: application/json and Content-Length.
std::string build_request(const http_endpoint& ep, const std::string& method,
                          const std::string& target, const header_list& headers,
                          const std::string& body);

struct exchange_handlers {
  std::function<void(int status)> on_status;
  std::function<void(std::string_view bytes, bench_clock::time_point at)> on_body;
  // "" once the whole response was read; else what went wrong
  // ("timed out after 60 s", "connection refused", ...).
  std::function<void(const std::string& transport_error)> on_done;
};

class http_client {
 public:
  http_client(boost::asio::io_context& ioc, http_endpoint ep, std::chrono::seconds timeout);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // Resolves the host once (blocking); errors name the host.
  status resolve();
  void send(std::shared_ptr<const std::string> request, exchange_handlers handlers);
  size_t num_idle_connections() const { return idle_.size(); }

 private:
  friend class exchange;
  std::unique_ptr<boost::beast::tcp_stream> take_idle();
  void give_back(std::unique_ptr<boost::beast::tcp_stream> s);

  boost::asio::io_context& ioc_;
  http_endpoint ep_;
  std::chrono::seconds timeout_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;
  std::vector<std::unique_ptr<boost::beast::tcp_stream>> idle_;
};

// A whole exchange on its own io_context (for /v1/models and /metrics).
struct simple_response {
  int status = 0;  // 0: no response
  std::string body;
  std::string error;
};
simple_response http_fetch(const http_endpoint& ep, const std::string& method,
                           const std::string& target, const header_list& headers,
                           const std::string& body, std::chrono::seconds timeout);
// The same, handing each piece of the body to on_body as it arrives (the
// response's body stays empty): streamed responses (`troupe chat`).
simple_response http_stream(const http_endpoint& ep, const std::string& method,
                            const std::string& target, const header_list& headers,
                            const std::string& body, std::chrono::seconds timeout,
                            const std::function<void(std::string_view)>& on_body);

// Raises the soft limit on open files to the hard limit (one socket per
// request in flight); returns the new soft limit.
int64_t raise_open_file_limit();

}  // namespace troupe::bench
