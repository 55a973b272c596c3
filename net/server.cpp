#include "net/server.h"

#include "config/logging.h"

#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "net/routes.h"
#include "net/session.h"

namespace troupe {

int default_io_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 4u));
}

struct http_server::impl {
  impl(engine& eng, const engine_config& config)
      : routes(eng, config),
        num_io_threads(config.num_io_threads > 0 ? static_cast<int>(config.num_io_threads)
                                                 : default_io_threads()),
        prep(static_cast<size_t>(num_io_threads)),
        shared{eng, routes, prep, ioc_owner, seconds(config.http_read_timeout),
               seconds(config.http_write_timeout)},
        acceptor(asio::make_strand(ioc)),
        drain_timeout(seconds(config.drain_timeout)),
        send_buffer_bytes(static_cast<int>(config.http_send_buffer_kib * 1024)) {}

  static std::chrono::steady_clock::duration seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
  }

  // Accepts run on the acceptor's strand, where shutdown closes it too, so
  // a closed acceptor is never used (no "Bad file descriptor" at shutdown).
  void do_accept() {
    if (!acceptor.is_open()) return;
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, asio::ip::tcp::socket s) {
      if (!acceptor.is_open()) return;  // closed for shutdown: nothing to report
      if (ec) {
        if (ec != asio::error::operation_aborted) get_logger("net")->warn("accept failed: {}", ec.message());
      } else {
        if (send_buffer_bytes > 0) {
          beast::error_code ignored;
          s.set_option(asio::socket_base::send_buffer_size(send_buffer_bytes), ignored);
        }
        auto session = std::make_shared<http_session>(std::move(s), shared);
        {
          std::lock_guard<std::mutex> lock(mu);
          std::erase_if(sessions, [](const std::weak_ptr<http_session>& w) { return w.expired(); });
          sessions.push_back(session);
        }
        session->start();
      }
      do_accept();
    });
  }

  template <class F>
  void for_each_session(F f) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& w : sessions) {
      if (auto s = w.lock()) f(*s);
    }
  }

  // Waits until no generation is in flight and no request is being
  // prepared, or the deadline passes.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) {
    auto busy = [this] { return shared.num_active.load() + shared.num_preparing.load() > 0; };
    while (busy() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return !busy();
  }

  // Sinks share the io_context: an engine request that outlives the server
  // (aborted during shutdown) may still post to it, harmlessly.
  std::shared_ptr<asio::io_context> ioc_owner = std::make_shared<asio::io_context>();
  asio::io_context& ioc = *ioc_owner;
  api_routes routes;
  int num_io_threads;
  // Request preparation (server_shared::prep): as many threads as I/O
  // threads; joined in run() before the I/O threads stop.
  asio::thread_pool prep;
  server_shared shared;
  asio::ip::tcp::acceptor acceptor;
  std::mutex mu;
  std::vector<std::weak_ptr<http_session>> sessions;
  std::condition_variable stop_cv;
  bool stop_requested = false;
  std::chrono::steady_clock::duration drain_timeout;
  int send_buffer_bytes;  // 0: the kernel's autotuning
};

http_server::http_server(engine& eng, const engine_config& config)
    : impl_(std::make_unique<impl>(eng, config)) {}

http_server::~http_server() = default;

status http_server::listen(const std::string& host, int64_t port) {
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return make_error("host: '" + host + "' is not an IP address");
  const asio::ip::tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  auto& a = impl_->acceptor;
  const std::string where = host + ":" + std::to_string(port);
  if (a.open(endpoint.protocol(), ec); ec) return make_error("cannot open a socket for " + where + ": " + ec.message());
  if (a.set_option(asio::socket_base::reuse_address(true), ec); ec) return make_error(where + ": " + ec.message());
  if (a.bind(endpoint, ec); ec) return make_error("cannot listen on " + where + ": " + ec.message());
  if (a.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return make_error("cannot listen on " + where + ": " + ec.message());
  }
  return {};
}

int http_server::run() {
  impl& s = *impl_;
  auto guard = asio::make_work_guard(s.ioc);
  asio::signal_set signals(s.ioc, SIGINT, SIGTERM);
  signals.async_wait([&s](beast::error_code ec, int signo) {
    if (ec) return;
    get_logger("net")->info("signal {} received: shutting down", signo);
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop_requested = true;
    s.stop_cv.notify_all();
  });
  s.do_accept();
  std::vector<std::thread> threads;
  for (int i = 0; i < s.num_io_threads; ++i) threads.emplace_back([&s] { s.ioc.run(); });
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.stop_cv.wait(lock, [&s] { return s.stop_requested; });
  }
  // Stop accepting; idle connections close, busy ones after their response.
  asio::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
  });
  s.for_each_session([](http_session& session) { session.shutdown(); });
  const auto start = std::chrono::steady_clock::now();
  if (!s.wait_idle(start + s.drain_timeout)) {
    get_logger("net")->warn("{} request(s) still running after {:.1f} s: aborting them",
                            s.shared.num_active.load(),
                            std::chrono::duration<double>(s.drain_timeout).count());
    s.for_each_session([](http_session& session) { session.abort_requests(); });
    s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }
  s.for_each_session([](http_session& session) { session.shutdown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Requests still being prepared finish here (their replies post to the
  // I/O threads, which still run).
  s.prep.join();
  guard.reset();
  s.ioc.stop();
  for (std::thread& t : threads) t.join();
  get_logger("net")->info("server stopped");
  return 0;
}

}  // namespace troupe
