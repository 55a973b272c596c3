// CUDA kernels against the CPU reference ops on random inputs, float32 and
// bfloat16, over shapes that hit the edges (odd widths, one row, many rows,
// head dims 16/48/64/128). Outputs are poisoned with NaN first so elements a
// kernel fails to write show. Skipped where no CUDA device is visible (the
// build machines); run on the GPU host by scripts/gpu-check.sh. Paged
// attention has its own test: cuda_attention_test.cpp.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/rope/rope.h"
#include "model/rope.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/norm/norm.h"
#include "model/weights.h"

namespace troupe {
namespace {

using cuda::element_type;

class cuda_kernels : public ::testing::TestWithParam<element_type> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  bool bf16() const { return GetParam() == element_type::bf16; }
  size_t elem() const { return bf16() ? 2 : 4; }
  // Values as the device type sees them (bf16-rounded when bf16).
  std::vector<float> random(size_t n, float scale, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = bf16() ? bf16_to_f32(f32_to_bf16(d(rng))) : d(rng);
    return v;
  }
  void* upload(const std::vector<float>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * elem()), cudaSuccess);
    if (bf16()) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    } else {
      cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    }
    buffers_.push_back(p);
    return p;
  }
  void* poisoned(size_t n) {
    return upload(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  std::vector<float> download(const void* p, size_t n) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> v(n);
    if (bf16()) {
      std::vector<uint16_t> h(n);
      cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(h[i]);
    } else {
      cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost);
    }
    return v;
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                    const char* what) {
    ASSERT_EQ(got.size(), want.size());
    const float rel = bf16() ? 1.6e-2f : 2e-5f, abs = bf16() ? 1e-2f : 1e-5f;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << what << ": element " << i << " not written";
      ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " element " << i;
    }
  }
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
  }
  tensor host(std::vector<float>& v, int64_t rows, int64_t cols) {
    return tensor{v.data(), dtype::f32, rows, cols};
  }

  cpu_ops ref_;
  std::vector<void*> buffers_;
};

TEST_P(cuda_kernels, rms_norm_and_fused_add) {
  // Widths that are multiples of 16 bytes take the vectorized register path
  // (up to 4 vectors a thread: 8192 and 16384 fill it), the rest the scalar one.
  for (int64_t cols : {16, 48, 128, 896, 4096, 4097, 8192, 16384, 16390}) {
    for (int64_t rows : {1, 3, 257}) {
      auto x = random(rows * cols, 2.0f, 1), w = random(cols, 1.5f, 2), r = random(rows * cols, 2.0f, 3);
      std::vector<float> want(x.size());
      ref_.rms_norm(host(x, rows, cols), host(w, cols, 1), 1e-6f, host(want, rows, cols));
      void* out = poisoned(x.size());
      cuda::rms_norm(GetParam(), upload(x), upload(w), 1e-6f, rows, cols, out, nullptr);
      expect_close(download(out, x.size()), want, "rms_norm");
      // Fused residual add: the residual must come back as r + x too.
      std::vector<float> r_ref = r, want2(x.size());
      ref_.add_rms_norm(host(r_ref, rows, cols), host(x, rows, cols), host(w, cols, 1), 1e-6f,
                        host(want2, rows, cols));
      void* r_dev = upload(r);
      void* out2 = poisoned(x.size());
      cuda::add_rms_norm(GetParam(), r_dev, upload(x), upload(w), 1e-6f, rows, cols, out2, nullptr);
      expect_close(download(out2, x.size()), want2, "add_rms_norm out");
      expect_close(download(r_dev, x.size()), r_ref, "add_rms_norm residual");
    }
  }
}

TEST_P(cuda_kernels, head_rms_norm) {
  for (int64_t head_dim : {16, 48, 64, 128}) {
    const int64_t heads = 5, rows = 7, cols = heads * head_dim;
    auto x = random(rows * cols, 3.0f, 4), w = random(head_dim, 1.0f, 5);
    std::vector<float> want = x;
    ref_.head_rms_norm(host(want, rows, cols), head_dim, host(w, head_dim, 1), 1e-6f);
    void* x_dev = upload(x);
    cuda::head_rms_norm(GetParam(), x_dev, upload(w), 1e-6f, rows, cols, head_dim, nullptr);
    expect_close(download(x_dev, x.size()), want, "head_rms_norm");
  }
}

