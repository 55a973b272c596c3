// worker_health: whether every rank of the engine's workers is still there
// (docs/parallelism.md, failure handling). Set once, by whoever notices a
// lost rank first: the worker group (a rank's actor went down: a thread's
// exception, a worker process that died or stopped answering), or the
// scheduler (its worker answered a step with an error). Read by the
// server (/health, admission: 503) and the scheduler (new requests fail).
// Thread-safe.
#pragma once

#include <caf/error.hpp>
#include <caf/message.hpp>

#include <mutex>
#include <string>

namespace troupe {

// An error's own text: the string it carries (make_error(code, "text")),
// else CAF's rendering.
inline std::string caf_error_text(const caf::error& err) {
  const caf::message& context = err.context();
  if (context.size() == 1 && context.match_element<std::string>(0)) {
    return context.get_as<std::string>(0);
  }
  return caf::to_string(err);
}

class worker_health {
 public:
  bool ok() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_.empty();
  }
  // Why the workers are gone ("" while ok).
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }
  // Marks the workers lost; the first reason stays. Returns whether this
  // call marked them.
  bool mark_lost(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reason_.empty()) return false;
    reason_ = reason.empty() ? "a worker was lost" : reason;
    return true;
  }

 private:
  mutable std::mutex mu_;
  std::string reason_;
};

}  // namespace troupe
