// The decode products (kernels/cuda/gemm/gemv.cu: the GEMV and its GLU
// form) against a double-precision reference on the same rounded inputs:
// every variant, 1-8 rows, bf16 and f16, outputs in the input type and in
// float32, widths that are not multiples of a warp's stride and row counts
// that leave a warp partly empty; and cuda_ops' choice between them and
// cuBLAS (tuning at warm-up, TROUPE_GEMV, gated_linear, consistent rows). Skipped where no CUDA device is visible (the build
// machines); run on the GPU host by scripts/gpu-check.sh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/rope/rope.h"

namespace troupe {
namespace {

struct problem {
  int64_t m, n, k;
  std::vector<float> x, w;    // as rounded to the device type
  std::vector<double> want;   // [m, n]
  std::vector<double> scale;  // sum |x w| per output, for the tolerance
};

class cuda_gemv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    unsetenv("TROUPE_GEMV");
    ops_ = std::make_unique<cuda_ops>(0, 64);
  }
  // Uploads random x [m, k] and w [n, k] of `type`; reads them back rounded
  // and computes the reference.
  problem make(dtype type, int64_t m, int64_t n, int64_t k, uint32_t seed, tensor& x, tensor& w) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    problem p{m, n, k, std::vector<float>(m * k), std::vector<float>(n * k), {}, {}};
    for (float& v : p.x) v = d(rng);
    for (float& v : p.w) v = d(rng) * 0.1f;
    x = ops_->alloc(type, m, k);
    w = ops_->alloc(type, n, k);
    ops_->upload(p.x.data(), x);
    ops_->upload(p.w.data(), w);
    ops_->download(x, p.x.data());
    ops_->download(w, p.w.data());
    p.want.assign(m * n, 0.0);
    p.scale.assign(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t e = 0; e < k; ++e) {
          const double prod = double(p.x[i * k + e]) * p.w[j * k + e];
          p.want[i * n + j] += prod;
          p.scale[i * n + j] += std::fabs(prod);
        }
    ops_->synchronize();  // gemv() below runs on the default stream
    return p;
  }
  // out [m, n] of out_type against p; `what` names the case.
  void check(const problem& p, const tensor& out, dtype in_type, const std::string& what) {
    std::vector<float> got(out.rows * out.cols);
    ops_->synchronize();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    ops_->download(out, got.data());
    // Rounding of the result to the output type, plus float32 accumulation
    // in another order than the reference's.
    const double round = out.type == dtype::f32 ? 0 : in_type == dtype::bf16 ? 1.0 / 256 : 1.0 / 2048;
    for (int64_t i = 0; i < p.m * p.n; ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << what << ": output " << i << " not written";
      ASSERT_NEAR(got[i], p.want[i], round * std::fabs(p.want[i]) + 2e-6 * p.scale[i] + 1e-7)
          << what << ": output " << i;
    }
    // Rows past m are left alone (the output tensor has a spare row).
    for (int64_t i = p.m * p.n; i < static_cast<int64_t>(got.size()); ++i) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": wrote past the last row";
    }
  }
  // linear() with tuning allowed, as in the runner's warm-up.
  void tuned_linear(const tensor& x, const tensor& w, const tensor& out) {
    ops_->allow_tuning(true);
    ops_->linear(x, w, nullptr, out);
    ops_->allow_tuning(false);
  }
  // m tokens' positions ((7 i + 3) % max_pos) and K/V slots ((11 i + 5) %
  // num_slots: distinct for 8 tokens and 40 slots; token 1's is -1), on
  // the host and uploaded.
  struct token_places {
    std::vector<int32_t> pos, slots;
    int32_t *dpos = nullptr, *dslots = nullptr;
  };
  token_places places(int64_t m, int64_t max_pos, int64_t num_slots) {
    token_places t{std::vector<int32_t>(m), std::vector<int32_t>(m)};
    for (int64_t i = 0; i < m; ++i) {
      t.pos[i] = static_cast<int32_t>((i * 7 + 3) % max_pos);
      t.slots[i] = i == 1 ? -1 : static_cast<int32_t>((i * 11 + 5) % num_slots);
    }
    t.dpos = ops_->alloc_ints(m);
    t.dslots = ops_->alloc_ints(m);
    ops_->upload_ints(t.pos.data(), t.dpos, m);
    ops_->upload_ints(t.slots.data(), t.dslots, m);
    return t;
  }
  // got equal to want bit for bit, NaN (unwritten) where want is.
  void expect_same_bits(const tensor& want_t, const tensor& got_t, const std::string& what) {
    std::vector<float> want(want_t.rows * want_t.cols), got(want.size());
    ops_->download(want_t, want.data());
    ops_->download(got_t, got.data());
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << what << ": element " << i << " written";
      } else {
        ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
      }
    }
  }
  tensor poisoned(dtype type, int64_t rows, int64_t cols) {
    tensor t = ops_->alloc(type, rows, cols);
    const std::vector<float> nan(rows * cols, std::numeric_limits<float>::quiet_NaN());
    ops_->upload(nan.data(), t);
    ops_->synchronize();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // alloc's memset and the upload are done
    return t;
  }
  std::unique_ptr<cuda_ops> ops_;
};

