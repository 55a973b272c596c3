// Dense GEMMs on the GPU host, timed with CUDA events: the physical limits
// the issue-6 figures are set against, and how close cuBLAS comes to them at
// Llama-3.1-8B's shapes.
//
//   gemm_bench [iters]     (default 30)
//
// Prints
//   - the device-to-device copy bandwidth (read + write bytes: the
//     bandwidth roofline's denominator), and the bf16 GEMM rate at
//     8192 x 8192 x 8192 (the prefill roofline's);
//   - for each linear layer of Llama-3.1-8B (out = x w^T, w [N, K] bf16,
//     row-major, as cuda_ops::linear calls it) and batch rows M: time per
//     call through cublasGemmEx as troupe calls it (default math mode), the
//     same under CUBLAS_PEDANTIC_MATH, and the best of cuBLASLt's heuristic
//     candidates (up to 16 algorithms, each timed), with achieved GB/s
//     (weight + activation bytes) and TFLOP/s;
//   - per M, a decode step's GEMMs as troupe runs them (32 layers of fused
//     qkv, o, gate_up, down; lm_head with float32 logits) against the
//     bandwidth bound of their weight bytes.
// Weights rotate over copies totalling >= 1 GiB so that no call finds its
// weight in L2 (50-60 MB on H100/H200).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace {

#define CUBLAS_OK(call)                                                          \
  do {                                                                           \
    const cublasStatus_t s_ = (call);                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "%s failed: %d (%s:%d)\n", #call, static_cast<int>(s_), \
                   __FILE__, __LINE__);                                          \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

constexpr int repetitions = 5;

// Milliseconds per call (median over repetitions of the mean of iters calls).
double time_ms(cudaStream_t stream, int iters, const std::function<void(int)>& run) {
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) run(i);
  std::vector<double> ms;
  int call = 0;
  for (int r = 0; r < repetitions; ++r) {
    TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; ++i) run(call++);
    TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(static_cast<double>(elapsed) / iters);
  }
  TROUPE_CUDA_CHECK(cudaEventDestroy(start));
  TROUPE_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct shape {
  const char* name;
  int n, k;
  bool out_f32 = false;  // float32 output (logits)
};

struct timing {
  double cublas_ms, pedantic_ms, lt_ms;
  int lt_candidates;
};

class bench {
 public:
  bench(cudaStream_t stream, int iters) : stream_(stream), iters_(iters) {
    CUBLAS_OK(cublasCreate(&blas_));
    CUBLAS_OK(cublasSetStream(blas_, stream));
    CUBLAS_OK(cublasLtCreate(&lt_));
    TROUPE_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
    CUBLAS_OK(cublasSetWorkspace(blas_, workspace_, workspace_bytes));
  }
  ~bench() {
    cudaFree(workspace_);
    cublasLtDestroy(lt_);
    cublasDestroy(blas_);
  }

  // Weights: copies of [n, k] bf16 totalling >= 1 GiB (at least 2);
  // activations x [m, k], out [m, n].
  timing run(int m, int n, int k, bool out_f32 = false) {
    const size_t w_bytes = size_t(n) * k * 2;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(1) << 30) / w_bytes + 1));
    void* w = nullptr;
    void *x = nullptr, *out = nullptr;
    TROUPE_CUDA_CHECK(cudaMalloc(&w, w_bytes * copies));
    TROUPE_CUDA_CHECK(cudaMemset(w, 0, w_bytes * copies));
    TROUPE_CUDA_CHECK(cudaMalloc(&x, size_t(m) * k * 2));
    TROUPE_CUDA_CHECK(cudaMemset(x, 0, size_t(m) * k * 2));
    const cudaDataType_t out_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    TROUPE_CUDA_CHECK(cudaMalloc(&out, size_t(m) * n * 4));
    auto weight = [&](int call) { return static_cast<char*>(w) + (call % copies) * w_bytes; };
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm_ex = [&](int call) {
      CUBLAS_OK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, weight(call),
                             CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, out, out_type, n,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    timing t{};
    CUBLAS_OK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    t.cublas_ms = time_ms(stream_, iters_, gemm_ex);
    CUBLAS_OK(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));
    t.pedantic_ms = time_ms(stream_, iters_, gemm_ex);
    CUBLAS_OK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));

    // cuBLASLt: the same product, each heuristic candidate timed.
    cublasLtMatmulDesc_t desc;
    CUBLAS_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
    CUBLAS_OK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16BF, k, n, k));
    CUBLAS_OK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16BF, k, m, k));
    CUBLAS_OK(cublasLtMatrixLayoutCreate(&c_layout, out_type, n, m, n));
    cublasLtMatmulPreference_t pref;
    CUBLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = workspace_bytes;
    CUBLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t results[16];
    int returned = 0;
    CUBLAS_OK(cublasLtMatmulAlgoGetHeuristic(lt_, desc, a_layout, b_layout, c_layout, c_layout,
                                             pref, 16, results, &returned));
    t.lt_ms = 1e30;
    t.lt_candidates = returned;
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const double ms = time_ms(stream_, iters_, [&](int call) {
        CUBLAS_OK(cublasLtMatmul(lt_, desc, &alpha, weight(call), a_layout, x, b_layout, &beta,
                                 out, c_layout, out, c_layout, &results[i].algo, workspace_,
                                 workspace_bytes, stream_));
      });
      t.lt_ms = std::min(t.lt_ms, ms);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a_layout);
    cublasLtMatrixLayoutDestroy(b_layout);
    cublasLtMatrixLayoutDestroy(c_layout);
    cublasLtMatmulDescDestroy(desc);
    TROUPE_CUDA_CHECK(cudaFree(w));
    TROUPE_CUDA_CHECK(cudaFree(x));
    TROUPE_CUDA_CHECK(cudaFree(out));
    return t;
  }

 private:
  static constexpr size_t workspace_bytes = 32u << 20;
  cudaStream_t stream_;
  int iters_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
};

