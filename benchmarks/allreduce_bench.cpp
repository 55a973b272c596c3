// What one all-reduce costs through troupe's NCCL communicator, for the
// message sizes a tensor-parallel step sends (docs/parallelism.md): a rank
// a visible GPU (a thread each, as one process's ranks run), every
// all_reduce_sum of `rows` x `hidden` bf16 elements (rows 1, 8, 64, 256,
// 1024, 4096 by default: the decode batches and prefill chunks of a model
// of that hidden size), timed two ways after a warm-up:
//   - captured: 100 all-reduces in one CUDA graph, replayed 10 times, as
//     the decode graphs replay them (no launch cost per call);
//   - eager: 100 calls enqueued one after another (as eager steps).
// Prints per size the median time of one all-reduce and NCCL's bus
// bandwidth (nccl-tests' busbw: 2 (n - 1) / n x bytes / time). Rank 0's
// figures; every rank waits for the others in each call anyway.
//   allreduce_bench [--hidden 4096] [--ranks N] [--rows 1,8,64]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "parallel/nccl_communicator.h"

namespace troupe {
namespace {

struct options {
  int64_t hidden = 4096;
  int ranks = 0;  // 0: every visible GPU
  std::vector<int64_t> rows = {1, 8, 64, 256, 1024, 4096};
};

struct timing {
  double captured_us = 0, eager_us = 0;
};

constexpr int calls_per_sample = 100;
constexpr int samples = 10;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds of one all-reduce over `samples` runs of
// calls_per_sample, each run launched by `launch`.
template <typename Launch>
double time_runs(cudaStream_t stream, Launch launch) {
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int s = 0; s < samples + 2; ++s) {  // the first two: warm-up
    TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
    launch();
    TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (s >= 2) us.push_back(1000.0 * ms / calls_per_sample);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(us);
}

void run_rank(int rank, const options& o, const std::string& id, std::vector<timing>& out) {
  TROUPE_CUDA_CHECK(cudaSetDevice(rank));
  cudaStream_t stream = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto comm = nccl_communicator::create(id, rank, o.ranks, stream);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.error_message().c_str());
    std::exit(1);
  }
  nccl_communicator& c = **comm;
  const int64_t max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  void* buf = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&buf, static_cast<size_t>(max_rows * o.hidden) * 2));
  TROUPE_CUDA_CHECK(cudaMemset(buf, 0, static_cast<size_t>(max_rows * o.hidden) * 2));  // bf16 zeros
  for (size_t i = 0; i < o.rows.size(); ++i) {
    const tensor x{buf, dtype::bf16, o.rows[i], o.hidden};
    timing& t = out[i];
    t.eager_us = time_runs(stream, [&] {
      for (int k = 0; k < calls_per_sample; ++k) c.all_reduce_sum(x);
    });
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    TROUPE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < calls_per_sample; ++k) c.all_reduce_sum(x);
    TROUPE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    TROUPE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    t.captured_us = time_runs(stream, [&] { TROUPE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  comm.value().reset();
  cudaFree(buf);
  cudaStreamDestroy(stream);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

int run(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[i]);
      return 2;
    }
    if (flag == "--hidden") {
      o.hidden = std::atoll(argv[i + 1]);
    } else if (flag == "--ranks") {
      o.ranks = std::atoi(argv[i + 1]);
    } else if (flag == "--rows") {
      o.rows = parse_list(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s (--hidden N, --ranks N, --rows a,b,c)\n", argv[i]);
      return 2;
    }
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible == 0) {
    std::fprintf(stderr, "allreduce_bench: no CUDA device visible\n");
    return 1;
  }
  if (o.ranks == 0) o.ranks = visible;
  if (o.ranks > visible || o.rows.empty() || o.hidden <= 0) {
    std::fprintf(stderr, "allreduce_bench: %d ranks asked, %d GPUs visible\n", o.ranks, visible);
    return 2;
  }
  auto id = nccl_unique_id();
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.error_message().c_str());
    return 1;
  }
  std::vector<std::vector<timing>> t(static_cast<size_t>(o.ranks), std::vector<timing>(o.rows.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] { run_rank(r, o, *id, t[static_cast<size_t>(r)]); });
  }
  for (std::thread& th : threads) th.join();
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  std::printf("all_reduce_sum, bf16, %d ranks, NCCL %d, hidden %lld (rank 0; median of %d x %d calls)\n\n",
              o.ranks, nccl_version, static_cast<long long>(o.hidden), samples, calls_per_sample);
  std::printf("| rows | bytes | captured us | captured busbw GB/s | eager us | eager busbw GB/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  // nccl-tests' bus bandwidth factor: 0 for one rank (nothing crosses a link).
  const double factor = 2.0 * (o.ranks - 1) / o.ranks;
  for (size_t i = 0; i < o.rows.size(); ++i) {
    const double bytes = static_cast<double>(o.rows[i] * o.hidden * 2);
    const timing& r0 = t[0][i];
    std::printf("| %lld | %.0f | %.2f | %.1f | %.2f | %.1f |\n", static_cast<long long>(o.rows[i]), bytes,
                r0.captured_us, factor * bytes / (r0.captured_us * 1e3), r0.eager_us,
                factor * bytes / (r0.eager_us * 1e3));
  }
  return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) { return troupe::run(argc, argv); }