TEST_P(cuda_kernels, silu_and_mul_and_embedding) {
  for (int64_t d : {1, 48, 4864, 14336}) {
    const int64_t rows = 9;
    auto gu = random(rows * 2 * d, 4.0f, 6);
    std::vector<float> want(rows * d);
    ref_.silu_and_mul(host(gu, rows, 2 * d), host(want, rows, d));
    void* out = poisoned(want.size());
    cuda::silu_and_mul(GetParam(), upload(gu), rows, d, out, nullptr);
    expect_close(download(out, want.size()), want, "silu_and_mul");
  }
  // add_sigmoid_gated (Qwen2-MoE's shared expert): the gate's first
  // column of two, widths below and above a block's 256 threads.
  for (int64_t cols : {13, 896, 4096}) {
    const int64_t rows = 5;
    auto x = random(rows * cols, 2.0f, 8), base = random(rows * cols, 2.0f, 9), gate = random(rows * 2, 6.0f, 10);
    std::vector<float> want = base;
    ref_.add_sigmoid_gated(host(x, rows, cols), host(gate, rows, 2), host(want, rows, cols));
    void* out = upload(base);
    cuda::add_sigmoid_gated(GetParam(), upload(x), upload(gate), 2, rows, cols, out, nullptr);
    expect_close(download(out, want.size()), want, "add_sigmoid_gated");
  }
  const std::vector<int32_t> ids = {0, 999, 5, 5, 123};
  int32_t* ids_dev = nullptr;
  ASSERT_EQ(cudaMalloc(&ids_dev, ids.size() * 4), cudaSuccess);
  cudaMemcpy(ids_dev, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice);
  for (int64_t cols : {896, 100, 13}) {  // vectorized (both types), f32 only, scalar
    // The whole table, then a vocabulary-parallel rank's rows 100..599
    // (ids outside them read as zeros).
    for (const auto& [first_row, rows] : {std::pair<int64_t, int64_t>{0, 1000}, {100, 500}}) {
      auto table = random(rows * cols, 1.0f, 7);
      void* out = poisoned(ids.size() * cols);
      cuda::embedding(GetParam(), ids_dev, static_cast<int64_t>(ids.size()), upload(table),
                      first_row, rows, cols, out, nullptr);
      const auto got = download(out, ids.size() * cols);
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t row = ids[i] - first_row;
        for (int64_t j = 0; j < cols; ++j) {
          const float want = row >= 0 && row < rows ? table[static_cast<size_t>(row * cols + j)] : 0.0f;
          ASSERT_EQ(got[i * cols + j], want) << cols << " first_row " << first_row;
        }
      }
    }
  }
  cudaFree(ids_dev);
}

// float32 tables (RoPE cos/sin) whatever the element type under test.
float* upload_f32(const std::vector<float>& v) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size()) * 4), cudaSuccess);
  cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  return p;
}

int32_t* upload_ints(const std::vector<int32_t>& v) {
  int32_t* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size()) * 4), cudaSuccess);
  cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  return p;
}

TEST_P(cuda_kernels, rope_matches_reference_with_llama3_scaling) {
  rope_config rc;
  rc.type = rope_type::llama3;
  rc.theta = 500000.0;
  rc.factor = 8.0;
  rc.original_max_position_embeddings = 512;
  for (int64_t head_dim : {16, 48, 64, 128}) {
    const int64_t max_pos = 4096, n = 37, q_heads = 8, k_heads = 2;
    std::vector<float> cos_h, sin_h;
    rope_cos_sin(rc, head_dim, max_pos, cos_h, sin_h);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>((i * 977) % max_pos);
    auto q = random(n * q_heads * head_dim, 1.0f, 8), k = random(n * k_heads * head_dim, 1.0f, 9);
    std::vector<float> q_ref = q, k_ref = k;
    rope_tables tables{host(cos_h, max_pos, head_dim / 2), host(sin_h, max_pos, head_dim / 2)};
    ref_.rope(host(q_ref, n, q_heads * head_dim), host(k_ref, n, k_heads * head_dim), pos.data(),
              head_dim, tables);
    float* cos_d = upload_f32(cos_h);
    float* sin_d = upload_f32(sin_h);
    int32_t* pos_d = upload_ints(pos);
    void* q_d = upload(q);
    void* k_d = upload(k);
    cuda::rope(GetParam(), q_d, q_heads, k_d, k_heads, head_dim, pos_d, n, cos_d, sin_d, nullptr);
    expect_close(download(q_d, q.size()), q_ref, "rope q");
    expect_close(download(k_d, k.size()), k_ref, "rope k");
    cudaFree(cos_d);
    cudaFree(sin_d);
    cudaFree(pos_d);
  }
}