double copy_bandwidth_gbps(cudaStream_t stream) {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&a, bytes));
  TROUPE_CUDA_CHECK(cudaMalloc(&b, bytes));
  TROUPE_CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double ms = time_ms(stream, 10, [&](int) {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  TROUPE_CUDA_CHECK(cudaFree(a));
  TROUPE_CUDA_CHECK(cudaFree(b));
  return 2.0 * double(bytes) / (ms * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 30;
  cudaDeviceProp prop{};
  TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bench b(stream, iters);

  const double copy_gbps = copy_bandwidth_gbps(stream);
  const timing peak = b.run(8192, 8192, 8192);
  const double peak_flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  const double peak_tflops = peak_flops / (std::min(peak.cublas_ms, peak.lt_ms) * 1e9);
  std::printf("# gemm_bench on %s (%d SMs)\n\n", prop.name, prop.multiProcessorCount);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_gbps);
  std::printf("bf16 GEMM 8192^3: cublasGemmEx %.1f TFLOP/s, best cuBLASLt %.1f TFLOP/s\n\n",
              peak_flops / (peak.cublas_ms * 1e9), peak_flops / (peak.lt_ms * 1e9));

  const std::vector<shape> shapes = {
      {"qkv (fused)", 6144, 4096},         {"q_proj", 4096, 4096},  {"k_proj / v_proj", 1024, 4096},
      {"o_proj", 4096, 4096},              {"gate_up", 28672, 4096}, {"down", 4096, 14336},
      {"lm_head", 128256, 4096},           {"lm_head, float32 out", 128256, 4096, true},
  };
  const std::vector<int> batch = {1, 2, 4, 8, 16, 32, 64, 128, 256, 8192};
  std::printf("| shape (N x K) | M | cublasGemmEx us | pedantic us | best Lt us (of n) | "
              "GB/s (best) | %% of copy BW | TFLOP/s | %% of GEMM rate |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  struct step_sum {
    double ms = 0, lt_ms = 0, weight_bytes = 0;
  };
  std::vector<step_sum> steps(batch.size());
  for (const shape& s : shapes) {
    for (size_t bi = 0; bi < batch.size(); ++bi) {
      const int m = batch[bi];
      if (m == 8192 && s.n > 30000) continue;  // lm_head never sees a prefill's rows
      const timing t = b.run(m, s.n, s.k, s.out_f32);
      const double bytes = 2.0 * (double(s.n) * s.k + double(m) * s.k) +
                           (s.out_f32 ? 4.0 : 2.0) * double(m) * s.n;
      const double best = std::min(t.cublas_ms, t.lt_ms);
      const double gbps = bytes / (best * 1e6);
      const double tflops = 2.0 * m * double(s.n) * s.k / (best * 1e9);
      std::printf("| %s (%d x %d) | %d | %.1f | %.1f | %.1f (%d) | %.0f | %.0f%% | %.1f | %.0f%% |\n",
                  s.name, s.n, s.k, m, t.cublas_ms * 1e3, t.pedantic_ms * 1e3, t.lt_ms * 1e3,
                  t.lt_candidates, gbps, 100.0 * gbps / copy_gbps, tflops,
                  100.0 * tflops / peak_tflops);
      step_sum& st = steps[bi];
      // A step: q, k, v as one fused product, o, gate_up, down per layer,
      // then lm_head with float32 logits (as troupe runs it).
      const bool in_step = std::string(s.name) != "q_proj" && std::string(s.name) != "k_proj / v_proj" &&
                           std::string(s.name) != "lm_head";
      if (in_step) {
        const int layers = s.n == 128256 ? 1 : 32;
        st.ms += layers * t.cublas_ms;
        st.lt_ms += layers * std::min(t.cublas_ms, t.lt_ms);
        st.weight_bytes += layers * 2.0 * double(s.n) * s.k;
      }
    }
  }
  std::printf("\nA decode step's GEMMs (Llama-3.1-8B: 32 layers of fused qkv, o, gate_up, down, "
              "then lm_head with float32 logits), against its weights' bandwidth bound:\n\n");
  std::printf("| M | weights GB | bound ms | cublasGemmEx ms | %% of bound | best cuBLAS/Lt ms | %% of bound |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t bi = 0; bi + 1 < batch.size(); ++bi) {
    const step_sum& st = steps[bi];
    const double bound_ms = st.weight_bytes / (copy_gbps * 1e6);
    std::printf("| %d | %.2f | %.2f | %.2f | %.0f%% | %.2f | %.0f%% |\n", batch[bi],
                st.weight_bytes / 1e9, bound_ms, st.ms, 100.0 * bound_ms / st.ms, st.lt_ms,
                100.0 * bound_ms / st.lt_ms);
  }
  TROUPE_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
