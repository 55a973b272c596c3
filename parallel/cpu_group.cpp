#include "parallel/cpu_group.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace troupe {

class cpu_member final : public communicator {
 public:
  cpu_member(cpu_group& g, int rank, std::shared_ptr<cpu_group> owner)
      : g_(g), owner_(std::move(owner)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size_; }

  void all_reduce_sum(const tensor& x) override {
    TROUPE_CHECK(x.type == dtype::f32);
    const int64_t n = x.numel();
    g_.barrier(rank_, "all_reduce_sum", x.f32());
    // Every rank adds the parts in rank order: the same bits everywhere.
    scratch_.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < g_.size_; ++r) {
      const float* part = g_.posts_[static_cast<size_t>(r)];
      for (int64_t i = 0; i < n; ++i) scratch_[static_cast<size_t>(i)] += part[i];
    }
    g_.barrier(rank_, "all_reduce_sum");  // nobody reads a buffer any more
    std::copy(scratch_.begin(), scratch_.end(), x.f32());
  }

  void all_gather_cols(const tensor& x, const tensor& out) override {
    TROUPE_CHECK(x.type == dtype::f32 && out.type == dtype::f32);
    TROUPE_CHECK(out.rows >= x.rows && out.cols == g_.size_ * x.cols);
    g_.barrier(rank_, "all_gather_cols", x.f32());
    for (int r = 0; r < g_.size_; ++r) {
      const float* part = g_.posts_[static_cast<size_t>(r)];
      for (int64_t i = 0; i < x.rows; ++i) {
        std::memcpy(out.f32() + i * out.cols + r * x.cols, part + i * x.cols,
                    static_cast<size_t>(x.cols) * sizeof(float));
      }
    }
    g_.barrier(rank_, "all_gather_cols");  // every x read: they may change
  }

  void send(const tensor& x, int peer) override {
    TROUPE_CHECK(x.type == dtype::f32 && peer >= 0 && peer < g_.size_ && peer != rank_);
    g_.put(rank_, peer, std::vector<float>(x.f32(), x.f32() + x.numel()));
  }

  void recv(const tensor& x, int peer) override {
    TROUPE_CHECK(x.type == dtype::f32 && peer >= 0 && peer < g_.size_ && peer != rank_);
    const std::vector<float> data = g_.take(peer, rank_, "recv");
    TROUPE_CHECK_MSG(static_cast<int64_t>(data.size()) == x.numel(),
                     ("recv: the send from rank " + std::to_string(peer) + " has " +
                      std::to_string(data.size()) + " elements, the receiver expects " +
                      std::to_string(x.numel()))
                         .c_str());
    std::copy(data.begin(), data.end(), x.f32());
  }

  void abort(const std::string& reason) override { g_.abort(reason); }

 private:
  cpu_group& g_;
  std::shared_ptr<cpu_group> owner_;  // set for groups made by cpu_group::create
  const int rank_;
  std::vector<float> scratch_;
};

cpu_group::cpu_group(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      posts_(static_cast<size_t>(size), nullptr),
      arrived_(static_cast<size_t>(size), false),
      mailboxes_(static_cast<size_t>(size) * static_cast<size_t>(size)) {
  TROUPE_CHECK(size >= 1);
}

std::unique_ptr<communicator> cpu_group::member(int rank) {
  TROUPE_CHECK(rank >= 0 && rank < size_);
  return std::make_unique<cpu_member>(*this, rank, nullptr);
}

std::vector<std::unique_ptr<communicator>> cpu_group::create(int size,
                                                             std::chrono::milliseconds timeout) {
  auto group = std::make_shared<cpu_group>(size, timeout);
  std::vector<std::unique_ptr<communicator>> members;
  for (int r = 0; r < size; ++r) members.push_back(std::make_unique<cpu_member>(*group, r, group));
  return members;
}

template <class Done, class What>
void cpu_group::wait(std::unique_lock<std::mutex>& lock, Done done, int rank, const char* op, What what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (!aborted_ && !done()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !done()) {
      fail("rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
           " ms at " + op + " for " + what());
    }
  }
  if (aborted_) throw_aborted();
}

void cpu_group::barrier(int rank, const char* op, const float* post) {
  std::unique_lock lock(mu_);
  if (aborted_) throw_aborted();
  if (post != nullptr) posts_[static_cast<size_t>(rank)] = post;
  arrived_[static_cast<size_t>(rank)] = true;
  if (++waiting_ == size_) {
    waiting_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  const int64_t generation = generation_;
  auto missing = [&] {
    std::string ranks;
    for (int r = 0; r < size_; ++r) {
      if (!arrived_[static_cast<size_t>(r)]) ranks += (ranks.empty() ? "rank " : ", ") + std::to_string(r);
    }
    return ranks;
  };
  wait(lock, [&] { return generation_ != generation; }, rank, op, missing);
}

void cpu_group::put(int from, int to, std::vector<float> data) {
  std::lock_guard lock(mu_);
  if (aborted_) throw_aborted();
  mailboxes_[static_cast<size_t>(from * size_ + to)].push_back(std::move(data));
  cv_.notify_all();
}

std::vector<float> cpu_group::take(int from, int to, const char* op) {
  std::unique_lock lock(mu_);
  auto& box = mailboxes_[static_cast<size_t>(from * size_ + to)];
  wait(lock, [&] { return !box.empty(); }, to, op, [from] { return "a send from rank " + std::to_string(from); });
  std::vector<float> data = std::move(box.front());
  box.pop_front();
  return data;
}

void cpu_group::abort(const std::string& reason) {
  std::lock_guard lock(mu_);
  fail(reason);
}

void cpu_group::fail(const std::string& reason) {
  if (aborted_) return;  // the first reason stays
  aborted_ = true;
  reason_ = reason;
  cv_.notify_all();
}

void cpu_group::throw_aborted() const {
  throw communicator_aborted("communicator aborted: " + reason_);
}

}  // namespace troupe
