// actor_pipe: a pipeline group whose ranks are in different processes (or
// hosts), for the CPU backend: a stage's activations travel as CAF
// messages (pipe_activations) to the next stage's inbox actor, through
// CAF's network layer when the inbox is remote (docs/parallelism.md). Only
// send and recv (a pipeline group needs no collective); float32 host
// tensors.
//
// Each rank spawns its inbox (make_pipe_inbox) before the group is
// formed, hands its handle to the others, then makes its actor_pipe with
// everyone's inboxes. A recv that waits longer than the timeout aborts
// the pipe ("rank 1 waited 30000 ms for rank 0 at recv"); abort() wakes a
// waiting recv at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "parallel/communicator.h"

namespace troupe {

// What an inbox received and not yet handed to recv, by sender.
class pipe_mailbox {
 public:
  explicit pipe_mailbox(int size) : queues_(static_cast<size_t>(size)) {}
  void put(int from, std::vector<float> data);
  // The oldest message from `from`; throws communicator_aborted after
  // `timeout` or an abort.
  std::vector<float> take(int from, int self, std::chrono::milliseconds timeout);
  void abort(const std::string& reason);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::vector<float>>> queues_;
  bool aborted_ = false;
  std::string reason_;
};

// The inbox actor of one rank of a pipeline of `size` ranks.
struct pipe_inbox {
  caf::actor actor;
  std::shared_ptr<pipe_mailbox> mailbox;
};
pipe_inbox make_pipe_inbox(caf::actor_system& system, int size);

class actor_pipe final : public communicator {
 public:
  // Rank `rank` of a pipeline whose ranks' inboxes are `inboxes` (this
  // rank's own at [rank]).
  actor_pipe(int rank, std::vector<caf::actor> inboxes, std::shared_ptr<pipe_mailbox> mailbox,
             std::chrono::milliseconds timeout = std::chrono::seconds(30));
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(inboxes_.size()); }
  void all_reduce_sum(const tensor& x) override;   // not for pipelines: TROUPE_CHECK
  void all_gather_cols(const tensor& x, const tensor& out) override;  // likewise
  void send(const tensor& x, int peer) override;
  void recv(const tensor& x, int peer) override;
  void abort(const std::string& reason) override;

 private:
  const int rank_;
  std::vector<caf::actor> inboxes_;
  std::shared_ptr<pipe_mailbox> mailbox_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace troupe
