#include "actors/worker/actor_pipe.h"

#include "actors/messages.h"
#include "common/check.h"

namespace troupe {

void pipe_mailbox::put(int from, std::vector<float> data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (from < 0 || from >= static_cast<int>(queues_.size())) return;  // not of this pipe
    queues_[static_cast<size_t>(from)].push_back(std::move(data));
  }
  cv_.notify_all();
}

std::vector<float> pipe_mailbox::take(int from, int self, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& queue = queues_.at(static_cast<size_t>(from));
  if (!cv_.wait_for(lock, timeout, [&] { return aborted_ || !queue.empty(); })) {
    aborted_ = true;
    reason_ = "rank " + std::to_string(self) + " waited " + std::to_string(timeout.count()) +
              " ms for rank " + std::to_string(from) + " at recv";
  }
  if (aborted_) throw communicator_aborted("communicator aborted: " + reason_);
  std::vector<float> data = std::move(queue.front());
  queue.pop_front();
  return data;
}

void pipe_mailbox::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
  }
  cv_.notify_all();
}

pipe_inbox make_pipe_inbox(caf::actor_system& system, int size) {
  pipe_inbox box;
  box.mailbox = std::make_shared<pipe_mailbox>(size);
  box.actor = system.spawn([mailbox = box.mailbox]() -> caf::behavior {
    return {[mailbox](pipe_activations& msg) { mailbox->put(msg.from, std::move(msg.data)); }};
  });
  return box;
}

actor_pipe::actor_pipe(int rank, std::vector<caf::actor> inboxes,
                       std::shared_ptr<pipe_mailbox> mailbox, std::chrono::milliseconds timeout)
    : rank_(rank), inboxes_(std::move(inboxes)), mailbox_(std::move(mailbox)), timeout_(timeout) {
  TROUPE_CHECK(rank_ >= 0 && rank_ < size() && mailbox_ != nullptr);
}

void actor_pipe::all_reduce_sum(const tensor&) {
  TROUPE_CHECK_MSG(false, "actor_pipe: a pipeline group only sends and receives");
}

void actor_pipe::all_gather_cols(const tensor&, const tensor&) {
  TROUPE_CHECK_MSG(false, "actor_pipe: a pipeline group only sends and receives");
}

void actor_pipe::send(const tensor& x, int peer) {
  TROUPE_CHECK(x.type == dtype::f32 && peer >= 0 && peer < size() && peer != rank_);
  pipe_activations msg;
  msg.from = rank_;
  msg.data.assign(x.f32(), x.f32() + x.numel());
  caf::anon_send(inboxes_[static_cast<size_t>(peer)], std::move(msg));
}

void actor_pipe::recv(const tensor& x, int peer) {
  TROUPE_CHECK(x.type == dtype::f32 && peer >= 0 && peer < size() && peer != rank_);
  const std::vector<float> data = mailbox_->take(peer, rank_, timeout_);
  if (static_cast<int64_t>(data.size()) != x.numel()) {
    throw communicator_aborted("communicator aborted: rank " + std::to_string(rank_) +
                               " received " + std::to_string(data.size()) + " values from rank " +
                               std::to_string(peer) + ", expected " + std::to_string(x.numel()));
  }
  std::copy(data.begin(), data.end(), x.f32());
}

void actor_pipe::abort(const std::string& reason) { mailbox_->abort(reason); }

}  // namespace troupe
