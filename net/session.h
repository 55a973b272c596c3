// http_session: one client connection. Owns the socket (a beast::tcp_stream
// on its own strand); every member runs on that strand. Reads one request at
// a time (keep-alive, 1 MiB body limit -> 413, header/read timeout), answers
// plain routes at once, and for generations submits one engine request per
// choice with a sink that posts outputs back to this strand (actors never
// touch the socket; the sink holds only a weak_ptr). One write in flight:
// SSE bytes queue in pending_ and go out together when the previous write
// completes, so a slow client gets coalesced deltas. While a generation
// runs, a read is kept pending to notice a client that goes away; a read or
// write error aborts the session's engine requests.
#pragma once

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "net/generation.h"
#include "net/routes.h"

namespace troupe {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace asio = boost::asio;

inline constexpr uint64_t max_request_body_bytes = 1 << 20;  // larger bodies get 413

struct server_shared {
  engine& eng;
  const api_routes& routes;
  // Where POST requests are prepared (api_routes::handle: chat templates,
  // tokenization, structured-output grammars, which may take a while): off
  // the I/O threads, so that one slow request holds none of them.
  asio::thread_pool& prep;
  std::shared_ptr<asio::io_context> ioc;  // kept alive by the sinks
  std::chrono::steady_clock::duration read_timeout;   // one request, or an idle keep-alive
  std::chrono::steady_clock::duration write_timeout;  // one write of a response
  std::atomic<int64_t> num_active{0};     // generations in flight, all sessions
  std::atomic<int64_t> num_preparing{0};  // requests on `prep` (the drain waits for them too)
};

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(asio::ip::tcp::socket&& socket, server_shared& shared);
  void start();
  // Thread-safe. Stop taking requests: close now when idle, else after the
  // current response.
  void shutdown();
  // Thread-safe. Abort this session's engine requests (their streams end
  // with finish_reason "abort").
  void abort_requests();
  // On the strand (posted by the sinks).
  void deliver(uint64_t generation_seq, size_t choice, const request_output& out);

 private:
  void do_read();
  void on_read(beast::error_code ec, size_t bytes);
  void handle_request();
  // On the strand: what api_routes::handle made of the request.
  void finish_request(route_result result);
  void start_generation(prepared_generation g);
  void do_watch();
  void on_watch(beast::error_code ec, size_t bytes);
  void send_reply(http_reply reply, bool keep_alive);
  void on_reply_written(bool keep_alive, beast::error_code ec, size_t bytes);
  void queue_bytes(std::string bytes);
  void do_write();
  void on_write(beast::error_code ec, size_t bytes);
  void end_generation();
  void after_response(bool keep_alive);
  void close();
  void do_linger();

  beast::tcp_stream stream_;
  server_shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::string_body>> reply_;
  bool busy_ = false;      // a request is being answered
  bool closing_ = false;   // shutdown asked: no further requests
  bool closed_ = false;
  bool keep_alive_ = true;
  bool linger_ = false;  // after a 413: drain the unread body before closing
  uint64_t linger_bytes_ = 0;
  static constexpr uint64_t linger_max_bytes = 64ull << 20;
  // Generation in flight.
  std::unique_ptr<generation> gen_;
  std::chrono::steady_clock::time_point gen_start_;
  uint64_t gen_seq_ = 0;
  std::vector<request_id> ids_;
  bool counted_ = false;   // counted in shared_.num_active
  // Writes of a streamed response (one in flight).
  std::string pending_;
  std::string writing_;
  bool write_in_flight_ = false;
  bool stream_finished_ = false;  // [DONE] queued
  // The watch read kept pending during a generation.
  bool watch_pending_ = false;
  bool read_after_watch_ = false;
  std::array<char, 4096> watch_buf_{};
};

}  // namespace troupe
