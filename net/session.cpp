#include "net/session.h"

#include "config/logging.h"

#include <chrono>

namespace troupe {

namespace {

// Posts each output to the session's strand; never touches the socket.
class session_sink : public request_sink {
 public:
  session_sink(std::weak_ptr<http_session> session, asio::any_io_executor strand,
               std::shared_ptr<asio::io_context> ioc, uint64_t seq, size_t choice)
      : session_(std::move(session)), strand_(std::move(strand)), ioc_(std::move(ioc)), seq_(seq),
        choice_(choice) {}
  void on_output(const request_output& out) override {
    asio::post(strand_, [w = session_, seq = seq_, choice = choice_, out]() {
      if (auto s = w.lock()) s->deliver(seq, choice, out);
    });
  }

 private:
  std::weak_ptr<http_session> session_;
  asio::any_io_executor strand_;
  std::shared_ptr<asio::io_context> ioc_;  // outlives strand_'s uses
  uint64_t seq_;
  size_t choice_;
};

std::string chunked(const std::string& data) {
  char size[20];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

constexpr const char* sse_header =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream; charset=utf-8\r\n"
    "Cache-Control: no-cache\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

}  // namespace

http_session::http_session(asio::ip::tcp::socket&& socket, server_shared& shared)
    : stream_(std::move(socket)), shared_(shared) {}

void http_session::start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

void http_session::shutdown() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    self->closing_ = true;
    if (!self->busy_) self->close();
  });
}

void http_session::abort_requests() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->shared_.eng.abort(self->ids_); });
}

void http_session::do_read() {
  if (closing_ || closed_) return close();
  parser_.emplace();
  parser_->body_limit(max_request_body_bytes);
  stream_.expires_after(shared_.read_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   beast::bind_front_handler(&http_session::on_read, shared_from_this()));
}

void http_session::on_read(beast::error_code ec, size_t) {
  if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
      ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
    return close();
  }
  busy_ = true;
  if (ec == http::error::body_limit) {
    linger_ = true;  // read the rest of the body so that the client sees the 413
    return send_reply(error_reply({413, "Request body too large: the limit is " +
                                            std::to_string(max_request_body_bytes) + " bytes", ""}),
                      false);
  }
  if (ec) return send_reply(error_reply(bad_request("malformed HTTP request: " + ec.message())), false);
  handle_request();
}

namespace {

// The first transfer coding of a Transfer-Encoding value other than chunked
// ("" when there is none): the body would be that coding's bytes, which this
// server cannot decode (RFC 9112: 501).
std::string unsupported_transfer_coding(std::string_view value) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view coding = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) coding.remove_prefix(1);
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) coding.remove_suffix(1);
    coding = coding.substr(0, coding.find(';'));  // parameters
    if (!beast::iequals(beast::string_view(coding.data(), coding.size()), "chunked")) {
      return std::string(coding);
    }
  }
  return "";
}

}  // namespace

void http_session::handle_request() {
  const auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  const auto header = [&req](http::field f) {
    const auto it = req.find(f);
    return it == req.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
  };
  const std::string coding = unsupported_transfer_coding(header(http::field::transfer_encoding));
  if (!coding.empty()) {
    keep_alive_ = false;  // the body was not read as the client meant it
    return send_reply(error_reply({501, "Transfer-Encoding: '" + coding +
                                            "' is not supported (only chunked)", ""}),
                      false);
  }
  const http_request_view view{
      std::string_view(req.method_string().data(), req.method_string().size()),
      std::string_view(req.target().data(), req.target().size()), header(http::field::authorization),
      header(http::field::content_type), req.body()};
  if (view.method == "POST") {
    // The view's strings live in parser_, untouched until the reply is out.
    shared_.num_preparing.fetch_add(1);
    asio::post(shared_.prep, [self = shared_from_this(), view] {
      route_result result = self->shared_.routes.handle(view);
      asio::post(self->stream_.get_executor(), [self, result = std::move(result)]() mutable {
        self->finish_request(std::move(result));
        self->shared_.num_preparing.fetch_sub(1);  // (a generation it started counts in num_active)
      });
    });
    return;
  }
  finish_request(shared_.routes.handle(view));
}

void http_session::finish_request(route_result result) {
  if (auto* reply = std::get_if<http_reply>(&result)) return send_reply(std::move(*reply), keep_alive_);
  if (auto* later = std::get_if<deferred_reply>(&result)) {
    // The reply comes from another thread: back on the strand to send it.
    auto self = shared_from_this();
    later->start([self](http_reply reply) {
      asio::post(self->stream_.get_executor(), [self, reply = std::move(reply)]() mutable {
        self->send_reply(std::move(reply), self->keep_alive_);
      });
    });
    return;
  }
  start_generation(std::move(std::get<prepared_generation>(result)));
}

void http_session::start_generation(prepared_generation g) {
  ++gen_seq_;
  const bool stream = g.ctx.stream;
  gen_ = std::make_unique<generation>(std::move(g.ctx));
  gen_start_ = std::chrono::steady_clock::now();
  get_logger("net")->debug("req={} received: {} choice(s)", gen_->id(), g.choices.size());
  std::vector<engine::submission> batch;
  for (size_t i = 0; i < g.choices.size(); ++i) {
    auto sink = std::make_shared<session_sink>(weak_from_this(), stream_.get_executor(), shared_.ioc,
                                               gen_seq_, i);
    // Every choice is one API request for fair sharing (the group of choice 0).
    batch.push_back({std::move(g.choices[i].prompt_ids), g.choices[i].params, std::move(sink),
                     g.choices[i].fork_of_index, i == 0 ? -1 : 0});
  }
  shared_.num_active.fetch_add(1);
  counted_ = true;
  stream_finished_ = false;
  stream_.expires_never();  // generations may run long; the watch read notices a gone client
  if (stream) {
    const std::string first = gen_->stream_start();
    queue_bytes(std::string(sse_header) + (first.empty() ? "" : chunked(first)));
  }
  ids_ = shared_.eng.submit_batch(std::move(batch));
  do_watch();
}

