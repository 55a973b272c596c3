#include "parallel/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/check.h"

namespace troupe {

namespace {

ncclDataType_t nccl_type(dtype t) {
  switch (t) {
    case dtype::f32: return ncclFloat32;
    case dtype::bf16: return ncclBfloat16;
    case dtype::f16: return ncclFloat16;
    case dtype::fp8_e4m3: break;
  }
  TROUPE_CHECK_MSG(false, "an FP8 tensor reached a collective");
  return ncclFloat32;
}

size_t bytes_of(const tensor& x) { return static_cast<size_t>(x.numel()) * dtype_size(x.type); }

}  // namespace

result<std::string> nccl_unique_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return make_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  }
  return std::string(id.internal, sizeof id.internal);
}

result<std::unique_ptr<nccl_communicator>> nccl_communicator::create(
    const std::string& id, int rank, int size, cudaStream_t stream, std::chrono::milliseconds timeout) {
  ncclUniqueId uid;
  if (id.size() != sizeof uid.internal) {
    return make_error("NCCL group id: " + std::to_string(id.size()) + " bytes, expected " +
                      std::to_string(sizeof uid.internal));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return make_error("NCCL group: rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::memcpy(uid.internal, id.data(), sizeof uid.internal);
  const std::string who = "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  // Non-blocking, so that a member that never joins (its process died while
  // loading) is a timeout here, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return make_error(who + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(nullptr));
  }
  auto made = std::unique_ptr<nccl_communicator>(new nccl_communicator(comm, rank, size, stream, timeout));
  std::lock_guard<std::mutex> lock(made->mu_);
  if (const std::string failed = made->wait_done(who); !failed.empty()) {
    return make_error(failed + (failed.find("within") != std::string::npos
                                    ? " (did every rank start? each needs a GPU of its own)"
                                    : ""));
  }
  return made;
}

std::string nccl_communicator::wait_done(const std::string& op) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    if (abort_requested_.load()) {  // abort() waits for mu_: give the group up now
      const std::string why = op + ": the group was aborted while waiting";
      abort_locked(why);
      return why;
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return "";
    std::string why;
    if (state != ncclInProgress) {
      why = op + ": " + ncclGetErrorString(state) + ": " + ncclGetLastError(comm_);
    } else if (std::chrono::steady_clock::now() >= deadline) {
      why = op + ": the other ranks did not answer within " +
            std::to_string(timeout_.count() / 1000) + " s";
    }
    if (!why.empty()) {
      abort_locked(why);
      return why;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

nccl_communicator::~nccl_communicator() {
  if (gather_ != nullptr) cudaFree(gather_);
  if (aborted_) return;  // ncclCommAbort freed it
  // A non-blocking communicator finalizes in the background: wait for it
  // (bounded; then the destroy frees what is local regardless).
  ncclResult_t state = ncclCommFinalize(comm_);
  if (state == ncclInProgress) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // Not finalized (a peer gone, or too slow): abort frees it without them.
  if (state == ncclSuccess) ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
}

void nccl_communicator::check_open() const {
  if (aborted_) throw communicator_aborted("communicator aborted: " + reason_);
}

void nccl_communicator::check(ncclResult_t r, const char* op) {
  if (r == ncclSuccess) return;
  if (r == ncclInProgress) {
    // A non-blocking communicator still setting the call up (connecting
    // to a peer on first use): done before the next call.
    wait_done(std::string(op) + " on rank " + std::to_string(rank_));
  } else {
    abort_locked(std::string(op) + " on rank " + std::to_string(rank_) + ": " + ncclGetErrorString(r) +
                 ": " + ncclGetLastError(comm_));
  }
  check_open();
}

void nccl_communicator::all_reduce_sum(const tensor& x) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  check(ncclAllReduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_type(x.type), ncclSum, comm_,
                      stream_),
        "all_reduce_sum");
}

void nccl_communicator::reserve_gather(size_t bytes) {
  const size_t need = bytes * static_cast<size_t>(size_);
  if (need <= gather_bytes_) return;
  if (gather_ != nullptr) {
    TROUPE_CHECK(cudaStreamSynchronize(stream_) == cudaSuccess);
    cudaFree(gather_);
  }
  TROUPE_CHECK_MSG(cudaMalloc(&gather_, need) == cudaSuccess, "nccl_communicator: cudaMalloc of the gather buffer");
  gather_bytes_ = need;
}

void nccl_communicator::all_gather_cols(const tensor& x, const tensor& out) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  TROUPE_CHECK(x.type == out.type && out.rows >= x.rows && out.cols == size_ * x.cols);
  const size_t esize = dtype_size(x.type), part = bytes_of(x);
  reserve_gather(part);
  check(ncclAllGather(x.data, gather_, static_cast<size_t>(x.numel()), nccl_type(x.type), comm_, stream_),
        "all_gather_cols");
  // Rank r's [rows, cols] block to columns r * cols of out.
  for (int r = 0; r < size_; ++r) {
    TROUPE_CHECK(cudaMemcpy2DAsync(static_cast<char*>(out.data) + r * x.cols * esize, out.cols * esize,
                                   static_cast<char*>(gather_) + r * part, x.cols * esize,
                                   x.cols * esize, x.rows, cudaMemcpyDeviceToDevice, stream_) == cudaSuccess);
  }
}

void nccl_communicator::send(const tensor& x, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  TROUPE_CHECK(peer >= 0 && peer < size_ && peer != rank_);
  check(ncclSend(x.data, static_cast<size_t>(x.numel()), nccl_type(x.type), peer, comm_, stream_), "send");
}

void nccl_communicator::recv(const tensor& x, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  TROUPE_CHECK(peer >= 0 && peer < size_ && peer != rank_);
  check(ncclRecv(x.data, static_cast<size_t>(x.numel()), nccl_type(x.type), peer, comm_, stream_), "recv");
}

void nccl_communicator::abort(const std::string& reason) {
  abort_requested_ = true;  // a call polling NCCL under mu_ stops at once
  std::lock_guard<std::mutex> lock(mu_);
  abort_locked(reason);
}

void nccl_communicator::abort_locked(const std::string& reason) {
  if (aborted_) return;
  reason_ = reason;
  aborted_ = true;
  ncclCommAbort(comm_);
}

}  // namespace troupe
