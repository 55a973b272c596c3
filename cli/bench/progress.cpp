#include "cli/bench/progress.h"

#include <unistd.h>

#include <cstdio>

namespace troupe::bench {

progress_reporter::progress_reporter(std::string label, int64_t total, bool enabled,
                                     std::chrono::milliseconds line_interval)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      interval_(tty_ ? std::chrono::milliseconds(100) : line_interval),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void progress_reporter::update(int64_t done, int64_t failed) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < interval_) return;
  last_draw_ = now;
  draw(done, failed, false);
}

void progress_reporter::finish(int64_t done, int64_t failed) {
  if (!enabled_) return;
  draw(done, failed, true);
}

void progress_reporter::draw(int64_t done, int64_t failed, bool final) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  if (tty_) {
    constexpr int width = 30;
    const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld (%lld failed) %.1fs %.2f req/s%s", label_.c_str(),
                 bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
                 static_cast<long long>(failed), elapsed, rate, final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s: %lld/%lld done (%lld failed), %.1f s, %.2f req/s\n", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_),
                 static_cast<long long>(failed), elapsed, rate);
  }
  std::fflush(stderr);
}

}  // namespace troupe::bench
