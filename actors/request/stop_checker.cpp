#include "actors/request/stop_checker.h"

#include <algorithm>

namespace troupe {

stop_checker::stop_checker(std::vector<std::string> stops, bool include_stop_str_in_output)
    : include_stop_(include_stop_str_in_output) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

size_t stop_checker::held_back_length() const {
  // The longest suffix of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

std::string stop_checker::feed(const std::string& delta) {
  if (stopped_) return "";
  pending_ += delta;
  // The earliest stop string wins (ties: the longer one).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = pending_.find(stop);
    if (pos != std::string::npos &&
        (pos < best || (pos == best && stop.size() > best_stop->size()))) {
      best = pos;
      best_stop = &stop;
    }
  }
  if (best_stop != nullptr) {
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = pending_.substr(0, include_stop_ ? best + best_stop->size() : best);
    pending_.clear();
    return out;
  }
  // Held-back bytes never split a UTF-8 character: stop strings are valid
  // UTF-8, so a suffix equal to one's prefix starts on a boundary.
  const size_t release = pending_.size() - held_back_length();
  std::string out = pending_.substr(0, release);
  pending_.erase(0, release);
  return out;
}

std::string stop_checker::flush() {
  if (stopped_) return "";
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace troupe