cuda::element_type element_of(dtype t) {
  return t == dtype::bf16 ? cuda::element_type::bf16 : cuda::element_type::f16;
}

TEST_F(cuda_gemv, every_variant_matches_the_reference) {
  struct shape {
    int64_t n, k;
  };
  // k: one 16-byte load a lane and less than one warp stride (8, 24), not a
  // multiple of the stride (264, 1000, 4104); n: a single row, odd counts
  // (a two-row warp half empty), more rows than one block.
  const shape shapes[] = {{1, 8}, {5, 24}, {33, 264}, {67, 1000}, {130, 4104}};
  uint32_t seed = 1;
  for (dtype type : {dtype::bf16, dtype::f16}) {
    for (const shape& s : shapes) {
      for (int64_t m = 1; m <= cuda::gemv_max_rows; ++m) {
        tensor x, w;
        const problem p = make(type, m, s.n, s.k, seed++, x, w);
        ASSERT_TRUE(cuda::gemv_supported(element_of(type), m, s.k, x.data, w.data));
        for (bool out_f32 : {false, true}) {
          for (int v = 0; v < cuda::gemv_num_variants(); ++v) {
            const tensor out = poisoned(out_f32 ? dtype::f32 : type, m + 1, s.n);
            cuda::gemv(element_of(type), out_f32, v, x.data, m, w.data, s.n, s.k, out.data, nullptr);
            check(p, out, type,
                  std::string(type == dtype::bf16 ? "bf16" : "f16") + (out_f32 ? " -> f32 " : " ") +
                      cuda::gemv_variant_name(v) + " m=" + std::to_string(m) + " n=" +
                      std::to_string(s.n) + " k=" + std::to_string(s.k));
          }
        }
      }
    }
  }
}

