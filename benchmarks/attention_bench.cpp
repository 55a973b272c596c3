// Paged attention on the GPU host, timed with CUDA events (median of
// repetitions, each the mean of `iters` back-to-back calls, after warm-up).
//
// Decode at Llama-3.1-8B's attention shape (32 query heads, 8 KV heads,
// head_dim 128, block 16, bfloat16) over batch x context, eager launches and
// CUDA-graph replays; achieved bandwidth counts the bytes a step must move
// (K and V rows of every visible key, q in, out back), set against a
// device-to-device copy on the same GPU (read + write bytes). Prefill: 8
// fresh prompts of 1024 tokens (causal), TFLOP/s over the 4 * head_dim
// FLOPs of every visible (query, key) pair and head. Each case again over
// an FP8 cache (kv_cache_dtype fp8; decode: the speedup over bf16's).
//
//   attention_bench [iters]     (default 50)
//
// The caches hold a constant (memset), block tables a random permutation of
// the blocks (scattered like a cache after churn): timing does not depend on
// the values.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"

namespace {

using troupe::cuda::element_type;

constexpr int64_t num_heads = 32, num_kv_heads = 8, head_dim = 128, block_size = 16;
constexpr int repetitions = 7;

template <class T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// Milliseconds per call of `run` (median over repetitions of the mean of iters calls).
double time_ms(cudaStream_t stream, int iters, const std::function<void()>& run) {
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) run();
  std::vector<double> ms;
  for (int r = 0; r < repetitions; ++r) {
    TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; ++i) run();
    TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(static_cast<double>(elapsed) / iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device-to-device copy rate (read + write bytes per second) of `bytes`.
double copy_gbps(cudaStream_t stream, int iters, size_t bytes) {
  void* a = device_alloc<char>(bytes);
  void* b = device_alloc<char>(bytes);
  const double ms = time_ms(stream, iters, [&] {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

struct batch {
  std::vector<int32_t> query_start_loc{0}, seq_lens, block_tables;
  int64_t max_blocks = 0, max_query_len = 0, max_seq_len = 0;
};

// num_seqs sequences of seq_len tokens, query_len of them queried, blocks
// drawn from a shuffled pool.
batch make_batch(int64_t num_seqs, int64_t seq_len, int64_t query_len, std::vector<int32_t> pool,
                 std::mt19937& rng) {
  batch b;
  std::shuffle(pool.begin(), pool.end(), rng);
  b.max_blocks = (seq_len + block_size - 1) / block_size;
  b.max_query_len = query_len;
  b.max_seq_len = seq_len;
  for (int64_t s = 0; s < num_seqs; ++s) {
    b.query_start_loc.push_back(static_cast<int32_t>(b.query_start_loc.back() + query_len));
    b.seq_lens.push_back(static_cast<int32_t>(seq_len));
    for (int64_t i = 0; i < b.max_blocks; ++i) {
      b.block_tables.push_back(pool[static_cast<size_t>(s * b.max_blocks + i)]);
    }
  }
  return b;
}

struct device_batch {
  int32_t* query_start_loc;
  int32_t* seq_lens;
  int32_t* block_tables;
  explicit device_batch(const batch& b)
      : query_start_loc(device_alloc<int32_t>(b.query_start_loc.size())),
        seq_lens(device_alloc<int32_t>(b.seq_lens.size())),
        block_tables(device_alloc<int32_t>(b.block_tables.size())) {
    TROUPE_CUDA_CHECK(cudaMemcpy(query_start_loc, b.query_start_loc.data(),
                                 b.query_start_loc.size() * 4, cudaMemcpyHostToDevice));
    TROUPE_CUDA_CHECK(cudaMemcpy(seq_lens, b.seq_lens.data(), b.seq_lens.size() * 4,
                                 cudaMemcpyHostToDevice));
    TROUPE_CUDA_CHECK(cudaMemcpy(block_tables, b.block_tables.data(), b.block_tables.size() * 4,
                                 cudaMemcpyHostToDevice));
  }
  ~device_batch() {
    cudaFree(query_start_loc);
    cudaFree(seq_lens);
    cudaFree(block_tables);
  }
};

troupe::cuda::paged_attention_args make_args(const batch& b, const device_batch& d, void* q,
                                             void* k, void* v, void* out) {
  troupe::cuda::paged_attention_args a;
  a.q = q;
  a.k_cache = k;
  a.v_cache = v;
  a.out = out;
  a.query_start_loc = d.query_start_loc;
  a.seq_lens = d.seq_lens;
  a.block_tables = d.block_tables;
  a.num_seqs = static_cast<int64_t>(b.seq_lens.size());
  a.num_tokens = b.query_start_loc.back();
  a.max_query_len = b.max_query_len;
  a.max_seq_len = b.max_seq_len;
  a.max_blocks_per_seq = b.max_blocks;
  a.block_size = block_size;
  a.num_heads = num_heads;
  a.num_kv_heads = num_kv_heads;
  a.head_dim = head_dim;
  a.scale = 0.08838834764831845f;  // 1 / sqrt(128)
  return a;
}

// Milliseconds per replay of a graph holding one call.
double graph_ms(cudaStream_t stream, int iters, const std::function<void()>& run) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TROUPE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  run();
  TROUPE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  TROUPE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms =
      time_ms(stream, iters, [&] { TROUPE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  if (troupe::cuda::device_count() == 0) {
    std::printf("attention_bench: no CUDA device\n");
    return 1;
  }
  std::printf("device: %s\n", troupe::cuda::describe_device(0).c_str());
  TROUPE_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::mt19937 rng(1);

  // One cache for every case: 64 x 4096 tokens (16384 blocks + the null block).
  const int64_t num_blocks = 1 + 64 * 4096 / block_size;
  const int64_t kv_cols = num_kv_heads * head_dim, elem = 2;
  const size_t cache_bytes = static_cast<size_t>(num_blocks * block_size * kv_cols * elem);
  void* k_cache = device_alloc<char>(cache_bytes);
  void* v_cache = device_alloc<char>(cache_bytes);
  TROUPE_CUDA_CHECK(cudaMemset(k_cache, 0x3c, cache_bytes));  // bf16 0x3c3c = 0.0115
  TROUPE_CUDA_CHECK(cudaMemset(v_cache, 0x3c, cache_bytes));
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks - 1));
  std::iota(pool.begin(), pool.end(), 1);
  // q and out for 8 x 1024 tokens of up to 4-byte elements (the float32 prefill).
  const size_t q_bytes = static_cast<size_t>(8 * 1024 * num_heads * head_dim * 4);
  void* q = device_alloc<char>(q_bytes);
  void* out = device_alloc<char>(q_bytes);
  TROUPE_CUDA_CHECK(cudaMemset(q, 0x3c, q_bytes));  // bf16 0.0115, float32 0.0115
  const size_t workspace_bytes = troupe::cuda::paged_attention_workspace_bytes(
      troupe::cuda::paged_attention_workspace_seq_splits(256), num_heads, head_dim);
  void* workspace = device_alloc<char>(workspace_bytes);
  const int64_t counters = troupe::cuda::paged_attention_split_counters(256, num_heads);
  auto* split_counters = device_alloc<int32_t>(static_cast<size_t>(counters));
  TROUPE_CUDA_CHECK(cudaMemset(split_counters, 0, static_cast<size_t>(counters) * 4));

  const double copy = copy_gbps(stream, iters, cache_bytes);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n\n", copy);

  std::printf("| decode bf16, 32/8 heads, d 128 | splits | eager us | graph us | GB/s (graph) | "
              "of copy | FP8 cache: splits | graph us | GB/s | of copy | speedup |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  // {batch, context, splits (0: the heuristic's)}
  const int64_t cases[][3] = {{1, 256, 0},    {1, 1024, 0},   {1, 1024, 1},  {1, 1024, 4},
                              {1, 4096, 0},   {1, 4096, 1},   {1, 4096, 4},  {1, 4096, 16},
                              {8, 4096, 0},   {32, 4096, 0},  {64, 4096, 0}, {64, 1024, 0},
                              {64, 1024, 2},  {64, 1024, 3},  {64, 1024, 4}, {256, 1024, 0},
                              {1, 32768, 0},  {16, 16384, 0}};
  for (const auto& c : cases) {
    const batch b = make_batch(c[0], c[1], 1, pool, rng);
    const device_batch d(b);
    troupe::cuda::paged_attention_args a = make_args(b, d, q, k_cache, v_cache, out);
    a.workspace = workspace;
    a.workspace_bytes = workspace_bytes;
    a.split_counters = split_counters;
    a.split_counters_count = counters;
    a.num_splits = static_cast<int>(c[2]);
    auto run = [&] { troupe::cuda::paged_attention(element_type::bf16, a, stream); };
    const double eager = time_ms(stream, iters, run);
    const double graph = graph_ms(stream, iters, run);
    // Bytes a step must move: K and V rows (kv_elem bytes an element), q in, out back.
    auto step_bytes = [&](int64_t kv_elem) {
      return static_cast<double>(c[0]) * (static_cast<double>(c[1]) * kv_cols * kv_elem * 2 +
                                          static_cast<double>(num_heads * head_dim * elem * 2));
    };
    const double gbps = step_bytes(elem) / (graph * 1e-3) / 1e9;
    std::printf("| batch %lld x context %lld | %d | %.1f | %.1f | %.0f | %.0f%% |",
                static_cast<long long>(c[0]), static_cast<long long>(c[1]),
                troupe::cuda::paged_attention_num_splits(element_type::bf16, a), eager * 1e3,
                graph * 1e3, gbps, 100.0 * gbps / copy);
    // The same over an FP8 cache (kv_cache_dtype fp8: the bytes read as
    // e4m3 codes, 0x3c = 1.5).
    a.fp8_cache = true;
    const double fp8_graph = graph_ms(stream, iters, run);
    const double fp8_gbps = step_bytes(1) / (fp8_graph * 1e-3) / 1e9;
    std::printf(" %d | %.1f | %.0f | %.0f%% | %.2fx |\n",
                troupe::cuda::paged_attention_num_splits(element_type::bf16, a), fp8_graph * 1e3,
                fp8_gbps, 100.0 * fp8_gbps / copy, graph / fp8_graph);
  }

  std::printf("\n| prefill 8 x 1024 fresh tokens, 32/8 heads, d 128 | ms | TFLOP/s |\n"
              "| --- | --- | --- |\n");
  // Blocks 1..4096 only: float32 blocks are twice the bytes (the cache holds 8192 of them).
  const std::vector<int32_t> half_pool(pool.begin(), pool.begin() + 4096);
  const batch b = make_batch(8, 1024, 1024, half_pool, rng);
  const device_batch d(b);
  // Every query token at position i sees i + 1 keys; 4 * head_dim FLOPs per pair and head.
  const double flops = 8.0 * (1024.0 * 1025.0 / 2.0) * num_heads * 4.0 * head_dim;
  for (element_type t : {element_type::bf16, element_type::f16, element_type::f32}) {
    for (bool fp8 : {false, true}) {
    troupe::cuda::paged_attention_args a = make_args(b, d, q, k_cache, v_cache, out);
    a.fp8_cache = fp8;
    if (t == element_type::f32) {
      std::printf("| f32 (strict, no tensor cores)%s |", fp8 ? ", FP8 cache" : "");
    } else {
      std::printf("| %s (mma.sync)%s |", t == element_type::bf16 ? "bf16" : "f16", fp8 ? ", FP8 cache" : "");
    }
    const double ms = time_ms(stream, std::max(1, iters / 5),
                              [&] { troupe::cuda::paged_attention(t, a, stream); });
    std::printf(" %.3f | %.1f |\n", ms, flops / (ms * 1e-3) / 1e12);
    }
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  TROUPE_CUDA_CHECK(cudaGetLastError());
  return 0;
}
