// The FP8 KV cache on the CPU backend (kv_cache_dtype fp8): a cache of
// float8 e4m3 codes over per-layer scales gives exactly what a float32
// cache holding the same values rounded to those codes gives: K/V written
// by write_kv_cache and by qkv_rope_cache (with q/k norms and RoPE), paged
// attention over prefill and decode sequences, and blocks copied
// (copy-on-write, swap) code for code.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/quantization.h"
#include "model/rope.h"

namespace troupe {
namespace {

constexpr int64_t block_size = 4, heads = 4, kv_heads = 2, head_dim = 8, kv_cols = kv_heads * head_dim;
constexpr int64_t slots = 8 * block_size;

class cpu_fp8_kv : public ::testing::Test {
 protected:
  cpu_ops ops_;
  std::mt19937 rng_{7};

  tensor make(int64_t rows, int64_t cols, const std::vector<float>& values) {
    tensor t = ops_.alloc(dtype::f32, rows, cols);
    ops_.upload(values.data(), t);
    return t;
  }
  std::vector<float> random(int64_t n, float spread) {
    std::normal_distribution<float> d(0.0f, spread);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng_);
    return v;
  }
  std::vector<float> read(const tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    ops_.download(t, v.data());
    return v;
  }
  // The value an FP8 cache of `scale` holds for x.
  static float rounded(float x, float scale) { return e4m3_to_f32(f32_to_e4m3(x / scale)) * scale; }
  kv_cache_layer fp8_cache(float k_scale, float v_scale) {
    return {ops_.alloc(dtype::fp8_e4m3, slots, kv_cols), ops_.alloc(dtype::fp8_e4m3, slots, kv_cols), k_scale,
            v_scale};
  }
  kv_cache_layer f32_cache() { return {ops_.alloc(dtype::f32, slots, kv_cols), ops_.alloc(dtype::f32, slots, kv_cols)}; }
  // Attention of two sequences over their blocks: a prefill of 6 tokens
  // (blocks 3, 1) and a decode at position 9 (blocks 5, 2, 7).
  std::vector<float> attend(const kv_cache_layer& cache, const std::vector<float>& q) {
    const std::vector<int32_t> query_start = {0, 6, 7}, seq_lens = {6, 10}, tables = {3, 1, 0, 5, 2, 7};
    attention_metadata meta;
    meta.num_seqs = 2;
    meta.query_start_loc = query_start.data();
    meta.seq_lens = seq_lens.data();
    meta.block_tables = tables.data();
    meta.max_blocks_per_seq = 3;
    meta.block_size = block_size;
    meta.max_query_len = 6;
    meta.max_seq_len = 10;
    const tensor out = ops_.alloc(dtype::f32, 7, heads * head_dim);
    ops_.paged_attention(make(7, heads * head_dim, q), cache, meta, heads, kv_heads, head_dim, 0.35f, out);
    return read(out);
  }
};

TEST_F(cpu_fp8_kv, matches_a_float_cache_of_the_rounded_values) {
  // Keys and values of every slot attention reads; spread so that some
  // round to subnormal codes and some saturate (|x| / scale > 448).
  std::vector<float> k = random(slots * kv_cols, 3.0f), v = random(slots * kv_cols, 40.0f);
  k[5] = 300.0f;   // saturates at scale 0.5: 448 x 0.5 = 224
  v[9] = 0.01f;    // a subnormal code at scale 2: 0.005 is 2.56 steps of 2^-9
  std::vector<int32_t> all(slots);
  for (int64_t s = 0; s < slots; ++s) all[static_cast<size_t>(s)] = static_cast<int32_t>(s);
  const kv_cache_layer fp8 = fp8_cache(0.5f, 2.0f), f32 = f32_cache();
  ops_.write_kv_cache(make(slots, kv_cols, k), make(slots, kv_cols, v), all.data(), fp8);
  std::vector<float> k_rounded = k, v_rounded = v;
  for (float& x : k_rounded) x = rounded(x, 0.5f);
  for (float& x : v_rounded) x = rounded(x, 2.0f);
  EXPECT_EQ(k_rounded[5], 224.0f);
  EXPECT_EQ(v_rounded[9], std::ldexp(3.0f, -9) * 2.0f);
  ops_.write_kv_cache(make(slots, kv_cols, k_rounded), make(slots, kv_cols, v_rounded), all.data(), f32);
  const std::vector<float> q = random(7 * heads * head_dim, 1.0f);
  const std::vector<float> want = attend(f32, q), got = attend(fp8, q);
  EXPECT_EQ(got, want);  // the same values in the same order: the same bits

  // Copy-on-write and swap copies move codes: block 3's codes into 6, then
  // attention over block 6 instead of 3 is unchanged.
  const int32_t from[] = {3}, to[] = {6};
  ops_.copy_kv_blocks(fp8, fp8, from, to, 1, block_size);
  for (const tensor* t : {&fp8.k, &fp8.v}) {
    const auto* codes = static_cast<const uint8_t*>(t->data);
    for (int64_t i = 0; i < block_size * kv_cols; ++i) {
      ASSERT_EQ(codes[6 * block_size * kv_cols + i], codes[3 * block_size * kv_cols + i]);
    }
  }
}

TEST_F(cpu_fp8_kv, qkv_rope_cache_stores_the_normed_rotated_keys_rounded) {
  const int64_t n = 3, q_cols = heads * head_dim;
  const std::vector<float> qkv = random(n * (q_cols + 2 * kv_cols), 2.0f);
  const std::vector<int32_t> positions = {0, 5, 11}, slot_mapping = {4, -1, 13};
  std::vector<float> cos, sin;
  rope_config rope;
  rope_cos_sin(rope, head_dim, 16, cos, sin);
  const rope_tables tables{make(16, head_dim / 2, cos), make(16, head_dim / 2, sin)};
  const tensor k_norm = make(1, head_dim, random(head_dim, 1.0f));
  const kv_cache_layer fp8 = fp8_cache(0.25f, 1.5f), f32 = f32_cache();
  const tensor q1 = ops_.alloc(dtype::f32, n, q_cols), q2 = ops_.alloc(dtype::f32, n, q_cols);
  ops_.qkv_rope_cache(make(n, qkv.size() / n, qkv), heads, kv_heads, head_dim, nullptr, &k_norm, 1e-6f,
                      positions.data(), tables, slot_mapping.data(), fp8, q1);
  ops_.qkv_rope_cache(make(n, qkv.size() / n, qkv), heads, kv_heads, head_dim, nullptr, &k_norm, 1e-6f,
                      positions.data(), tables, slot_mapping.data(), f32, q2);
  EXPECT_EQ(read(q1), read(q2));
  const std::vector<float> k = read(f32.k), v = read(f32.v);
  const auto* kc = static_cast<const uint8_t*>(fp8.k.data);
  const auto* vc = static_cast<const uint8_t*>(fp8.v.data);
  for (int32_t slot : {4, 13}) {
    for (int64_t j = 0; j < kv_cols; ++j) {
      const size_t i = static_cast<size_t>(slot * kv_cols + j);
      EXPECT_EQ(kc[i], f32_to_e4m3(k[i] / 0.25f)) << slot << " " << j;
      EXPECT_EQ(vc[i], f32_to_e4m3(v[i] / 1.5f)) << slot << " " << j;
    }
  }
  for (int64_t i = 0; i < slots * kv_cols; ++i) {  // slot -1 (padding) wrote nothing
    if (i / kv_cols != 4 && i / kv_cols != 13) {
      ASSERT_EQ(kc[i], 0) << i;
    }
  }
}

}  // namespace
}  // namespace troupe
