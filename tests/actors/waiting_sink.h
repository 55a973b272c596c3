// waiting_sink: a request_sink for engine tests. Records tokens, the finish
// reason and error; wait() blocks until the final output (up to a minute);
// on_tokens(n, hook) runs hook (outside the lock) once n tokens have arrived.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "actors/request/request_sink.h"

namespace troupe::testing {

class waiting_sink : public request_sink {
 public:
  void on_output(const request_output& o) override {
    std::function<void()> hook;
    std::unique_lock<std::mutex> lock(mu_);
    tokens_.insert(tokens_.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (o.finish != finish_reason::none) {
      finish_ = o.finish;
      error_ = o.error;
      cv_.notify_all();
    } else if (hook_ && static_cast<int>(tokens_.size()) >= hook_after_) {
      hook = std::move(hook_);
      hook_ = nullptr;
    }
    lock.unlock();
    if (hook) hook();
  }
  void on_tokens(int n, std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_after_ = n;
    hook_ = std::move(hook);
  }
  // The tokens once finished; false from finished() means it timed out.
  std::vector<int32_t> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return finish_ != finish_reason::none; });
    return tokens_;
  }
  bool finished() {
    wait();
    std::lock_guard<std::mutex> lock(mu_);
    return finish_ != finish_reason::none;
  }
  std::vector<int32_t> tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  finish_reason finish() {
    std::lock_guard<std::mutex> lock(mu_);
    return finish_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  finish_reason finish_ = finish_reason::none;
  std::string error_;
  int hook_after_ = 0;
  std::function<void()> hook_;
};

}  // namespace troupe::testing
