// Progress of a benchmark on stderr: a bar redrawn in place (at most ten
// times a second) when stderr is a terminal, else one line every
// `line_interval` (default 10 s), so that logs stay readable. Not
// thread-safe: one thread calls update() and finish().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace troupe::bench {

class progress_reporter {
 public:
  progress_reporter(std::string label, int64_t total, bool enabled,
                    std::chrono::milliseconds line_interval = std::chrono::seconds(10));
  void update(int64_t done, int64_t failed);
  void finish(int64_t done, int64_t failed);

 private:
  void draw(int64_t done, int64_t failed, bool final);

  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace troupe::bench