// The GLU form: close to the reference silu(round(g)) * round(u), and bit
// for bit the plain GEMV followed by silu_and_mul.
TEST_F(cuda_gemv, glu_variants_match_gemv_then_silu_and_mul) {
  struct shape {
    int64_t d, k;
  };
  const shape shapes[] = {{1, 8}, {37, 264}, {130, 1000}};
  uint32_t seed = 900;
  for (dtype type : {dtype::bf16, dtype::f16}) {
    const double round = type == dtype::bf16 ? 1.0 / 128 : 1.0 / 1024;
    for (const shape& s : shapes) {
      for (int64_t m = 1; m <= cuda::gemv_max_rows; ++m) {
        tensor x, w;
        const problem p = make(type, m, 2 * s.d, s.k, seed++, x, w);
        for (int v = 0; v < cuda::gemv_glu_num_variants(); ++v) {
          const std::string what = std::string(type == dtype::bf16 ? "bf16 " : "f16 ") +
                                   cuda::gemv_glu_variant_name(v) + " m=" + std::to_string(m) +
                                   " d=" + std::to_string(s.d) + " k=" + std::to_string(s.k);
          // The two steps, with the GEMV variant that sums in the same order.
          const int plain = cuda::gemv_variant_of_glu(v);
          ASSERT_GE(plain, 0) << what;
          const tensor gate_up = poisoned(type, m, 2 * s.d);
          const tensor two_step = poisoned(type, m, s.d);
          cuda::gemv(element_of(type), false, plain, x.data, m, w.data, 2 * s.d, s.k, gate_up.data,
                     nullptr);
          cuda::silu_and_mul(element_of(type), gate_up.data, m, s.d, two_step.data, nullptr);
          std::vector<float> want(m * s.d);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          ops_->download(two_step, want.data());
          const tensor out = poisoned(type, m + 1, s.d);
          cuda::gemv_glu(element_of(type), v, x.data, m, w.data, s.d, s.k, out.data, nullptr);
          std::vector<float> got(out.rows * out.cols);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          ops_->download(out, got.data());
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < s.d; ++j) {
              const double g = p.want[i * 2 * s.d + j], u = p.want[i * 2 * s.d + s.d + j];
              const double ref = g / (1.0 + std::exp(-g)) * u;
              // g and u rounded (silu' <= 1.1), then the result.
              const double tol = round * (std::fabs(ref) + 2.5 * std::fabs(u) * (std::fabs(g) + 0.3)) +
                                 4e-6 * (p.scale[i * 2 * s.d + j] + p.scale[i * 2 * s.d + s.d + j]) + 1e-6;
              ASSERT_NEAR(got[i * s.d + j], ref, tol) << what << ": output " << i << "," << j;
              ASSERT_EQ(got[i * s.d + j], want[i * s.d + j]) << what << ": not the two-step result";
            }
          for (int64_t j = 0; j < s.d; ++j) ASSERT_TRUE(std::isnan(got[m * s.d + j])) << what;
        }
      }
    }
  }
}

