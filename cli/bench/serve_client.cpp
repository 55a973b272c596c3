#include "cli/bench/serve_client.h"

#include <sys/resource.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>

namespace troupe::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

std::string http_endpoint::url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + port + prefix;
}

result<http_endpoint> parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    return make_error("--base-url: https is not supported (use a plain http:// URL)");
  }
  if (url.rfind(scheme, 0) != 0) return make_error("--base-url: expected http://HOST[:PORT], got '" + url + "'");
  std::string rest = url.substr(scheme.size());
  http_endpoint ep;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    ep.prefix = rest.substr(slash);
    rest.resize(slash);
    while (!ep.prefix.empty() && ep.prefix.back() == '/') ep.prefix.pop_back();
  }
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) return make_error("--base-url: unterminated '[' in '" + url + "'");
    ep.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') ep.port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    ep.host = rest.substr(0, colon);
    if (colon != std::string::npos) ep.port = rest.substr(colon + 1);
  }
  if (ep.host.empty() || ep.port.empty() ||
      ep.port.find_first_not_of("0123456789") != std::string::npos) {
    return make_error("--base-url: expected http://HOST[:PORT], got '" + url + "'");
  }
  return ep;
}

std::string build_request(const http_endpoint& ep, const std::string& method,
                          const std::string& target, const header_list& headers,
                          const std::string& body) {
  std::string out = method + " " + ep.prefix + target + " HTTP/1.1\r\nHost: " + ep.host + ":" +
                    ep.port + "\r\nUser-Agent: troupe-bench\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") {
    out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  out += "\r\n";
  out += body;
  return out;
}

// One request/response on one connection (see the header).
class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(http_client& client, std::shared_ptr<const std::string> request, exchange_handlers h)
      : client_(client), request_(std::move(request)), h_(std::move(h)) {}

  void start() {
    stream_ = client_.take_idle();
    reused_ = stream_ != nullptr;
    if (reused_) {
      stream_->expires_after(client_.timeout_);
      write();
    } else {
      connect();
    }
  }

 private:
  void connect() {
    stream_ = std::make_unique<beast::tcp_stream>(client_.ioc_);
    stream_->expires_after(client_.timeout_);
    stream_->async_connect(client_.endpoints_, [self = shared_from_this()](beast::error_code ec,
                                                                           const tcp::endpoint&) {
      if (ec) return self->fail(ec);
      beast::error_code ignored;
      self->stream_->socket().set_option(tcp::no_delay(true), ignored);
      self->write();
    });
  }

  void write() {
    asio::async_write(*stream_, asio::buffer(*request_),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->retry_or_fail(ec);
                        self->read_header();
                      });
  }

  void read_header() {
    parser_.emplace();
    // Not boost::none: Beast 1.74 compares Content-Length against an empty
    // optional as "over the limit".
    parser_->body_limit(std::uint64_t{1} << 62);
    http::async_read_header(*stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->retry_or_fail(ec);
                              self->got_response_ = true;
                              self->h_.on_status(static_cast<int>(self->parser_->get().result_int()));
                              self->read_body();
                            });
  }

  void read_body() {
    if (parser_->is_done()) return finish();
    auto& body = parser_->get().body();
    body.data = chunk_.data();
    body.size = chunk_.size();
    http::async_read_some(*stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            const auto at = bench_clock::now();
                            if (ec == http::error::need_buffer) ec = {};
                            const size_t got = self->chunk_.size() - self->parser_->get().body().size;
                            if (got > 0) self->h_.on_body(std::string_view(self->chunk_.data(), got), at);
                            if (ec) return self->fail(ec);
                            self->read_body();
                          });
  }

  void finish() {
    if (parser_->keep_alive() && buffer_.size() == 0) {
      stream_->expires_never();
      client_.give_back(std::move(stream_));
    }
    h_.on_done("");
  }

  // A kept-alive connection the server closed while idle fails before any
  // response byte: try once more on a fresh connection.
  void retry_or_fail(beast::error_code ec) {
    if (reused_ && !got_response_ && ec != beast::error::timeout) {
      reused_ = false;
      buffer_.clear();
      return connect();
    }
    fail(ec);
  }

  void fail(beast::error_code ec) {
    if (stream_) {
      beast::error_code ignored;
      stream_->socket().close(ignored);
    }
    h_.on_done(ec == beast::error::timeout
                   ? "timed out after " + std::to_string(client_.timeout_.count()) + " s"
                   : "connection error: " + ec.message());
  }

  http_client& client_;
  std::shared_ptr<const std::string> request_;
  exchange_handlers h_;
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_ = false;
  bool got_response_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 16384> chunk_{};
};

http_client::http_client(asio::io_context& ioc, http_endpoint ep, std::chrono::seconds timeout)
    : ioc_(ioc), ep_(std::move(ep)), timeout_(timeout) {}

http_client::~http_client() = default;

status http_client::resolve() {
  tcp::resolver resolver(ioc_);
  beast::error_code ec;
  endpoints_ = resolver.resolve(ep_.host, ep_.port, ec);
  if (ec) return make_error("cannot resolve '" + ep_.host + ":" + ep_.port + "': " + ec.message());
  return {};
}

void http_client::send(std::shared_ptr<const std::string> request, exchange_handlers handlers) {
  std::make_shared<exchange>(*this, std::move(request), std::move(handlers))->start();
}

std::unique_ptr<beast::tcp_stream> http_client::take_idle() {
  if (idle_.empty()) return nullptr;
  auto s = std::move(idle_.back());
  idle_.pop_back();
  return s;
}

void http_client::give_back(std::unique_ptr<beast::tcp_stream> s) { idle_.push_back(std::move(s)); }

simple_response http_fetch(const http_endpoint& ep, const std::string& method,
                           const std::string& target, const header_list& headers,
                           const std::string& body, std::chrono::seconds timeout) {
  std::string collected;
  simple_response out = http_stream(ep, method, target, headers, body, timeout,
                                    [&](std::string_view bytes) { collected.append(bytes); });
  out.body = std::move(collected);
  return out;
}

simple_response http_stream(const http_endpoint& ep, const std::string& method,
                            const std::string& target, const header_list& headers,
                            const std::string& body, std::chrono::seconds timeout,
                            const std::function<void(std::string_view)>& on_body) {
  asio::io_context ioc;
  http_client client(ioc, ep, timeout);
  simple_response out;
  if (auto s = client.resolve(); !s) {
    out.error = s.error_message();
    return out;
  }
  bool done = false;
  client.send(std::make_shared<const std::string>(build_request(ep, method, target, headers, body)),
              {[&](int status) { out.status = status; },
               [&](std::string_view bytes, bench_clock::time_point) { on_body(bytes); },
               [&](const std::string& err) {
                 out.error = err;
                 done = true;
               }});
  ioc.run_for(timeout + std::chrono::seconds(1));
  if (!done && out.error.empty()) out.error = "timed out after " + std::to_string(timeout.count()) + " s";
  return out;
}

int64_t raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(lim.rlim_cur);
}

}  // namespace troupe::bench
