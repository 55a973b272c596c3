// The FP8 KV cache on the CUDA backend (kv_cache_dtype fp8), through
// cuda_ops as the model runner calls it: every writer stores, for each
// element, the code of the value a cache of the compute type would hold
// divided by the layer's scale (model/quantization.cpp's f32_to_e4m3 of
// it, bit for bit): write_kv_cache, qkv_rope_cache (q/k norms and RoPE),
// qkv_linear_rope_cache at decode sizes (the GEMV's fused epilogue where
// tuning picks it) and at a prefill size; rows at slot -1 untouched; q_out
// the same as with a cache of the compute type; blocks copied code for code
// (copy-on-write within the cache, swap out to pinned host memory and
// back). Attention over the codes: cuda_attention_test. Skipped where no
// CUDA device is visible; run on the GPU host by scripts/gpu-check.sh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "model/quantization.h"
#include "model/rope.h"
#include "tests/kernels/cuda_lora_fixture.h"

namespace troupe {
namespace {

constexpr int64_t q_heads = 8, kv_heads = 2, head_dim = 64, hidden = 256;
constexpr int64_t q_cols = q_heads * head_dim, kv_cols = kv_heads * head_dim, block_size = 16;
constexpr int64_t num_slots = 6 * block_size;
constexpr float k_scale = 0.37f, v_scale = 1.9f;

class cuda_fp8_kv : public cuda_lora_fixture, public ::testing::WithParamInterface<dtype> {
 protected:
  cuda_fp8_kv() : cuda_lora_fixture(64, 3) {}
  dtype type() const { return GetParam(); }

  std::vector<float> values(const tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    ops_->download(t, v.data());
    return v;
  }
  std::vector<uint8_t> codes(const tensor& t) {
    std::vector<uint8_t> v(static_cast<size_t>(t.numel()));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), t.data, v.size(), cudaMemcpyDefault), cudaSuccess);
    return v;
  }
  kv_cache_layer typed_cache() { return {ops_->alloc(type(), num_slots, kv_cols), ops_->alloc(type(), num_slots, kv_cols)}; }
  kv_cache_layer fp8_cache() {
    return {ops_->alloc(dtype::fp8_e4m3, num_slots, kv_cols), ops_->alloc(dtype::fp8_e4m3, num_slots, kv_cols),
            k_scale, v_scale};
  }
  // Every element of the FP8 cache is the code of the typed cache's value
  // over the scale (caches start zero: unwritten rows too, 0 and code 0).
  void expect_codes_of(const kv_cache_layer& typed, const kv_cache_layer& fp8, const std::string& what) {
    for (bool is_v : {false, true}) {
      const std::vector<float> want = values(is_v ? typed.v : typed.k);
      const std::vector<uint8_t> got = codes(is_v ? fp8.v : fp8.k);
      const float scale = is_v ? v_scale : k_scale;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], f32_to_e4m3(want[i] / scale))
            << what << (is_v ? ": v" : ": k") << " slot " << i / kv_cols << " element " << i % kv_cols
            << " value " << want[i];
      }
    }
  }
  // n tokens' slots: a permutation step of 7 over the slots, every fifth -1.
  int32_t* slot_mapping(int64_t n) {
    std::vector<int32_t> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s[i] = i % 5 == 4 ? -1 : static_cast<int32_t>((i * 7 + 3) % num_slots);
    return ints(s);
  }
  int32_t* positions(int64_t n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 577) % 2048);
    return ints(p);
  }
  rope_tables tables() {
    rope_config rc;
    rc.theta = 10000.0;
    std::vector<float> c, s;
    rope_cos_sin(rc, head_dim, 2048, c, s);
    const rope_tables t{ops_->alloc(dtype::f32, 2048, head_dim / 2), ops_->alloc(dtype::f32, 2048, head_dim / 2)};
    ops_->upload(c.data(), t.cos);
    ops_->upload(s.data(), t.sin);
    return t;
  }
};

TEST_P(cuda_fp8_kv, write_kv_cache_stores_codes) {
  const int64_t n = 37;
  std::vector<float> host;
  // k mostly past 448 * k_scale (saturated codes), v mostly below 2^-6 *
  // v_scale (subnormal codes).
  const tensor k = random_tensor(type(), n, kv_cols, 1000.0f, host), v = random_tensor(type(), n, kv_cols, 0.05f, host);
  int32_t* slots = slot_mapping(n);
  const kv_cache_layer typed = typed_cache(), fp8 = fp8_cache();
  ops_->write_kv_cache(k, v, slots, typed);
  ops_->write_kv_cache(k, v, slots, fp8);
  expect_codes_of(typed, fp8, "write_kv_cache");
  int saturated = 0, subnormal = 0;
  for (uint8_t x : codes(fp8.k)) saturated += (x & 0x7f) == 0x7e;
  for (uint8_t x : codes(fp8.v)) subnormal += (x & 0x78) == 0 && (x & 0x07) != 0;
  EXPECT_GT(saturated, 0);
  EXPECT_GT(subnormal, 0);
}

