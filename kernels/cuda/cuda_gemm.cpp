// cuda_ops' dense products: cuBLAS, or for decode shapes of up to
// cuda::gemv_max_rows rows the GEMV kernel (gated_linear: the GEMV-GLU,
// with SiLU-and-mul fused) where start-up tuning found it faster and equal
// (docs/gpu.md, "Decode products"); with keep_rows_consistent (batch
// invariance), always a GEMV variant without a split, products of more rows
// as GEMVs of up to gemv_max_rows rows each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/rope/rope.h"
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

void cuda_ops::keep_rows_consistent(bool on) {
  impl& m = *impl_;
  // Variant 0 of both tables, the untuned choice, sums a row without a split.
  TROUPE_CHECK(cuda::gemv_variant_split(0) == 1 && cuda::gemv_glu_variant_split(0) == 1);
  if (on != m.rows_consistent) m.gemm_choices.clear();  // chosen under the other rule
  m.rows_consistent = on;
}

std::string cuda_ops::tuning_report() const {
  const impl& m = *impl_;
  if (m.tuning_lines.empty()) return {};
  int gemv = 0, glu = 0;
  for (const auto& [key, choice] : m.gemm_choices) {
    if (choice >= 0) ++(std::get<5>(key) ? glu : gemv);  // GEMV: with the RoPE epilogue too
  }
  std::string r = "decode GEMM tuning: " + std::to_string(m.gemm_choices.size()) +
                  " shapes timed in " + std::to_string(static_cast<int>(m.tuning_ms)) +
                  " ms, GEMV kept for " + std::to_string(gemv) + ", GEMV-GLU for " +
                  std::to_string(glu) + ", cuBLAS for " +
                  std::to_string(m.gemm_choices.size() - gemv - glu) +
                  (m.rows_consistent ? " (batch invariant: no split variants, no cuBLAS)" : "");
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

int cuda_ops::gemm_choice(const tensor& x, const tensor& w, const tensor& out, bool gated,
                          const rope_heads* rope) {
  impl& m = *impl_;
  TROUPE_CHECK(!(gated && rope != nullptr));
  TROUPE_CHECK_MSG(!w.is_packed(), "gemm_choice: a packed weight (packed_linear computes it)");
  if (m.gemv_mode == impl::gemv_off || w.type == dtype::f32 ||
      (out.type != w.type && out.type != dtype::f32) ||
      (gated && (!m.glu_on || out.type != w.type))) {
    return -1;
  }
  const cuda::element_type et = element_of(w.type);
  if (!cuda::gemv_supported(et, x.rows, x.cols, x.data, w.data)) return -1;
  // A forced GEMV variant, unfused (with consistent rows, not a split one).
  if (m.gemv_mode >= 0 && !(m.rows_consistent && cuda::gemv_variant_split(m.gemv_mode) > 1)) {
    return gated || rope != nullptr ? -1 : m.gemv_mode;
  }
  const auto key = std::make_tuple(x.rows, w.rows, w.cols, static_cast<int>(w.type),
                                   static_cast<int>(out.type), gated,
                                   rope != nullptr ? rope->q_heads : 0,
                                   rope != nullptr ? rope->head_dim : 0);
  if (auto it = m.gemm_choices.find(key); it != m.gemm_choices.end()) return it->second;
  // Consistent rows: variants without a split only (one order of sums for
  // every row count: a split variant's is its own, and at four to eight
  // rows it is slow), the fastest that agrees, cuBLAS never; untuned,
  // variant 0 (no split).
  const int untuned = m.rows_consistent ? 0 : -1;
  if (!m.tuning_allowed) return untuned;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TROUPE_CUDA_CHECK(cudaStreamIsCapturing(m.stream, &status));
  if (status != cudaStreamCaptureStatusNone) return untuned;

  const auto start = std::chrono::steady_clock::now();
  const int64_t n_out = gated ? w.rows / 2 : w.rows;  // outputs a row
  const size_t elem = dtype_size(w.type), out_elem = dtype_size(out.type);
  const size_t x_bytes = static_cast<size_t>(x.rows * x.cols) * elem;
  const size_t count = static_cast<size_t>(x.rows * n_out);
  const size_t out_bytes = count * out_elem;
  // gated: the cuBLAS reference's [m, 2d] product; rope: its [m, rows]
  // product, then positions (0), slots (-1: no K/V written) and cos/sin
  // tables of one position (1 and 0: the rotation leaves q as it is, so
  // that q is the product's q columns to compare).
  const size_t product_bytes = gated || rope != nullptr ? static_cast<size_t>(x.rows * w.rows) * elem : 0;
  const int64_t half = rope != nullptr ? rope->head_dim / 2 : 0;
  const size_t rope_bytes = rope != nullptr ? static_cast<size_t>(2 * x.rows + 2 * half) * 4 : 0;
  // Private inputs and outputs: random x (the warm-up's own activations are
  // degenerate: identical rows, zeros after attention over an empty cache)
  // and an output filled with NaN before every run, so that an output a
  // kernel fails to write shows; the live tensors are left alone.
  const size_t flush_need = [&] {
    int l2 = 0;
    TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, m.device));
    return std::max<size_t>(2 * static_cast<size_t>(l2), size_t{16} << 20);
  }();
  const auto align = [](size_t b) { return (b + 255) & ~size_t{255}; };
  const size_t need =
      flush_need + align(x_bytes) + align(out_bytes) + align(product_bytes) + align(rope_bytes);
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
      return untuned;  // no memory to tune in (asked again next time)
    }
    m.flush_bytes = need;
  }
  char* base = static_cast<char*>(m.flush_buffer);
  void* tx = base + flush_need;
  void* tout = base + flush_need + align(x_bytes);
  void* tproduct = base + flush_need + align(x_bytes) + align(out_bytes);
  auto* trope = reinterpret_cast<int32_t*>(static_cast<char*>(tproduct) + align(product_bytes));
  int32_t* tpositions = trope;
  int32_t* tslots = trope + x.rows;
  float* tcos = reinterpret_cast<float*>(trope + 2 * x.rows);
  float* tsin = tcos + half;
  if (rope != nullptr) {
    std::vector<int32_t> host(rope_bytes / 4, 0);
    for (int64_t i = 0; i < x.rows; ++i) host[x.rows + i] = -1;
    for (int64_t i = 0; i < half; ++i) host[2 * x.rows + i] = 0x3f800000;  // 1.0f
    TROUPE_CUDA_CHECK(cudaMemcpy(trope, host.data(), rope_bytes, cudaMemcpyHostToDevice));
  }
  // rope: the output compared is q, [m, q_heads * head_dim].
  const int64_t q_cols = rope != nullptr ? rope->q_heads * rope->head_dim : 0;
  auto run_rope = [&](int v) {
    cuda::gemv_qkv_rope_cache(et, v, tx, x.rows, w.data, nullptr, w.cols, rope->q_heads,
                              rope->kv_heads, rope->head_dim, tpositions, tcos, tsin, tslots,
                              tout, cuda::kv_dest{}, m.stream);  // (slots -1: no cache writes)
  };
  cuda::fill_dummy(et, tx, x.rows * x.cols, 0x5eed0000u + static_cast<uint64_t>(x.cols), 1.0f, 0.0f,
                   m.stream);
  const tensor px{tx, x.type, x.rows, x.cols};
  const tensor pout{tout, out.type, x.rows, n_out};
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
  // The reference: cuBLAS (gated: into a scratch gate_up, then
  // silu_and_mul; rope: into a scratch product, then qkv_rope_cache).
  const double blas_us = time_cold_us(
      m.stream,
      [&] {
        if (!gated && rope == nullptr) return gemm_cublas(px, w, pout);
        gemm_cublas(px, w, tensor{tproduct, w.type, x.rows, w.rows});
        if (gated) return cuda::silu_and_mul(et, tproduct, x.rows, n_out, tout, m.stream);
        cuda::qkv_rope_cache(et, tproduct, x.rows, rope->q_heads, rope->kv_heads, rope->head_dim,
                             nullptr, nullptr, 0.0f, tpositions, tcos, tsin, tslots, tout,
                             cuda::kv_dest{}, m.stream);
      },
      prepare);
  std::vector<float> want = read_out();
  // rope: q was written ([m, q_cols]); the rest of the buffer is NaN.
  if (rope != nullptr) want.resize(static_cast<size_t>(x.rows * q_cols));
  double max_want = 0;
  for (float v : want) max_want = std::max(max_want, std::isfinite(v) ? std::fabs(double(v)) : 0.0);
  // TROUPE_DEBUG_GEMV_DROP_LAST=1 (tests): the candidates' runs leave the
  // last output column unwritten, which the check below must catch.
  const char* drop = std::getenv("TROUPE_DEBUG_GEMV_DROP_LAST");
  const int64_t n_run = n_out - (drop != nullptr && std::strcmp(drop, "1") == 0 ? 1 : 0);
  // The candidates: the GEMV-GLU variants (gated, and with the RoPE
  // epilogue, which computes pairs of rows as they do) or the GEMV variants.
  const bool pairs = gated || rope != nullptr;
  const int variants = pairs ? cuda::gemv_glu_num_variants() : cuda::gemv_num_variants();
  auto name_of = [&](int v) {
    return pairs ? cuda::gemv_glu_variant_name(v) : cuda::gemv_variant_name(v);
  };
  // TROUPE_GEMV_PIN="SHAPE=KERNEL;..." (comparisons): the shape, as the
  // tuning log names it ("1x4096 -> 6144", "1x4096 -> 28672 (gated)"),
  // runs KERNEL ("cuBLAS" or a variant's name) if it agrees with cuBLAS,
  // whatever the timings say.
  char shape[96];
  std::snprintf(shape, sizeof shape, "%lldx%lld -> %lld%s", static_cast<long long>(x.rows),
                static_cast<long long>(w.cols), static_cast<long long>(w.rows),
                gated ? " (gated)" : rope != nullptr ? " (rope)" : out.type == dtype::f32 ? " (float32 out)" : "");
  std::string pinned;
  if (const char* pins = std::getenv("TROUPE_GEMV_PIN"); pins != nullptr) {
    const std::string all = pins, prefix = std::string(shape) + "=";
    for (size_t at = 0; at <= all.size();) {
      const size_t end = std::min(all.find(';', at), all.size());
      const std::string pin = all.substr(at, end - at);
      if (pin.compare(0, prefix.size(), prefix) == 0) pinned = pin.substr(prefix.size());
      at = end + 1;
    }
  }
  // Split variants only for products of up to gemv_split_max_rows rows
  // and without the RoPE epilogue: they won end to end for the gate/up and
  // down products at one and two rows, but timed alone (as here) they were
  // picked at four rows and for the q/k/v product with RoPE, where the
  // decode graph ran slower with them (docs/gpu.md).
  const bool split_allowed = m.gemv_split != impl::split_mode::off && !m.rows_consistent &&
                             x.rows <= cuda::gemv_split_max_rows && rope == nullptr;
  const bool split_only = split_allowed && m.gemv_split == impl::split_mode::only;
  int best = -1;
  double best_us = blas_us;
  std::string timings;
  for (int v = 0; v < variants; ++v) {
    const bool split = (pairs ? cuda::gemv_glu_variant_split(v) : cuda::gemv_variant_split(v)) > 1;
    if (split ? !split_allowed : split_only) continue;
    const double us = time_cold_us(
        m.stream,
        [&] {
          if (rope != nullptr) {
            run_rope(v);
          } else if (gated) {
            cuda::gemv_glu(et, v, tx, x.rows, w.data, n_run, w.cols, tout, m.stream);
          } else {
            cuda::gemv(et, out.type == dtype::f32, v, tx, x.rows, w.data, n_run, w.cols, tout,
                       m.stream);
          }
        },
        prepare);
    // Every output equal to the reference within two roundings of the
    // output type plus float32 summation order (a wrong or missing output
    // is off by order 1 or NaN); otherwise the variant is never used.
    const std::vector<float> got = read_out();  // (rope: q is its first want.size())
    const double rel = out.type == dtype::f32 ? 1e-4 : 1.0 / 64;
    bool agrees = true;
    for (size_t i = 0; i < want.size() && agrees; ++i) {
      if (!std::isfinite(want[i])) continue;
      agrees = std::isfinite(got[i]) &&
               std::fabs(double(got[i]) - want[i]) <= rel * std::fabs(double(want[i])) + 1e-3 * max_want;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, ", %s %.1f%s", name_of(v), us,
                  agrees ? "" : " (differs from cuBLAS: not used)");
    timings += buf;
    if (!agrees) {
      std::fprintf(stderr, "troupe: %s differs from cuBLAS on a %lldx%lld -> %lld product; not used\n",
                   name_of(v), static_cast<long long>(x.rows), static_cast<long long>(w.cols),
                   static_cast<long long>(w.rows));
      continue;
    }
    if (!pinned.empty()) {
      if (pinned == name_of(v)) best = v;
      continue;
    }
    // A candidate must beat cuBLAS by 2% (not by timing noise); with
    // consistent rows the fastest that agrees is taken.
    if (m.rows_consistent ? best < 0 || us < best_us : us < 0.98 * blas_us && us < best_us) {
      best = v;
      best_us = us;
    }
  }
  char head[256];
  std::snprintf(head, sizeof head, "%s: %s%s (us: cuBLAS%s %.1f", shape,
                best < 0 ? "cuBLAS" : name_of(best), pinned.empty() ? "" : " (pinned)",
                gated ? " + silu_and_mul" : rope != nullptr ? " + qkv_rope_cache" : "", blas_us);
  m.tuning_lines.push_back(std::string(head) + timings + ")");
  m.tuning_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Consistent rows never fall back to cuBLAS: variant 0 (no split) when
  // none agreed (its disagreement is then logged above).
  if (m.rows_consistent && best < 0) best = 0;
  m.gemm_choices.emplace(key, best);  // the next call computes the product with it
  return best;
}

