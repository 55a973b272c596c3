// The communicator on CUDA (docs/parallelism.md): one rank per GPU over
// NCCL. Collectives are enqueued on the worker's compute stream, in order
// with its kernels, and return at once; they may be captured into its CUDA
// graphs. The group's id comes from one rank (nccl_unique_id()) and reaches
// the others through the caller (CAF messages between the workers).
// NCCL_NVLS_ENABLE is set to 0 unless the environment sets it (NVLink
// SHARP multicast stays off: docs/parallelism.md). Tensors of float32,
// bf16 or f16.
//
// A NCCL error, or abort(), ends the group: ncclCommAbort, and every later
// call throws communicator_aborted with the reason.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"
#include "parallel/communicator.h"

namespace troupe {

// A new group id (NCCL's ncclUniqueId bytes), made by one rank.
result<std::string> nccl_unique_id();

class nccl_communicator final : public communicator {
 public:
  // Joins group `id` as `rank` of `size` on the current CUDA device (every
  // rank calls it; it returns when all have joined, or fails after
  // `timeout`: a member that never came). The communicator is NCCL's
  // non-blocking kind: a call NCCL is still setting up (ncclInProgress) is
  // waited for, up to `timeout` too, before the next.
  static result<std::unique_ptr<nccl_communicator>> create(
      const std::string& id, int rank, int size, cudaStream_t stream,
      std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~nccl_communicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(const tensor& x) override;
  // Through a device buffer of size() x x's bytes (NCCL gathers whole
  // buffers), then one strided copy a rank. REQUIRES: reserve_gather()
  // covered x before a graph capture (no allocation while capturing).
  void all_gather_cols(const tensor& x, const tensor& out) override;
  void send(const tensor& x, int peer) override;
  void recv(const tensor& x, int peer) override;
  void abort(const std::string& reason) override;
  // Sizes the gather buffer for tensors of up to `bytes` a rank.
  void reserve_gather(size_t bytes);

 private:
  nccl_communicator(ncclComm_t comm, int rank, int size, cudaStream_t stream,
                    std::chrono::milliseconds timeout)
      : comm_(comm), rank_(rank), size_(size), stream_(stream), timeout_(timeout) {}
  // Polls the communicator until NCCL has finished setting up the last
  // call; "" when it did, else why (the group is then aborted).
  std::string wait_done(const std::string& op);  // REQUIRES: mu_ held
  void check(ncclResult_t r, const char* op);  // REQUIRES: mu_ held
  void check_open() const;  // REQUIRES: mu_ held
  void abort_locked(const std::string& reason);

  ncclComm_t comm_;
  const int rank_, size_;
  cudaStream_t stream_;
  const std::chrono::milliseconds timeout_;
  void* gather_ = nullptr;
  size_t gather_bytes_ = 0;
  // abort() may come from another thread (the worker group's, for a lost
  // peer) while this rank's thread issues calls: every call into NCCL and
  // the abort hold mu_, so ncclCommAbort never frees the communicator
  // under a call (the calls only enqueue work; one NCCL is still setting
  // up is polled under mu_, and abort_requested_ ends that wait at once).
  std::mutex mu_;
  std::atomic<bool> abort_requested_{false};
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace troupe
