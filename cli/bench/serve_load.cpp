#include "cli/bench/serve_load.h"

#include <boost/asio/steady_timer.hpp>
#include <deque>

#include "cli/bench/progress.h"
#include "cli/bench/stream_recorder.h"

namespace troupe::bench {

namespace {

double seconds(bench_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The run's state; lives on the stack of run_load, used from its one thread.
class load_run {
 public:
  load_run(boost::asio::io_context& ioc, http_client& client,
           const std::vector<load_request>& requests, const load_options& opts)
      : ioc_(ioc),
        client_(client),
        requests_(requests),
        opts_(opts),
        timer_(ioc),
        progress_(opts.label, static_cast<int64_t>(requests.size()), opts.progress),
        records_(requests.size()),
        arrived_at_(requests.size()) {}

  load_result run() {
    start_ = bench_clock::now();
    arm_timer();
    ioc_.run();
    progress_.finish(num_done_, num_failed_);
    return {std::move(records_), seconds(end_ - start_)};
  }

 private:
  void arm_timer() {
    if (next_ >= requests_.size()) return;
    timer_.expires_at(start_ + std::chrono::duration_cast<bench_clock::duration>(
                                   std::chrono::duration<double>(opts_.arrivals[next_])));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const auto now = bench_clock::now();
      while (next_ < requests_.size() && start_ + std::chrono::duration_cast<bench_clock::duration>(
                                                       std::chrono::duration<double>(opts_.arrivals[next_])) <= now) {
        arrived_at_[next_] = now;
        waiting_.push_back(next_++);
      }
      dispatch();
      arm_timer();
    });
  }

  void dispatch() {
    while (!waiting_.empty() &&
           (opts_.max_concurrency <= 0 || in_flight_ < static_cast<size_t>(opts_.max_concurrency))) {
      const size_t i = waiting_.front();
      waiting_.pop_front();
      launch(i);
    }
  }

  void launch(size_t i) {
    ++in_flight_;
    const auto sent = bench_clock::now();
    auto rec = std::make_shared<stream_recorder>(sent, requests_[i].prompt_len);
    client_.send(requests_[i].http_request,
                 {[rec](int status) { rec->on_status(status); },
                  [this, rec](std::string_view bytes, bench_clock::time_point at) {
                    rec->on_body(bytes, at, parser_);
                  },
                  [this, rec, i, sent](const std::string& err) {
                    request_record r = rec->finish(err, parser_);
                    r.start_time = seconds(sent - start_);
                    r.queue_time = seconds(sent - arrived_at_[i]);
                    complete(i, std::move(r));
                  }});
  }

  void complete(size_t i, request_record r) {
    --in_flight_;
    ++num_done_;
    if (!r.success) ++num_failed_;
    records_[i] = std::move(r);
    progress_.update(num_done_, num_failed_);
    if (num_done_ == static_cast<int64_t>(requests_.size())) {
      end_ = bench_clock::now();
      return;  // nothing else is pending: run() returns
    }
    dispatch();
  }

  boost::asio::io_context& ioc_;
  http_client& client_;
  const std::vector<load_request>& requests_;
  const load_options& opts_;
  boost::asio::steady_timer timer_;
  progress_reporter progress_;
  simdjson::dom::parser parser_;
  std::vector<request_record> records_;
  std::vector<bench_clock::time_point> arrived_at_;
  std::deque<size_t> waiting_;
  size_t next_ = 0;
  size_t in_flight_ = 0;
  int64_t num_done_ = 0, num_failed_ = 0;
  bench_clock::time_point start_, end_;
};

}  // namespace

result<load_result> run_load(const http_endpoint& ep, const std::vector<load_request>& requests,
                             const load_options& opts) {
  boost::asio::io_context ioc;
  http_client client(ioc, ep, opts.timeout);
  if (auto s = client.resolve(); !s) return std::move(s).take_error();
  load_run run(ioc, client, requests, opts);
  load_result out = run.run();
  return out;
}

}  // namespace troupe::bench
