// cuda_ops' dense products: cuBLAS, or for decode shapes of up to
// cuda::gemv_max_rows rows the GEMV kernel where start-up tuning found it
// faster and equal (docs/gpu.md, "Decode GEMV").
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/activation/activation.h"
#include "model/weights.h"

namespace troupe {

void cuda_ops::allow_tuning(bool on) {
  impl& m = *impl_;
  m.tuning_allowed = on;
  if (!on && m.flush_buffer != nullptr) {
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    TROUPE_CUDA_CHECK(cudaFree(m.flush_buffer));
    m.flush_buffer = nullptr;
  }
}

std::string cuda_ops::tuning_report() const {
  const impl& m = *impl_;
  if (m.tuning_lines.empty()) return {};
  int gemv = 0;
  for (const auto& [key, choice] : m.gemm_choices) gemv += choice >= 0 ? 1 : 0;
  std::string r = "decode GEMM tuning: " + std::to_string(m.gemm_choices.size()) +
                  " shapes timed in " + std::to_string(static_cast<int>(m.tuning_ms)) +
                  " ms, GEMV kept for " + std::to_string(gemv) + ", cuBLAS for " +
                  std::to_string(m.gemm_choices.size() - gemv);
  for (const std::string& line : m.tuning_lines) r += "\n  " + line;
  return r;
}

namespace {

// Microseconds per call of `run` on `stream` from a cold L2 (a decode
// step's weights stream from memory; back-to-back calls would find them
// cached): the median of 7 calls, each after `prepare` (which overwrites
// the L2 and resets the output), after one untimed call. The last call's
// output is left in place for the caller to check.
template <class F, class G>
double time_cold_us(cudaStream_t stream, F&& run, G&& prepare) {
  constexpr int runs = 7;
  cudaEvent_t a, b;
  TROUPE_CUDA_CHECK(cudaEventCreate(&a));
  TROUPE_CUDA_CHECK(cudaEventCreate(&b));
  prepare();
  run();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    prepare();
    TROUPE_CUDA_CHECK(cudaEventRecord(a, stream));
    run();
    TROUPE_CUDA_CHECK(cudaEventRecord(b, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0);
  }
  TROUPE_CUDA_CHECK(cudaEventDestroy(a));
  TROUPE_CUDA_CHECK(cudaEventDestroy(b));
  std::nth_element(us.begin(), us.begin() + runs / 2, us.end());
  return us[runs / 2];  // the median: robust to a stray slow run
}

}  // namespace

int cuda_ops::gemm_choice(const tensor& x, const tensor& w, const tensor& out) {
  impl& m = *impl_;
  if (m.gemv_mode == impl::gemv_off || w.type == dtype::f32 ||
      (out.type != w.type && out.type != dtype::f32) ||
      !cuda::gemv_supported(element_of(w.type), x.rows, x.cols, x.data, w.data)) {
    return -1;
  }
  if (m.gemv_mode >= 0) return m.gemv_mode;
  const auto key = std::make_tuple(x.rows, w.rows, w.cols, static_cast<int>(w.type),
                                   static_cast<int>(out.type));
  if (auto it = m.gemm_choices.find(key); it != m.gemm_choices.end()) return it->second;
  if (!m.tuning_allowed) return -1;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TROUPE_CUDA_CHECK(cudaStreamIsCapturing(m.stream, &status));
  if (status != cudaStreamCaptureStatusNone) return -1;

  const auto start = std::chrono::steady_clock::now();
  const size_t elem = dtype_size(w.type), out_elem = dtype_size(out.type);
  const size_t x_bytes = static_cast<size_t>(x.rows * x.cols) * elem;
  const size_t count = static_cast<size_t>(x.rows * w.rows);
  const size_t out_bytes = count * out_elem;
  // Private inputs and outputs: random x (the warm-up's own activations are
  // degenerate: identical rows, zeros after attention over an empty cache)
  // and an output filled with NaN before every run, so that an output a
  // kernel fails to write shows; the live tensors are left alone.
  const size_t flush_need = [&] {
    int l2 = 0;
    TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, m.device));
    return std::max<size_t>(2 * static_cast<size_t>(l2), size_t{16} << 20);
  }();
  const size_t need = flush_need + x_bytes + out_bytes + 256;
  if (m.flush_buffer == nullptr || m.flush_bytes < need) {
    if (m.flush_buffer != nullptr) {
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream));
      TROUPE_CUDA_CHECK(cudaFree(m.flush_buffer));
      m.flush_buffer = nullptr;
    }
    if (cudaMalloc(&m.flush_buffer, need) != cudaSuccess) {
      (void)cudaGetLastError();
      m.flush_buffer = nullptr;
      m.flush_bytes = 0;
      return -1;  // no memory to tune in: cuBLAS, untuned (asked again next time)
    }
    m.flush_bytes = need;
  }
  char* base = static_cast<char*>(m.flush_buffer);
  void* tx = base + flush_need;
  void* tout = base + ((flush_need + x_bytes + 127) & ~size_t{127});
  cuda::fill_dummy(element_of(w.type), tx, x.rows * x.cols, 0x5eed0000u + static_cast<uint64_t>(x.cols), 1.0f,
                   0.0f, m.stream);
  const tensor px{tx, x.type, x.rows, x.cols};
  const tensor pout{tout, out.type, x.rows, w.rows};
  int round = 0;
  auto prepare = [&] {
    TROUPE_CUDA_CHECK(cudaMemsetAsync(base, ++round & 0xff, flush_need, m.stream));  // cold L2
    TROUPE_CUDA_CHECK(cudaMemsetAsync(tout, 0xff, out_bytes, m.stream));             // NaN
  };
  auto read_out = [&] {  // as float32, without download()'s step bookkeeping
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    std::vector<float> v(count);
    if (out.type == dtype::f32) {
      TROUPE_CUDA_CHECK(cudaMemcpy(v.data(), tout, out_bytes, cudaMemcpyDeviceToHost));
      return v;
    }
    std::vector<uint16_t> bits(count);
    TROUPE_CUDA_CHECK(cudaMemcpy(bits.data(), tout, out_bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      v[i] = out.type == dtype::bf16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
    }
    return v;
  };
  const double blas_us = time_cold_us(m.stream, [&] { gemm_cublas(px, w, pout); }, prepare);
  const std::vector<float> want = read_out();
  double max_want = 0;
  for (float v : want) max_want = std::max(max_want, std::isfinite(v) ? std::fabs(double(v)) : 0.0);
  // TROUPE_DEBUG_GEMV_DROP_LAST=1 (tests): the GEMV runs leave the last
  // output row unwritten, which the check below must catch.
  const char* drop = std::getenv("TROUPE_DEBUG_GEMV_DROP_LAST");
  const int64_t gemv_n = drop != nullptr && std::strcmp(drop, "1") == 0 ? w.rows - 1 : w.rows;
  int best = -1;
  double best_us = blas_us;
  std::string timings;
  for (int v = 0; v < cuda::gemv_num_variants(); ++v) {
    const double us = time_cold_us(
        m.stream,
        [&] {
          cuda::gemv(element_of(w.type), out.type == dtype::f32, v, tx, x.rows, w.data, gemv_n,
                     w.cols, tout, m.stream);
        },
        prepare);
    // Every output equal to cuBLAS's within two roundings of the output
    // type plus float32 summation order (a wrong or missing output is off
    // by order 1 or NaN); otherwise the variant is never used.
    const std::vector<float> got = read_out();
    const double rel = out.type == dtype::f32 ? 1e-4 : 1.0 / 64;
    bool agrees = true;
    for (size_t i = 0; i < count && agrees; ++i) {
      if (!std::isfinite(want[i])) continue;
      agrees = std::isfinite(got[i]) &&
               std::fabs(double(got[i]) - want[i]) <= rel * std::fabs(double(want[i])) + 1e-3 * max_want;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, ", %s %.1f%s", cuda::gemv_variant_name(v), us,
                  agrees ? "" : " (differs from cuBLAS: not used)");
    timings += buf;
    if (!agrees) {
      std::fprintf(stderr, "troupe: %s differs from cuBLAS on a %lldx%lld -> %lld product; not used\n",
                   cuda::gemv_variant_name(v), static_cast<long long>(x.rows),
                   static_cast<long long>(w.cols), static_cast<long long>(w.rows));
      continue;
    }
    // A GEMV must beat cuBLAS by 2% (not by timing noise).
    if (us < 0.98 * blas_us && us < best_us) {
      best = v;
      best_us = us;
    }
  }
  char head[160];
  std::snprintf(head, sizeof head, "%lldx%lld -> %lld%s: %s (us: cuBLAS %.1f",
                static_cast<long long>(x.rows), static_cast<long long>(w.cols),
                static_cast<long long>(w.rows), out.type == dtype::f32 ? " (float32 out)" : "",
                best < 0 ? "cuBLAS" : cuda::gemv_variant_name(best), blas_us);
  m.tuning_lines.push_back(std::string(head) + timings + ")");
  m.tuning_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  m.gemm_choices.emplace(key, best);  // gemm() computes the product with it next
  return best;
}

