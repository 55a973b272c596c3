// The decode GEMV with the LoRA deltas inside it (kernels/cuda/gemm/gemv.h,
// gemv_lora): the plain product against a double-precision reference of
// x w^T plus each token's own adapter's B_s u (every variant, 1-8 tokens
// with slot -1 among them, one to three modules, ranks 16, 5 and 40, outputs
// in the input type and in float32); the GLU and RoPE forms bit for bit
// the plain product with the same deltas followed by silu_and_mul, or by
// add_bias and qkv_rope_cache. Skipped where no CUDA device is visible
// (the build machines); run on the GPU host by scripts/lora-bench.sh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/rope/rope.h"
#include "tests/kernels/cuda_lora_fixture.h"

namespace troupe {
namespace {

cuda::element_type element_of(dtype t) {
  return t == dtype::bf16 ? cuda::element_type::bf16 : cuda::element_type::f16;
}

class cuda_gemv_lora : public cuda_lora_fixture {
 protected:
  cuda_gemv_lora() : cuda_lora_fixture(8, 77) {}

  // Every slot's lora_B for modules of `rows`, u (float32, a stride wider
  // than the modules' columns) and the tokens' slots (token i:
  // ((i + shift) % (slots + 1)) - 1, so -1 is among them from two tokens).
  struct deltas {
    std::vector<int64_t> rows;
    int64_t slots = 0, rank = 0, u_stride = 0;
    std::vector<std::vector<float>> b;  // host, [rows_m, slots * rank]
    std::vector<float> u;               // host, [m, u_stride]
    std::vector<int32_t> token_slots;
    std::vector<tensor> b_dev;
    cuda::gemv_lora arg;
  };
  deltas make_deltas(dtype type, int64_t m, const std::vector<int64_t>& rows, int64_t slots, int64_t rank,
                     int64_t shift) {
    deltas d;
    d.rows = rows;
    d.slots = slots;
    d.rank = rank;
    d.u_stride = static_cast<int64_t>(rows.size()) * rank + 3;
    d.b.resize(rows.size());
    for (size_t c = 0; c < rows.size(); ++c) {
      d.b_dev.push_back(random_tensor(type, rows[c], slots * rank, 0.1f, d.b[c]));
      d.arg.b[c] = d.b_dev.back().data;
      d.arg.rows[c] = rows[c];
    }
    const tensor u = random_tensor(dtype::f32, m, d.u_stride, 1.0f, d.u);
    for (int64_t i = 0; i < m; ++i) {
      d.token_slots.push_back(static_cast<int32_t>((i + shift) % (slots + 1)) - 1);
    }
    d.arg.count = static_cast<int>(rows.size());
    d.arg.b_stride = slots * rank;
    d.arg.rank = rank;
    d.arg.u = u.f32();
    d.arg.u_stride = d.u_stride;
    d.arg.token_slots = ints(d.token_slots);
    ops_->synchronize();  // the kernels below run on the default stream
    return d;
  }
  // Token i's delta for weight row j (of the modules side by side).
  static double delta(const deltas& d, int64_t i, int64_t j) {
    const int32_t s = d.token_slots[i];
    if (s < 0) return 0.0;
    size_t c = 0;
    while (j >= d.rows[c]) j -= d.rows[c++];
    double sum = 0;
    for (int64_t e = 0; e < d.rank; ++e) {
      sum += double(d.b[c][j * d.slots * d.rank + s * d.rank + e]) * d.u[i * d.u_stride + c * d.rank + e];
    }
    return sum;
  }
  tensor poisoned(dtype type, int64_t rows, int64_t cols) {
    tensor t = ops_->alloc(type, rows, cols);
    const std::vector<float> nan(static_cast<size_t>(rows * cols), std::numeric_limits<float>::quiet_NaN());
    ops_->upload(nan.data(), t);
    ops_->synchronize();
    return t;
  }
  std::vector<float> get(const tensor& t) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
    ops_->download(t, v.data());
    return v;
  }
  // Bit for bit (NaN where nothing was written in both).
  void expect_same(const tensor& want, const tensor& got, const std::string& what) {
    const std::vector<float> a = get(want), b = get(got);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
  }
};

std::string type_name(dtype t) { return t == dtype::bf16 ? "bf16" : "f16"; }

TEST_F(cuda_gemv_lora, every_variant_adds_each_tokens_delta) {
  struct shape {
    std::vector<int64_t> rows;
    int64_t k;
  };
  // One module; three (q/k/v-like) with a width that is not a multiple of
  // a warp's stride.
  const shape shapes[] = {{{67}, 264}, {{40, 24, 24}, 1000}};
  for (dtype type : {dtype::bf16, dtype::f16}) {
    const double round = type == dtype::bf16 ? 1.0 / 256 : 1.0 / 2048;
    for (const shape& s : shapes) {
      int64_t n = 0;
      for (int64_t r : s.rows) n += r;
      for (int64_t rank : {16, 5, 40}) {  // (40: lanes walk the rank twice)
        for (int64_t m = 1; m <= cuda::gemv_max_rows; ++m) {
          std::vector<float> hx, hw;
          const tensor x = random_tensor(type, m, s.k, 1.0f, hx), w = random_tensor(type, n, s.k, 0.1f, hw);
          const deltas d = make_deltas(type, m, s.rows, 3, rank, m);
          for (bool out_f32 : {false, true}) {
            for (int v = 0; v < cuda::gemv_num_variants(); ++v) {
              const std::string what = type_name(type) + (out_f32 ? " -> f32 " : " ") +
                                       cuda::gemv_variant_name(v) + " rank " + std::to_string(rank) +
                                       " m=" + std::to_string(m) + " n=" + std::to_string(n);
              const tensor out = poisoned(out_f32 ? dtype::f32 : type, m + 1, n);
              cuda::gemv(element_of(type), out_f32, v, x.data, m, w.data, n, s.k, out.data, nullptr, &d.arg);
              const std::vector<float> got = get(out);
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                  double want = delta(d, i, j), scale = std::fabs(want);
                  for (int64_t e = 0; e < s.k; ++e) {
                    want += double(hx[i * s.k + e]) * hw[j * s.k + e];
                    scale += std::fabs(double(hx[i * s.k + e]) * hw[j * s.k + e]);
                  }
                  const double tol = (out_f32 ? 0.0 : round) * std::fabs(want) + 2e-6 * scale + 1e-6;
                  ASSERT_NEAR(got[i * n + j], want, tol) << what << ": output " << i << "," << j;
                }
              }
              for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isnan(got[m * n + j])) << what << ": past m";
            }
          }
        }
      }
    }
  }
}

