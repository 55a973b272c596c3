// A group of ranks for tensor and pipeline parallelism (docs/parallelism.md):
// one rank per worker (a GPU with NCCL, or a thread of the CPU backend with
// cpu_group), every rank issuing the same collectives in the same order
// (the all-reduce after a row-parallel product, the all-gather of
// vocabulary-parallel logits, a pipeline stage's activations). Tensors are
// the backend's (ops.h): host float32 for the CPU backend, device memory
// on the worker's compute stream for NCCL.
//
// A group ends for good when a rank is lost (abort(), or a collective that
// waited longer than the group's timeout): every call on any rank, waiting
// or later, throws communicator_aborted naming the reason, so that no rank
// waits for one that will never come. It is the one exception troupe's
// core throws: a forward pass cannot go on without its peers, and the
// worker that catches it reports the lost rank (503s, /health).
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace troupe {

class communicator_aborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: x becomes the element-wise sum of every rank's x, added in
  // rank order, so every rank holds the same bits.
  virtual void all_reduce_sum(const tensor& x) = 0;
  // out [x.rows, size() * x.cols] gets rank r's x at columns r * x.cols.
  // REQUIRES: out does not overlap x.
  virtual void all_gather_cols(const tensor& x, const tensor& out) = 0;
  // Point to point (pipeline stages): x to `peer`, whose recv of the same
  // shape takes the sends from this rank in their order.
  virtual void send(const tensor& x, int peer) = 0;
  virtual void recv(const tensor& x, int peer) = 0;
  // Ends the group on every rank (a lost peer, shutdown): calls waiting now
  // and every later call throw communicator_aborted with `reason`.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace troupe