void cuda_ops::gemm(const tensor& x, const tensor& w, const tensor& out) {
  const int choice = gemm_choice(x, w, out);
  if (choice >= 0) {
    cuda::gemv(element_of(w.type), out.type == dtype::f32, choice, x.data, x.rows, w.data, w.rows,
               w.cols, out.data, impl_->stream);
    return;
  }
  gemm_cublas(x, w, out);
}

void cuda_ops::gemm_cublas(const tensor& x, const tensor& w, const tensor& out) {
  // Row-major out[M, N] = x[M, K] w[N, K]^T is column-major out^T = w x^T.
  // Pedantic math for float32 weights (strict float32, no TF32) and for
  // float32 outputs (logits: in the default mode cuBLAS picks a kernel 2.5x
  // slower for bf16 x bf16 -> float32 at 64 rows, H200). bf16/f16 otherwise,
  // with split-K partial sums kept in float32 (no reduced-precision reduction).
  const cublasMath_t mode =
      w.type == dtype::f32 || out.type == dtype::f32
          ? CUBLAS_PEDANTIC_MATH
          : static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (mode != impl_->blas_mode) {
    TROUPE_CUBLAS_CHECK(cublasSetMathMode(impl_->blas, mode));
    impl_->blas_mode = mode;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(x.rows), n = static_cast<int>(w.rows), k = static_cast<int>(x.cols);
  TROUPE_CUBLAS_CHECK(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.data,
                                   cublas_type_of(w.type), k, x.data, cublas_type_of(x.type), k,
                                   &beta, out.data, cublas_type_of(out.type), n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::string cuda_ops::product_kernel(const tensor& x, const tensor& w, const tensor& out) {
  const bool allowed = impl_->tuning_allowed;
  impl_->tuning_allowed = false;
  const int choice = gemm_choice(x, w, out);
  impl_->tuning_allowed = allowed;
  return choice < 0 ? "cuBLAS" : cuda::gemv_variant_name(choice);
}

}  // namespace troupe
