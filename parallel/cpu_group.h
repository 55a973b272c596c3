// The CPU backend's communicator: `size` ranks in one process (a thread
// each), meeting in shared memory. Every collective is a rendezvous: each
// rank posts its buffer, waits for the others, computes its own result
// from all of them (the sums in rank order: bit for bit the same on every
// rank, and equal to a single process adding the same parts), and waits
// again before anyone may write a buffer another reads. Point-to-point
// sends copy into a mailbox per (from, to) pair, so a send never waits.
// float32 tensors only (the CPU backend's type).
//
// A call that waits longer than `timeout` for the others aborts the group
// ("rank R waited N ms for ranks ... at <op>"), so a rank that died or hung
// is reported within the timeout on every other rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace troupe {

class cpu_group {
 public:
  explicit cpu_group(int size, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  int size() const { return size_; }
  // Rank r's communicator (owned by the caller; the group must outlive it).
  std::unique_ptr<communicator> member(int rank);
  // The members of a new group that lives as long as any of them (ranks
  // owned by different threads or actors), in rank order.
  static std::vector<std::unique_ptr<communicator>> create(
      int size, std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  friend class cpu_member;
  // Waits until every rank has called barrier with the same generation
  // (after setting its post, when given), or throws communicator_aborted.
  void barrier(int rank, const char* op, const float* post = nullptr);
  // Waits for the oldest send from `from` to `to` and moves it out.
  std::vector<float> take(int from, int to, const char* op);
  void put(int from, int to, std::vector<float> data);
  void abort(const std::string& reason);
  // REQUIRES: mu_ held.
  void fail(const std::string& reason);
  [[noreturn]] void throw_aborted() const;
  // Waits on cv_ until done() or the timeout (then aborts the group, naming
  // what() it waited for), and throws if the group was aborted.
  template <class Done, class What>
  void wait(std::unique_lock<std::mutex>& lock, Done done, int rank, const char* op, What what);

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const float*> posts_;  // each rank's buffer at this barrier
  std::vector<bool> arrived_;        // at the current generation
  int waiting_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::string reason_;
  // mailboxes_[from * size + to]: sends not yet received, in order.
  std::vector<std::deque<std::vector<float>>> mailboxes_;
};

}  // namespace troupe