TEST_P(cuda_fp8_kv, qkv_rope_cache_stores_codes_and_the_same_q) {
  for (bool norms : {false, true}) {
    const int64_t n = 29;
    std::vector<float> host;
    const tensor qkv = random_tensor(type(), n, q_cols + 2 * kv_cols, 3.0f, host);
    const tensor qn = random_tensor(type(), head_dim, 1, 1.5f, host), kn = random_tensor(type(), head_dim, 1, 1.5f, host);
    int32_t *slots = slot_mapping(n), *pos = positions(n);
    const rope_tables rt = tables();
    const kv_cache_layer typed = typed_cache(), fp8 = fp8_cache();
    const tensor q1 = ops_->alloc(type(), n, q_cols), q2 = ops_->alloc(type(), n, q_cols);
    ops_->qkv_rope_cache(qkv, q_heads, kv_heads, head_dim, norms ? &qn : nullptr, norms ? &kn : nullptr, 1e-6f, pos,
                         rt, slots, typed, q1);
    ops_->qkv_rope_cache(qkv, q_heads, kv_heads, head_dim, norms ? &qn : nullptr, norms ? &kn : nullptr, 1e-6f, pos,
                         rt, slots, fp8, q2);
    const std::string what = norms ? "qkv_rope_cache with q/k norms" : "qkv_rope_cache";
    expect_codes_of(typed, fp8, what);
    EXPECT_EQ(values(q1), values(q2)) << what;
  }
}

// The q/k/v product with the rotation and the cache writes in its epilogue
// (decode sizes; float32 takes cuBLAS and the separate kernel) and a
// prefill chunk.
TEST_P(cuda_fp8_kv, qkv_linear_rope_cache_stores_codes) {
  for (int64_t m : {1, 3, 8, 40}) {
    std::vector<float> host;
    const tensor x = random_tensor(type(), m, hidden, 1.0f, host);
    const tensor w = random_tensor(type(), q_cols + 2 * kv_cols, hidden, 0.2f, host);
    const tensor bias = random_tensor(type(), q_cols + 2 * kv_cols, 1, 0.5f, host);
    int32_t *slots = slot_mapping(m), *pos = positions(m);
    const rope_tables rt = tables();
    const kv_cache_layer typed = typed_cache(), fp8 = fp8_cache();
    const tensor qkv = ops_->alloc(type(), m, q_cols + 2 * kv_cols);
    const tensor q1 = ops_->alloc(type(), m, q_cols), q2 = ops_->alloc(type(), m, q_cols);
    ops_->qkv_linear_rope_cache(x, w, &bias, qkv, q_heads, kv_heads, head_dim, nullptr, nullptr, 0.0f, pos, rt,
                                slots, typed, q1, nullptr);
    ops_->qkv_linear_rope_cache(x, w, &bias, qkv, q_heads, kv_heads, head_dim, nullptr, nullptr, 0.0f, pos, rt,
                                slots, fp8, q2, nullptr);
    const std::string what = "qkv_linear_rope_cache m=" + std::to_string(m);
    expect_codes_of(typed, fp8, what);
    EXPECT_EQ(values(q1), values(q2)) << what;
  }
}

TEST_P(cuda_fp8_kv, blocks_copy_code_for_code) {
  const int64_t n = 60;
  std::vector<float> host;
  const tensor k = random_tensor(type(), n, kv_cols, 3.0f, host), v = random_tensor(type(), n, kv_cols, 3.0f, host);
  const kv_cache_layer cache = fp8_cache();
  ops_->write_kv_cache(k, v, slot_mapping(n), cache);
  const std::vector<uint8_t> k0 = codes(cache.k), v0 = codes(cache.v);
  // Copy-on-write within the cache: block 1 -> 4, block 3 -> 0.
  const std::vector<int32_t> src = {1, 3}, dst = {4, 0};
  ops_->copy_kv_blocks(cache, cache, src.data(), dst.data(), 2, block_size);
  std::vector<uint8_t> k_want = k0, v_want = v0;
  for (size_t i = 0; i < src.size(); ++i) {
    const auto from = static_cast<size_t>(src[i] * block_size * kv_cols), to = static_cast<size_t>(dst[i] * block_size * kv_cols);
    std::memcpy(k_want.data() + to, k0.data() + from, block_size * kv_cols);
    std::memcpy(v_want.data() + to, v0.data() + from, block_size * kv_cols);
  }
  EXPECT_EQ(codes(cache.k), k_want);
  EXPECT_EQ(codes(cache.v), v_want);
  // Swap all six blocks out to pinned host memory (reversed) and back.
  const kv_cache_layer swap{ops_->alloc_host(dtype::fp8_e4m3, num_slots, kv_cols),
                            ops_->alloc_host(dtype::fp8_e4m3, num_slots, kv_cols), k_scale, v_scale};
  const std::vector<int32_t> out_src = {0, 1, 2, 3, 4, 5}, out_dst = {5, 4, 3, 2, 1, 0};
  ops_->copy_kv_blocks(cache, swap, out_src.data(), out_dst.data(), 6, block_size);
  const kv_cache_layer back = fp8_cache();
  ops_->copy_kv_blocks(swap, back, out_dst.data(), out_src.data(), 6, block_size);
  EXPECT_EQ(codes(back.k), k_want);
  EXPECT_EQ(codes(back.v), v_want);
}

INSTANTIATE_TEST_SUITE_P(types, cuda_fp8_kv, ::testing::Values(dtype::f32, dtype::bf16, dtype::f16),
                         [](const auto& info) {
                           return info.param == dtype::f32 ? "f32" : info.param == dtype::bf16 ? "bf16" : "f16";
                         });

}  // namespace
}  // namespace troupe