// The q/k/v product with qkv_rope_cache in its epilogue: bit for bit the
// GEMV (every variant), add_bias and qkv_rope_cache kernels it replaces
// (each checked against the CPU elsewhere), for the fixtures' head_dims and
// Llama's, 1-8 tokens, with and without a bias, one token's slot -1.
TEST_F(cuda_gemv, qkv_rope_epilogue_equals_the_separate_kernels) {
  struct shape {
    int64_t q_heads, kv_heads, head_dim, k;
  };
  const shape shapes[] = {{4, 2, 16, 64}, {3, 1, 48, 136}, {4, 1, 128, 512}};
  uint32_t seed = 6000;
  for (dtype type : {dtype::bf16, dtype::f16}) {
    for (const shape& s : shapes) {
      const int64_t rows = (s.q_heads + 2 * s.kv_heads) * s.head_dim, half = s.head_dim / 2;
      const int64_t kv_cols = s.kv_heads * s.head_dim, num_slots = 40, max_pos = 50;
      for (int64_t m = 1; m <= cuda::gemv_max_rows; ++m) {
        tensor x, w;
        make(type, m, rows, s.k, seed++, x, w);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        std::vector<float> hbias(rows), hcos(max_pos * half), hsin(max_pos * half);
        for (float& v : hbias) v = d(rng);
        for (float& v : hcos) v = d(rng);
        for (float& v : hsin) v = d(rng);
        const tensor bias = ops_->alloc(type, rows, 1);
        ops_->upload(hbias.data(), bias);
        const tensor cos_t = ops_->alloc(dtype::f32, max_pos, half);
        const tensor sin_t = ops_->alloc(dtype::f32, max_pos, half);
        ops_->upload(hcos.data(), cos_t);
        ops_->upload(hsin.data(), sin_t);
        const token_places at = places(m, max_pos, num_slots);
        int32_t *dpos = at.dpos, *dslots = at.dslots;
        for (bool with_bias : {false, true}) {
          for (int v = 0; v < cuda::gemv_glu_num_variants(); ++v) {
            const std::string what = std::string(type == dtype::bf16 ? "bf16 " : "f16 ") +
                                     cuda::gemv_glu_variant_name(v) + (with_bias ? " bias" : "") +
                                     " m=" + std::to_string(m) + " d=" + std::to_string(s.head_dim);
            // The separate kernels, with the GEMV variant that sums in the
            // same order.
            const int plain = cuda::gemv_variant_of_glu(v);
            ASSERT_GE(plain, 0) << what;
            const tensor qkv = poisoned(type, m, rows);
            const tensor q_want = poisoned(type, m, s.q_heads * s.head_dim);
            const tensor k_want = poisoned(type, num_slots, kv_cols);
            const tensor v_want = poisoned(type, num_slots, kv_cols);
            cuda::gemv(element_of(type), false, plain, x.data, m, w.data, rows, s.k, qkv.data, nullptr);
            if (with_bias) cuda::add_bias(element_of(type), qkv.data, bias.data, m, rows, nullptr);
            cuda::qkv_rope_cache(element_of(type), qkv.data, m, s.q_heads, s.kv_heads, s.head_dim,
                                 nullptr, nullptr, 0.0f, dpos, cos_t.f32(), sin_t.f32(), dslots,
                                 q_want.data, cuda::kv_dest{k_want.data, v_want.data}, nullptr);
            // One kernel.
            const tensor q_got = poisoned(type, m, s.q_heads * s.head_dim);
            const tensor k_got = poisoned(type, num_slots, kv_cols);
            const tensor v_got = poisoned(type, num_slots, kv_cols);
            ASSERT_TRUE(cuda::gemv_rope_supported(element_of(type), m, s.k, s.head_dim, x.data, w.data));
            cuda::gemv_qkv_rope_cache(element_of(type), v, x.data, m, w.data,
                                      with_bias ? bias.data : nullptr, s.k, s.q_heads, s.kv_heads,
                                      s.head_dim, dpos, cos_t.f32(), sin_t.f32(), dslots,
                                      q_got.data, cuda::kv_dest{k_got.data, v_got.data}, nullptr);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
            for (auto [want_t, got_t, name] : {std::tuple{q_want, q_got, "q"}, {k_want, k_got, "k cache"},
                                               {v_want, v_got, "v cache"}}) {
              expect_same_bits(want_t, got_t, what + ": " + name);
            }
          }
        }
      }
    }
  }
}