bool cuda_ops::runs_in_row_chunks(const tensor& x, const tensor& w) const {
  return impl_->rows_consistent && x.rows > cuda::gemv_max_rows &&
         cuda::gemv_supported(element_of(w.type), cuda::gemv_max_rows, x.cols, x.data, w.data);
}

void cuda_ops::gemm(const tensor& x, const tensor& w, const tensor& out) {
  // Batch invariance: a product of more rows than a GEMV takes runs as
  // products of up to gemv_max_rows rows each, so that every row is summed
  // in the one order of the variants without a split (each chunk rereads
  // the weights: prefill is several times slower).
  if (runs_in_row_chunks(x, w)) {
    for (int64_t r0 = 0; r0 < x.rows; r0 += cuda::gemv_max_rows) {
      const int64_t rows = std::min<int64_t>(cuda::gemv_max_rows, x.rows - r0);
      gemm(x.row_slice(r0, rows), w, out.row_slice(r0, rows));
    }
    return;
  }
  const int choice = gemm_choice(x, w, out);
  if (choice >= 0) {
    cuda::gemv(element_of(w.type), out.type == dtype::f32, choice, x.data, x.rows, w.data, w.rows,
               w.cols, out.data, impl_->stream);
    return;
  }
  gemm_cublas(x, w, out);
}