// The fused attention input (per-head q/k norm, RoPE, q out, k/v into the
// cache) against the CPU reference's separate ops on the split columns.
TEST_P(cuda_kernels, qkv_rope_cache_matches_separate_ops) {
  rope_config rc;
  rc.theta = 10000.0;
  struct gqa {
    int64_t q_heads, kv_heads;
  };
  for (int64_t head_dim : {16, 48, 64, 128}) {
    for (gqa g : {gqa{4, 4}, gqa{8, 2}, gqa{16, 2}}) {
      for (bool norms : {false, true}) {
        const int64_t max_pos = 2048, n = 37, block_size = 16, num_blocks = 6;
        const int64_t q_cols = g.q_heads * head_dim, kv_cols = g.kv_heads * head_dim;
        const int64_t cols = q_cols + 2 * kv_cols, slots_total = num_blocks * block_size;
        std::vector<float> cos_h, sin_h;
        rope_cos_sin(rc, head_dim, max_pos, cos_h, sin_h);
        std::vector<int32_t> pos(n), slots(n);
        for (int64_t i = 0; i < n; ++i) {
          pos[i] = static_cast<int32_t>((i * 577) % max_pos);
          slots[i] = i % 6 == 5 ? -1 : static_cast<int32_t>((i * 7 + 3) % slots_total);
        }
        // Distinct slots (a permutation step of 7 over 96 slots; n < 96).
        auto qkv = random(n * cols, 2.0f, 20), qn = random(head_dim, 1.5f, 21),
             kn = random(head_dim, 1.5f, 22);
        // Reference: split, norm, rope, write.
        std::vector<float> q(n * q_cols), k(n * kv_cols), v(n * kv_cols);
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(qkv.begin() + i * cols, q_cols, q.begin() + i * q_cols);
          std::copy_n(qkv.begin() + i * cols + q_cols, kv_cols, k.begin() + i * kv_cols);
          std::copy_n(qkv.begin() + i * cols + q_cols + kv_cols, kv_cols, v.begin() + i * kv_cols);
        }
        if (norms) {
          ref_.head_rms_norm(host(q, n, q_cols), head_dim, host(qn, head_dim, 1), 1e-6f);
          ref_.head_rms_norm(host(k, n, kv_cols), head_dim, host(kn, head_dim, 1), 1e-6f);
        }
        rope_tables tables{host(cos_h, max_pos, head_dim / 2), host(sin_h, max_pos, head_dim / 2)};
        ref_.rope(host(q, n, q_cols), host(k, n, kv_cols), pos.data(), head_dim, tables);
        std::vector<float> k_cache(slots_total * kv_cols, 7.0f), v_cache(slots_total * kv_cols, 7.0f);
        ref_.write_kv_cache(host(k, n, kv_cols), host(v, n, kv_cols), slots.data(),
                            {host(k_cache, slots_total, kv_cols), host(v_cache, slots_total, kv_cols)});
        // The CPU's own fused op agrees (bit for bit: same float operations).
        std::vector<float> q_cpu(n * q_cols), kc_cpu(slots_total * kv_cols, 7.0f),
            vc_cpu(slots_total * kv_cols, 7.0f);
        const tensor qn_t = host(qn, head_dim, 1), kn_t = host(kn, head_dim, 1);
        ref_.qkv_rope_cache(host(qkv, n, cols), g.q_heads, g.kv_heads, head_dim,
                            norms ? &qn_t : nullptr, norms ? &kn_t : nullptr, 1e-6f, pos.data(),
                            tables, slots.data(),
                            {host(kc_cpu, slots_total, kv_cols), host(vc_cpu, slots_total, kv_cols)},
                            host(q_cpu, n, q_cols));
        ASSERT_EQ(q_cpu, q);
        ASSERT_EQ(kc_cpu, k_cache);
        ASSERT_EQ(vc_cpu, v_cache);
        // The device.
        float* cos_d = upload_f32(cos_h);
        float* sin_d = upload_f32(sin_h);
        int32_t* pos_d = upload_ints(pos);
        int32_t* slots_d = upload_ints(slots);
        void* q_out = poisoned(q.size());
        void* kc = upload(std::vector<float>(k_cache.size(), 7.0f));
        void* vc = upload(std::vector<float>(v_cache.size(), 7.0f));
        cuda::qkv_rope_cache(GetParam(), upload(qkv), n, g.q_heads, g.kv_heads, head_dim,
                             norms ? upload(qn) : nullptr, norms ? upload(kn) : nullptr, 1e-6f,
                             pos_d, cos_d, sin_d, slots_d, q_out, cuda::kv_dest{kc, vc}, nullptr);
        expect_close(download(q_out, q.size()), q, "fused q");
        expect_close(download(kc, k_cache.size()), k_cache, "fused k cache");  // -1 slots untouched
        expect_close(download(vc, v_cache.size()), v_cache, "fused v cache");
        cudaFree(cos_d);
        cudaFree(sin_d);
        cudaFree(pos_d);
        cudaFree(slots_d);
      }
    }
  }
}