// cuda_ops::qkv_linear_rope_cache: decode shapes are tuned as the product
// with its RoPE epilogue (the GEMV-GLU table's pair variants against cuBLAS
// then qkv_rope_cache), and the result is the reference's rotated product,
// bit for bit the separate GEMV (same order of sums) and qkv_rope_cache
// when a GEMV was chosen.
TEST_F(cuda_gemv, qkv_linear_rope_cache_is_tuned_with_its_epilogue) {
  const int64_t q_heads = 4, kv_heads = 2, head_dim = 64, k = 512, half = head_dim / 2;
  const int64_t n = (q_heads + 2 * kv_heads) * head_dim, kv_cols = kv_heads * head_dim;
  const int64_t num_slots = 40, max_pos = 30;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> hcos(max_pos * half), hsin(max_pos * half);
  for (float& v : hcos) v = d(rng);
  for (float& v : hsin) v = d(rng);
  const rope_tables tables{ops_->alloc(dtype::f32, max_pos, half), ops_->alloc(dtype::f32, max_pos, half)};
  ops_->upload(hcos.data(), tables.cos);
  ops_->upload(hsin.data(), tables.sin);
  const cuda_ops::rope_heads heads{q_heads, kv_heads, head_dim};
  for (int64_t m : {1, 2, 8}) {
    const std::string what = "m=" + std::to_string(m);
    tensor x, w;
    const problem p = make(dtype::bf16, m, n, k, 4000 + m, x, w);
    const token_places at = places(m, max_pos, num_slots);
    const std::vector<int32_t>&pos = at.pos, &slots = at.slots;
    int32_t *dpos = at.dpos, *dslots = at.dslots;
    const tensor qkv = poisoned(dtype::bf16, m, n);
    const tensor q = poisoned(dtype::bf16, m, q_heads * head_dim);
    const kv_cache_layer cache{poisoned(dtype::bf16, num_slots, kv_cols), poisoned(dtype::bf16, num_slots, kv_cols)};
    ops_->allow_tuning(true);
    ops_->qkv_linear_rope_cache(x, w, nullptr, qkv, q_heads, kv_heads, head_dim, nullptr, nullptr,
                                0.0f, dpos, tables, dslots, cache, q, nullptr);
    ops_->allow_tuning(false);
    ops_->synchronize();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<float> got_q(q.rows * q.cols), got_k(num_slots * kv_cols), got_v(got_k.size());
    ops_->download(q, got_q.data());
    ops_->download(cache.k, got_k.data());
    ops_->download(cache.v, got_v.data());
    // The reference: each head's pair (j, j + half) of the product, each
    // rounded to bf16 (1/256 relative), rotated for q and k heads.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t head = 0; head < q_heads + 2 * kv_heads; ++head) {
        const bool is_q = head < q_heads, is_v = head >= q_heads + kv_heads;
        if (!is_q && slots[i] < 0) continue;
        for (int64_t j = 0; j < half; ++j) {
          const int64_t r1 = i * n + head * head_dim + j, r2 = r1 + half;
          const double x1 = p.want[r1], x2 = p.want[r2];
          const double c = is_v ? 1.0 : hcos[pos[i] * half + j], sn = is_v ? 0.0 : hsin[pos[i] * half + j];
          const double y1 = x1 * c - x2 * sn, y2 = x2 * c + x1 * sn;
          const double tol = (std::fabs(x1) + std::fabs(x2) + std::fabs(y1) + std::fabs(y2)) / 256 +
                             2e-6 * (p.scale[r1] + p.scale[r2]) + 1e-6;
          const float* dst = is_q ? &got_q[(i * q_heads + head) * head_dim]
                             : is_v ? &got_v[slots[i] * kv_cols + (head - q_heads - kv_heads) * head_dim]
                                    : &got_k[slots[i] * kv_cols + (head - q_heads) * head_dim];
          ASSERT_NEAR(dst[j], y1, tol) << what << " head " << head << " j " << j;
          ASSERT_NEAR(dst[j + half], y2, tol) << what << " head " << head << " j " << j + half;
        }
      }
    }
    const std::string report = ops_->tuning_report();
    EXPECT_NE(report.find(std::to_string(m) + "x512 -> 512 (rope)"), std::string::npos) << report;
    EXPECT_EQ(report.find("differs"), std::string::npos) << report;
    // A GEMV chosen: bit for bit the GEMV with the same order of sums, then
    // qkv_rope_cache.
    const std::string kernel = ops_->product_kernel(x, w, qkv, false, &heads);
    int choice = -1;
    for (int v = 0; v < cuda::gemv_glu_num_variants(); ++v) {
      if (kernel == cuda::gemv_glu_variant_name(v)) choice = v;
    }
    if (choice < 0) {
      EXPECT_EQ(kernel, "cuBLAS") << what;
      continue;
    }
    const tensor qkv2 = poisoned(dtype::bf16, m, n);
    const tensor q2 = poisoned(dtype::bf16, m, q_heads * head_dim);
    const kv_cache_layer cache2{poisoned(dtype::bf16, num_slots, kv_cols), poisoned(dtype::bf16, num_slots, kv_cols)};
    cuda::gemv(cuda::element_type::bf16, false, cuda::gemv_variant_of_glu(choice), x.data, m, w.data,
               n, k, qkv2.data, nullptr);
    cuda::qkv_rope_cache(cuda::element_type::bf16, qkv2.data, m, q_heads, kv_heads, head_dim, nullptr,
                         nullptr, 0.0f, dpos, tables.cos.f32(), tables.sin.f32(), dslots, q2.data,
                         cuda::kv_dest{cache2.k.data, cache2.v.data}, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    for (auto [got_t, want_t, name] : {std::tuple{q, q2, "q"}, {cache.k, cache2.k, "k cache"},
                                        {cache.v, cache2.v, "v cache"}}) {
      expect_same_bits(want_t, got_t, what + " " + kernel + ": " + name);
    }
  }
}

