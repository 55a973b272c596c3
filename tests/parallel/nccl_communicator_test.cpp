// nccl_communicator (parallel/nccl_communicator.h) on the visible GPUs, a
// thread a rank (up to 4; one GPU: a one-rank group, which still runs every
// NCCL call): all_reduce_sum and all_gather_cols in float32 and bf16, sends
// around a ring (two or more GPUs), the same calls captured in a CUDA
// graph and replayed on new inputs, abort ending the group, and a member
// that never joins failing the others' creation after the timeout. Skipped
// where no CUDA device is visible (the build machines); run on the GPU
// host by scripts/gpu-check.sh, and on several GPUs by the multi-GPU runs.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/nccl_communicator.h"

namespace troupe {
namespace {

int visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Runs body(rank, communicator, stream) on one thread a GPU (up to 4).
void on_gpus(const std::function<void(int, nccl_communicator&, cudaStream_t)>& body) {
  const int size = std::min(visible_gpus(), 4);
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.error_message();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      auto c = nccl_communicator::create(*id, r, size, stream);
      ASSERT_TRUE(c.ok()) << c.error_message();
      body(r, **c, stream);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      c.value().reset();
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
}

// A device tensor of `type` holding `values` (bf16: exact small integers).
tensor upload(dtype type, int64_t rows, int64_t cols, const std::vector<float>& values) {
  tensor t{nullptr, type, rows, cols};
  EXPECT_EQ(cudaMalloc(&t.data, static_cast<size_t>(rows * cols) * dtype_size(type)), cudaSuccess);
  if (type == dtype::f32) {
    cudaMemcpy(t.data, values.data(), values.size() * 4, cudaMemcpyHostToDevice);
  } else {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &values[i], 4);
      bits[i] = static_cast<uint16_t>(u >> 16);  // exact for these values
    }
    cudaMemcpy(t.data, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
  }
  return t;
}

std::vector<float> download(const tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.type == dtype::f32) {
    cudaMemcpy(v.data(), t.data, v.size() * 4, cudaMemcpyDeviceToHost);
    return v;
  }
  std::vector<uint16_t> bits(v.size());
  cudaMemcpy(bits.data(), t.data, bits.size() * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

class nccl_communicator_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (visible_gpus() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// Rank r's values: integers, so that sums are exact in any order.
std::vector<float> values_of(int rank, int64_t n, int round) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i % 50) + 10 * rank + round);
  return v;
}

TEST_F(nccl_communicator_test, collectives_on_every_visible_gpu) {
  on_gpus([](int rank, nccl_communicator& c, cudaStream_t stream) {
    const int size = c.size();
    for (dtype type : {dtype::f32, dtype::bf16}) {
      const int64_t n = 1000;
      tensor x = upload(type, 4, n / 4, values_of(rank, n, 0));
      c.all_reduce_sum(x);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::vector<float> got = download(x);
      for (int64_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += values_of(r, n, 0)[i];
        ASSERT_EQ(got[i], want) << "rank " << rank << " element " << i;
      }
      // all_gather_cols: rank r's [3, 5] at columns 5 r.
      const tensor part = upload(type, 3, 5, values_of(rank, 15, 1));
      tensor out = upload(type, 3, 5 * size, std::vector<float>(15 * size, -1.0f));
      c.reserve_gather(15 * dtype_size(type));
      c.all_gather_cols(part, out);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::vector<float> gathered = download(out);
      for (int r = 0; r < size; ++r) {
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t j = 0; j < 5; ++j) {
            ASSERT_EQ(gathered[i * 5 * size + r * 5 + j], values_of(r, 15, 1)[i * 5 + j]) << "rank " << rank;
          }
        }
      }
      // A ring of sends (two or more GPUs).
      if (size > 1) {
        const tensor mine = upload(type, 1, 8, values_of(rank, 8, 2));
        tensor from_left = upload(type, 1, 8, std::vector<float>(8, -1.0f));
        c.send(mine, (rank + 1) % size);
        c.recv(from_left, (rank + size - 1) % size);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(download(from_left), values_of((rank + size - 1) % size, 8, 2));
        cudaFree(mine.data);
        cudaFree(from_left.data);
      }
      cudaFree(x.data);
      cudaFree(part.data);
      cudaFree(out.data);
    }
  });
}

TEST_F(nccl_communicator_test, captured_in_a_graph_and_replayed) {
  on_gpus([](int rank, nccl_communicator& c, cudaStream_t stream) {
    const int size = c.size();
    const int64_t n = 256;
    tensor x = upload(dtype::f32, 1, n, values_of(rank, n, 0));
    tensor out = upload(dtype::f32, 1, n * size, std::vector<float>(n * size, 0.0f));
    c.reserve_gather(n * 4);  // before the capture: no allocation in it
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    c.all_reduce_sum(x);
    c.all_gather_cols(x, out);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 3; round < 5; ++round) {
      const std::vector<float> v = values_of(rank, n, round);
      cudaMemcpyAsync(x.data, v.data(), n * 4, cudaMemcpyHostToDevice, stream);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::vector<float> got = download(out);
      for (int r = 0; r < size; ++r) {
        for (int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < size; ++q) want += values_of(q, n, round)[i];
          ASSERT_EQ(got[r * n + i], want) << "rank " << rank << " round " << round;
        }
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(x.data);
    cudaFree(out.data);
  });
}

TEST_F(nccl_communicator_test, abort_ends_the_group) {
  on_gpus([](int rank, nccl_communicator& c, cudaStream_t) {
    (void)rank;
    c.abort("shutting down");
    const tensor x = upload(dtype::f32, 1, 4, std::vector<float>(4, 1.0f));
    try {
      c.all_reduce_sum(x);
      ADD_FAILURE() << "an aborted group went on";
    } catch (const communicator_aborted& e) {
      EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
    }
    cudaFree(x.data);
  });
}

// A member that never joins (its process died while loading): the ranks
// that did give up after the timeout with an error, instead of hanging.
TEST_F(nccl_communicator_test, a_member_that_never_joins_is_a_timeout) {
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.error_message();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  auto c = nccl_communicator::create(*id, 0, 2, stream, std::chrono::seconds(2));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error_message().find("did not answer within 2 s"), std::string::npos)
      << c.error_message();
  EXPECT_LT(waited, 30.0);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace troupe