void http_session::deliver(uint64_t seq, size_t choice, const request_output& out) {
  if (seq != gen_seq_ || gen_ == nullptr || closed_) return;
  const std::string bytes = gen_->on_output(choice, out);
  if (!bytes.empty()) queue_bytes(chunked(bytes) + (gen_->done() ? "0\r\n\r\n" : ""));
  if (!gen_->done()) return;
  if (!pending_.empty() || write_in_flight_) {
    stream_finished_ = true;  // on_write ends the generation once all is out
    return;
  }
  // Not streamed: the whole response now.
  http_reply reply;
  if (!gen_->first_error().empty()) reply = error_reply(gen_->first_error_reply());
  else reply.body = gen_->response_body();
  end_generation();
  send_reply(std::move(reply), keep_alive_);
}

void http_session::do_watch() {
  if (watch_pending_ || closed_ || buffer_.size() > 2 * max_request_body_bytes) return;
  watch_pending_ = true;
  stream_.socket().async_read_some(
      asio::buffer(watch_buf_),
      beast::bind_front_handler(&http_session::on_watch, shared_from_this()));
}

void http_session::on_watch(beast::error_code ec, size_t bytes) {
  watch_pending_ = false;
  if (bytes > 0) {  // a pipelined request: keep it for the next read
    buffer_.commit(asio::buffer_copy(buffer_.prepare(bytes), asio::buffer(watch_buf_.data(), bytes)));
  }
  if (read_after_watch_) {  // cancelled on purpose: the response is out
    read_after_watch_ = false;
    if (ec && ec != asio::error::operation_aborted) return close();
    return do_read();
  }
  if (ec) {
    if (gen_ != nullptr) get_logger("net")->info("req={} client went away; aborting {} request(s)", gen_->id(), ids_.size());
    return close();
  }
  if (gen_ != nullptr) do_watch();
}

void http_session::send_reply(http_reply r, bool keep_alive) {
  if (closed_) return;
  reply_ = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
  reply_->set(http::field::server, "troupe");
  if (!r.body.empty() || r.status != 200) reply_->set(http::field::content_type, r.content_type);
  if (r.status == 503) reply_->set(http::field::retry_after, "1");
  for (const auto& [name, value] : r.headers) reply_->set(name, value);
  reply_->body() = std::move(r.body);
  reply_->keep_alive(keep_alive && !closing_);
  reply_->prepare_payload();
  stream_.expires_after(shared_.write_timeout);
  http::async_write(stream_, *reply_,
                    beast::bind_front_handler(&http_session::on_reply_written, shared_from_this(),
                                              reply_->keep_alive()));
}

void http_session::on_reply_written(bool keep_alive, beast::error_code ec, size_t) {
  reply_.reset();
  if (ec) return close();
  after_response(keep_alive);
}

void http_session::queue_bytes(std::string bytes) {
  pending_ += bytes;
  do_write();
}

void http_session::do_write() {
  if (write_in_flight_ || pending_.empty() || closed_) return;
  writing_.swap(pending_);
  pending_.clear();
  write_in_flight_ = true;
  // The watch read goes to the socket directly, so this timer only bounds
  // the write: a client that stops reading is cut off when it fires.
  stream_.expires_after(shared_.write_timeout);
  asio::async_write(stream_, asio::buffer(writing_),
                    beast::bind_front_handler(&http_session::on_write, shared_from_this()));
}

void http_session::on_write(beast::error_code ec, size_t) {
  write_in_flight_ = false;
  writing_.clear();
  // An expiry left armed while no write is pending would fail the next one at once.
  if (!ec) stream_.expires_never();
  if (ec) {
    if (gen_ != nullptr) get_logger("net")->info("req={} write failed ({}); aborting {} request(s)", gen_->id(), ec.message(), ids_.size());
    return close();
  }
  if (!pending_.empty()) return do_write();
  if (stream_finished_) {
    stream_finished_ = false;
    end_generation();
    after_response(keep_alive_);
  }
}

void http_session::end_generation() {
  if (gen_ != nullptr) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - gen_start_).count();
    get_logger("net")->info("{} {:.0f} ms", gen_->summary(), ms);
  }
  gen_.reset();
  ids_.clear();
  if (counted_) shared_.num_active.fetch_sub(1);
  counted_ = false;
}

void http_session::after_response(bool keep_alive) {
  busy_ = false;
  if (!keep_alive || closing_) return close();
  if (watch_pending_) {  // cancel it; on_watch then starts the next read
    read_after_watch_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  do_read();
}

void http_session::close() {
  if (closed_) return;
  closed_ = true;
  shared_.eng.abort(ids_);
  end_generation();
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (linger_) return do_linger();
  stream_.socket().close(ec);
}

// After a 413 the client may still be sending its body; closing at once
// would reset the connection and lose the response. Discard what arrives
// for a little while (bounded in bytes and time), then close.
void http_session::do_linger() {
  if (linger_bytes_ > linger_max_bytes) {
    beast::error_code ec;
    stream_.socket().close(ec);
    return;
  }
  stream_.expires_after(std::chrono::seconds(2));
  stream_.async_read_some(asio::buffer(watch_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->linger_bytes_ += n;
    if (ec) {
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
      return;
    }
    self->do_linger();
  });
}

}  // namespace troupe