TEST_F(cuda_gemv, supported_only_where_it_can_run) {
  tensor x = ops_->alloc(dtype::bf16, 9, 64), w = ops_->alloc(dtype::bf16, 4, 64);
  EXPECT_TRUE(cuda::gemv_supported(cuda::element_type::bf16, 8, 64, x.data, w.data));
  EXPECT_FALSE(cuda::gemv_supported(cuda::element_type::bf16, 9, 64, x.data, w.data));
  EXPECT_FALSE(cuda::gemv_supported(cuda::element_type::bf16, 0, 64, x.data, w.data));
  EXPECT_FALSE(cuda::gemv_supported(cuda::element_type::bf16, 1, 60, x.data, w.data));
  EXPECT_FALSE(cuda::gemv_supported(cuda::element_type::f32, 1, 64, x.data, w.data));
  const char* misaligned = static_cast<const char*>(x.data) + 2;
  EXPECT_FALSE(cuda::gemv_supported(cuda::element_type::bf16, 1, 64, misaligned, w.data));
}

// cuda_ops::linear: shapes of up to 8 rows are timed at warm-up (GEMV
// variants against cuBLAS) and then run with the choice; larger ones and
// untuned ones with cuBLAS. Every path matches the reference, and a tuned
// product is the same bit for bit on every later call.
TEST_F(cuda_gemv, linear_tunes_decode_shapes_and_matches_the_reference) {
  const int64_t n = 300, k = 512;
  const std::vector<int64_t> rows = {1, 2, 4, 8, 16};
  for (int64_t m : rows) {
    tensor x, w;
    const problem p = make(dtype::bf16, m, n, k, 100 + m, x, w);
    const tensor out = poisoned(dtype::bf16, m + 1, n);
    tuned_linear(x, w, out);
    check(p, out, dtype::bf16, "tuned linear m=" + std::to_string(m));
    std::vector<float> first(out.rows * out.cols), again(first.size());
    ops_->download(out, first.data());
    const tensor out2 = poisoned(dtype::bf16, m + 1, n);
    ops_->linear(x, w, nullptr, out2);
    ops_->download(out2, again.data());
    for (size_t i = 0; i < static_cast<size_t>(m * n); ++i) {
      ASSERT_EQ(first[i], again[i]) << "m=" << m << ": the tuned choice changed between calls";
    }
    // float32 logits from bf16 (the lm_head's product).
    const tensor logits = poisoned(dtype::f32, m + 1, n);
    tuned_linear(x, w, logits);
    check(p, logits, dtype::bf16, "tuned linear to float32, m=" + std::to_string(m));
  }
  const std::string report = ops_->tuning_report();
  EXPECT_EQ(report.find("differs"), std::string::npos) << "a variant disagreed with cuBLAS:\n" << report;
  // Four row counts up to 8, each with a bf16 and a float32 output: 8 shapes.
  EXPECT_NE(report.find("decode GEMM tuning: 8 shapes timed"), std::string::npos) << report;
  EXPECT_EQ(report.find("16x512"), std::string::npos) << "16 rows tuned:\n" << report;
  // The variants that split k over warps are timed up to
  // gemv_split_max_rows rows only.
  for (size_t at = report.find('\n'); at != std::string::npos;) {
    const size_t end = report.find('\n', at + 1);
    const std::string line = report.substr(at + 1, end == std::string::npos ? end : end - at - 1);
    at = end;
    const int64_t rows = std::stoll(line.substr(line.find_first_not_of(' ')));
    int splits = 0;
    for (int v = 0; v < cuda::gemv_num_variants(); ++v) {
      if (cuda::gemv_variant_split(v) > 1 && line.find(cuda::gemv_variant_name(v)) != std::string::npos) ++splits;
    }
    EXPECT_EQ(splits > 0, rows <= cuda::gemv_split_max_rows) << line;
  }
}