TEST_P(cuda_kernels, kv_cache_write_gather_and_block_copies) {
  const int64_t kv_cols = 2 * 64, block_size = 16, num_blocks = 9, n = 21;
  auto k = random(n * kv_cols, 1.0f, 10), v = random(n * kv_cols, 1.0f, 11);
  std::vector<int32_t> slots(n);
  for (int64_t i = 0; i < n; ++i) slots[i] = i % 5 == 4 ? -1 : static_cast<int32_t>(15 + i * 3);
  const size_t cache_elems = static_cast<size_t>(num_blocks * block_size * kv_cols);
  std::vector<float> k_cache(cache_elems, 7.0f), v_cache(cache_elems, 7.0f);
  ref_.write_kv_cache(host(k, n, kv_cols), host(v, n, kv_cols), slots.data(),
                      {host(k_cache, num_blocks * block_size, kv_cols),
                       host(v_cache, num_blocks * block_size, kv_cols)});
  void* kc = upload(std::vector<float>(cache_elems, 7.0f));
  void* vc = upload(std::vector<float>(cache_elems, 7.0f));
  int32_t* slots_d = upload_ints(slots);
  cuda::write_kv_cache(GetParam(), upload(k), upload(v), slots_d, n, kv_cols, cuda::kv_dest{kc, vc},
                       nullptr);
  expect_close(download(kc, cache_elems), k_cache, "k cache");  // slot -1 rows untouched too
  expect_close(download(vc, cache_elems), v_cache, "v cache");
  // gather rows of k
  const std::vector<int32_t> idx = {20, 0, 7, 7};
  std::vector<float> g_ref(idx.size() * kv_cols);
  ref_.gather_rows(host(k, n, kv_cols), idx.data(), 4, host(g_ref, 4, kv_cols));
  void* g = poisoned(g_ref.size());
  int32_t* idx_d = upload_ints(idx);
  cuda::gather_rows(GetParam(), upload(k), idx_d, 4, kv_cols, g, nullptr);
  expect_close(download(g, g_ref.size()), g_ref, "gather_rows");
  // copy blocks within the cache (copy-on-write) as the CPU does
  const std::vector<int32_t> src = {1, 3}, dst = {8, 2};
  ref_.copy_kv_blocks({host(k_cache, num_blocks * block_size, kv_cols),
                       host(v_cache, num_blocks * block_size, kv_cols)},
                      {host(k_cache, num_blocks * block_size, kv_cols),
                       host(v_cache, num_blocks * block_size, kv_cols)},
                      src.data(), dst.data(), 2, block_size);
  cuda::copy_kv_blocks(elem(), kc, vc, kc, vc, src.data(), dst.data(), 2, block_size, kv_cols,
                       nullptr);
  expect_close(download(kc, cache_elems), k_cache, "k after block copy");
  expect_close(download(vc, cache_elems), v_cache, "v after block copy");
  cudaFree(slots_d);
  cudaFree(idx_d);
}

// Dummy weights made on the device equal the host's, bit for bit (after the
// same rounding to bf16), norms' offset included.
TEST_P(cuda_kernels, fill_dummy_matches_host_bit_for_bit) {
  for (int64_t n : {1, 255, 4097, 1 << 20}) {
    for (float offset : {0.0f, 1.0f}) {
      const uint64_t key = dummy_key(3, "model.layers.1.mlp.down_proj.weight");
      std::vector<float> want(static_cast<size_t>(n));
      fill_dummy_f32(key, want.data(), want.size(), 1e-3f, offset);
      if (bf16()) {
        for (float& x : want) x = bf16_to_f32(f32_to_bf16(x));
      }
      void* out = poisoned(static_cast<size_t>(n));
      cuda::fill_dummy(GetParam(), out, n, key, 1e-3f, offset, nullptr);
      const std::vector<float> got = download(out, static_cast<size_t>(n));
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "n " << n << " offset " << offset << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(types, cuda_kernels,
                         ::testing::Values(element_type::f32, element_type::bf16),
                         [](const auto& info) {
                           return info.param == element_type::f32 ? "f32" : "bf16";
                         });

}  // namespace
}  // namespace troupe