TEST_F(cuda_gemv_lora, glu_form_is_the_plain_product_then_silu_and_mul) {
  const int64_t d_out = 37, k = 264, rank = 16;
  for (dtype type : {dtype::bf16, dtype::f16}) {
    for (int64_t m : {1, 3, 8}) {
      std::vector<float> hx, hw;
      const tensor x = random_tensor(type, m, k, 1.0f, hx), w = random_tensor(type, 2 * d_out, k, 0.1f, hw);
      const deltas d = make_deltas(type, m, {d_out, d_out}, 4, rank, 0);
      for (int v = 0; v < cuda::gemv_glu_num_variants(); ++v) {
        const std::string what = type_name(type) + " " + cuda::gemv_glu_variant_name(v) + " m=" + std::to_string(m);
        const tensor gate_up = poisoned(type, m, 2 * d_out), want = poisoned(type, m + 1, d_out);
        cuda::gemv(element_of(type), false, cuda::gemv_variant_of_glu(v), x.data, m, w.data, 2 * d_out, k,
                   gate_up.data, nullptr, &d.arg);
        cuda::silu_and_mul(element_of(type), gate_up.data, m, d_out, want.data, nullptr);
        const tensor got = poisoned(type, m + 1, d_out);
        cuda::gemv_glu(element_of(type), v, x.data, m, w.data, d_out, k, got.data, nullptr, &d.arg);
        expect_same(want, got, what);
      }
    }
  }
}

TEST_F(cuda_gemv_lora, rope_form_is_the_plain_product_then_bias_and_qkv_rope_cache) {
  const int64_t q_heads = 4, kv_heads = 2, head_dim = 16, k = 64, rank = 8, max_pos = 20, num_slots = 24;
  const int64_t q_cols = q_heads * head_dim, kv_cols = kv_heads * head_dim, rows = q_cols + 2 * kv_cols;
  const int64_t half = head_dim / 2;
  for (dtype type : {dtype::bf16, dtype::f16}) {
    for (int64_t m : {1, 2, 8}) {
      std::vector<float> hx, hw, hb, hc, hs;
      const tensor x = random_tensor(type, m, k, 1.0f, hx), w = random_tensor(type, rows, k, 0.1f, hw);
      const tensor bias = random_tensor(type, rows, 1, 1.0f, hb);
      const tensor cos_t = random_tensor(dtype::f32, max_pos, half, 1.0f, hc);
      const tensor sin_t = random_tensor(dtype::f32, max_pos, half, 1.0f, hs);
      std::vector<int32_t> pos, kv_slots;
      for (int64_t i = 0; i < m; ++i) {
        pos.push_back(static_cast<int32_t>((5 * i + 2) % max_pos));
        kv_slots.push_back(i == 1 ? -1 : static_cast<int32_t>(3 * i));
      }
      int32_t *dpos = ints(pos), *dkv = ints(kv_slots);
      const deltas d = make_deltas(type, m, {q_cols, kv_cols, kv_cols}, 2, rank, 1);
      for (int v = 0; v < cuda::gemv_glu_num_variants(); ++v) {
        const std::string what = type_name(type) + " " + cuda::gemv_glu_variant_name(v) + " m=" + std::to_string(m);
        const tensor qkv = poisoned(type, m, rows), q_want = poisoned(type, m, q_cols);
        const tensor k_want = poisoned(type, num_slots, kv_cols), v_want = poisoned(type, num_slots, kv_cols);
        cuda::gemv(element_of(type), false, cuda::gemv_variant_of_glu(v), x.data, m, w.data, rows, k, qkv.data,
                   nullptr, &d.arg);
        cuda::add_bias(element_of(type), qkv.data, bias.data, m, rows, nullptr);
        cuda::qkv_rope_cache(element_of(type), qkv.data, m, q_heads, kv_heads, head_dim, nullptr, nullptr, 0.0f,
                             dpos, cos_t.f32(), sin_t.f32(), dkv, q_want.data, cuda::kv_dest{k_want.data, v_want.data},
                             nullptr);
        const tensor q_got = poisoned(type, m, q_cols);
        const tensor k_got = poisoned(type, num_slots, kv_cols), v_got = poisoned(type, num_slots, kv_cols);
        cuda::gemv_qkv_rope_cache(element_of(type), v, x.data, m, w.data, bias.data, k, q_heads, kv_heads,
                                  head_dim, dpos, cos_t.f32(), sin_t.f32(), dkv, q_got.data,
                                  cuda::kv_dest{k_got.data, v_got.data}, nullptr, &d.arg);
        expect_same(q_want, q_got, what + ": q");
        expect_same(k_want, k_got, what + ": k cache");
        expect_same(v_want, v_got, what + ": v cache");
      }
    }
  }
}

}  // namespace
}  // namespace troupe