// gated_linear: up to 8 rows tuned (GEMV-GLU variants against cuBLAS and
// silu_and_mul), more rows in two steps; all equal to the reference.
TEST_F(cuda_gemv, gated_linear_matches_the_reference) {
  const int64_t d = 150, k = 512;
  for (int64_t m : {1, 3, 8, 16}) {
    tensor x, w;
    const problem p = make(dtype::bf16, m, 2 * d, k, 700 + m, x, w);
    const tensor gate_up = poisoned(dtype::bf16, m, 2 * d);
    const tensor out = poisoned(dtype::bf16, m + 1, d);
    ops_->allow_tuning(true);
    const tensor out_m{out.data, out.type, m, d};
    ops_->gated_linear(x, w, gate_up, out_m, nullptr);
    ops_->allow_tuning(false);
    std::vector<float> got(out.rows * out.cols);
    ops_->synchronize();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ops_->download(out, got.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < d; ++j) {
        const double g = p.want[i * 2 * d + j], u = p.want[i * 2 * d + d + j];
        const double ref = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(got[i * d + j], ref, (std::fabs(ref) + 2.5 * std::fabs(u) * (std::fabs(g) + 0.3)) / 64 + 1e-3)
            << "m=" << m << " output " << i << "," << j;
      }
    for (int64_t j = 0; j < d; ++j) ASSERT_TRUE(std::isnan(got[m * d + j])) << "wrote past row m";
    const std::string kernel = ops_->product_kernel(x, w, out_m, /*gated=*/true);
    if (m > 8) {
      EXPECT_EQ(kernel, "cuBLAS");
    }
  }
  EXPECT_NE(ops_->tuning_report().find("(gated)"), std::string::npos) << ops_->tuning_report();
}

// keep_rows_consistent (batch invariance): every row of a product of any
// row count (1-8 in one launch, more in 8-row chunks) equals, bit for bit,
// the product of that row alone (linear to bf16 and to float32,
// gated_linear), tuned or not, and no product runs on cuBLAS or a split
// variant.
TEST_F(cuda_gemv, consistent_rows_sum_every_row_count_alike) {
  const int64_t n = 300, d = 150, k = 512, rows = 27;
  const std::vector<int64_t> counts = {2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 27};
  for (const bool tuned : {true, false}) {
    ops_ = std::make_unique<cuda_ops>(0, 64);
    ops_->keep_rows_consistent(true);
    tensor x, w, wg;
    make(dtype::bf16, rows, n, k, 31, x, w);
    make(dtype::bf16, rows, 2 * d, k, 32, x, wg);  // x: the second call's
    const auto run = [&](int what, int64_t first, int64_t m) {
      const tensor xm = x.row_slice(first, m);
      const int64_t cols = what == 2 ? d : n;
      const tensor out = poisoned(what == 1 ? dtype::f32 : dtype::bf16, m, cols);
      ops_->allow_tuning(tuned);
      if (what == 2) {
        ops_->gated_linear(xm, wg, poisoned(dtype::bf16, m, 2 * d), out, nullptr);
      } else {
        ops_->linear(xm, w, nullptr, out);
      }
      ops_->allow_tuning(false);
      std::vector<float> got(static_cast<size_t>(m * cols));
      ops_->synchronize();
      ops_->download(out, got.data());
      const std::string kernel = ops_->product_kernel(xm, what == 2 ? wg : w, out, what == 2);
      EXPECT_EQ(kernel.find("cuBLAS"), std::string::npos) << m << " rows: " << kernel;
      for (const char* split : {" s2", " s4", " s8"}) {
        EXPECT_EQ(kernel.find(split), std::string::npos) << m << " rows: " << kernel;
      }
      if (m > cuda::gemv_max_rows) {
        EXPECT_NE(kernel.find("8-row chunks"), std::string::npos) << m << " rows: " << kernel;
      }
      return got;
    };
    for (int what = 0; what < 3; ++what) {
      const int64_t cols = what == 2 ? d : n;
      std::vector<std::vector<float>> alone;
      for (int64_t i = 0; i < rows; ++i) alone.push_back(run(what, i, 1));
      for (int64_t m : counts) {
        // Rows rows - m .. rows - 1: the chunks start off row 0 too.
        const int64_t first = rows - m;
        const std::vector<float> got = run(what, first, m);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            ASSERT_EQ(got[i * cols + j], alone[first + i][j])
                << (tuned ? "tuned" : "untuned") << " product " << what << ", m=" << m
                << ": row " << first + i << " output " << j;
          }
      }
    }
    if (tuned) {
      const std::string report = ops_->tuning_report();
      EXPECT_NE(report.find("batch invariant"), std::string::npos) << report;
    } else {
      EXPECT_EQ(ops_->tuning_report(), "");
    }
  }
}