void cuda_ops::gemm_cublas(const tensor& x, const tensor& w, const tensor& out) {
  gemm_cublas(x.type, out.type, x.data, x.cols, w.data, w.cols, out.data, out.cols, x.rows, w.rows,
              x.cols, 0.0f);
}

void cuda_ops::gemm_cublas(dtype in_type, dtype out_type, const void* x, int64_t ldx, const void* w,
                           int64_t ldw, void* out, int64_t ldo, int64_t m, int64_t n, int64_t k,
                           float beta) {
  // Row-major out[M, N] = x[M, K] w[N, K]^T is column-major out^T = w x^T.
  // Pedantic math for float32 weights (strict float32, no TF32) and for
  // float32 outputs (logits: in the default mode cuBLAS picks a kernel 2.5x
  // slower for bf16 x bf16 -> float32 at 64 rows, H200). bf16/f16 otherwise,
  // with split-K partial sums kept in float32 (no reduced-precision reduction).
  const cublasMath_t mode =
      in_type == dtype::f32 || out_type == dtype::f32
          ? CUBLAS_PEDANTIC_MATH
          : static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (mode != impl_->blas_mode) {
    TROUPE_CUBLAS_CHECK(cublasSetMathMode(impl_->blas, mode));
    impl_->blas_mode = mode;
  }
  const float alpha = 1.0f;
  TROUPE_CUBLAS_CHECK(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                   static_cast<int>(m), static_cast<int>(k), &alpha, w,
                                   cublas_type_of(in_type), static_cast<int>(ldw), x,
                                   cublas_type_of(in_type), static_cast<int>(ldx), &beta, out,
                                   cublas_type_of(out_type), static_cast<int>(ldo),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::string cuda_ops::product_kernel(const tensor& x, const tensor& w, const tensor& out, bool gated,
                                     const rope_heads* rope) {
  // Batch invariance: gemm() in chunks of gemv_max_rows rows, the GLU and
  // RoPE epilogues apart.
  if (runs_in_row_chunks(x, w)) {
    const int64_t rows = cuda::gemv_max_rows;
    return product_kernel(x.row_slice(0, rows), w, tensor{out.data, out.type, rows, w.rows}) +
           " (" + std::to_string(rows) + "-row chunks)" +
           (gated ? " + silu_and_mul" : rope != nullptr ? " + qkv_rope_cache" : "");
  }
  const bool allowed = impl_->tuning_allowed;
  impl_->tuning_allowed = false;
  const int choice = gemm_choice(x, w, out, gated, rope);
  impl_->tuning_allowed = allowed;
  if (choice < 0) return "cuBLAS";
  return gated || rope != nullptr ? cuda::gemv_glu_variant_name(choice)
                                  : cuda::gemv_variant_name(choice);
}

}  // namespace troupe