TEST_F(cuda_gemv, troupe_gemv_forces_a_variant_or_turns_it_off) {
  const std::string last = "v" + std::to_string(cuda::gemv_num_variants() - 1);  // the last variant
  for (const char* mode : {"v2", last.c_str(), "off"}) {
    setenv("TROUPE_GEMV", mode, 1);
    auto ops = std::make_unique<cuda_ops>(0, 64);
    ops_.swap(ops);
    tensor x, w;
    const problem p = make(dtype::f16, 3, 70, 136, 7, x, w);
    const tensor out = poisoned(dtype::f16, 4, 70);
    tuned_linear(x, w, out);
    check(p, out, dtype::f16, std::string("TROUPE_GEMV=") + mode);
    EXPECT_EQ(ops_->tuning_report(), "") << "TROUPE_GEMV=" << mode << " still tuned";
    const std::string want = std::string(mode) == "off" ? "cuBLAS"
                             : std::string(mode) == "v2" ? "gemv u2 r2"
                                                         : cuda::gemv_variant_name(cuda::gemv_num_variants() - 1);
    EXPECT_EQ(ops_->product_kernel(x, w, out), want);
    ops_.swap(ops);
  }
  unsetenv("TROUPE_GEMV");
}

// The tuner's check of each variant against cuBLAS: with the GEMV runs
// made to leave their last output row unwritten, every variant is
// rejected and the product stays with cuBLAS.
TEST_F(cuda_gemv, tuning_rejects_a_variant_that_misses_outputs) {
  setenv("TROUPE_DEBUG_GEMV_DROP_LAST", "1", 1);
  tensor x, w;
  const problem p = make(dtype::bf16, 2, 300, 512, 9, x, w);
  const tensor out = poisoned(dtype::bf16, 3, 300);
  tuned_linear(x, w, out);
  unsetenv("TROUPE_DEBUG_GEMV_DROP_LAST");
  check(p, out, dtype::bf16, "after rejected variants");
  const std::string report = ops_->tuning_report();
  size_t rejected = 0;
  for (size_t at = report.find("differs from cuBLAS"); at != std::string::npos;
       at = report.find("differs from cuBLAS", at + 1)) {
    ++rejected;
  }
  EXPECT_EQ(rejected, static_cast<size_t>(cuda::gemv_num_variants())) << report;
  EXPECT_EQ(ops_->product_kernel(x, w, out), "cuBLAS");
}

}  // namespace
}  // namespace troupe
