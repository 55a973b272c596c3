// Packed GPTQ / AWQ products on the device (kernels/cuda/quant/qgemm.cu,
// cuda_ops::packed_linear) against model/quant_pack.h's reference: the
// dequantization bit for bit, the dummy codes bit for bit, and the
// products (the GEMV at 1-8 rows, the dequantized cuBLAS product above,
// act-order's permutation, 4 and 8 bits, groups of 32, 128 and the whole
// input, bf16 and f16; float32 through the dequantized product) against a
// double-precision sum over the same rounded x. Skipped where no CUDA
// device is visible; run on the GPU host by scripts/gpu-check.sh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#include "tests/kernels/cuda_lora_fixture.h"
#include "kernels/cuda/quant/qgemm.h"
#include "model/quant_pack.h"
#include "model/weights.h"

namespace troupe {
namespace {

class cuda_qgemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ops_ = std::make_unique<cuda_ops>(0, 64);
  }
  // A packed tensor of `type` in device memory holding p (perm too), in
  // the tensor-core layout where it fits.
  tensor upload(packed_linear p, dtype type, bool allow_mma = true) {
    if (allow_mma && !p.mma && mma_layout_fits(p.bits, p.rows, p.cols, p.group_size)) p = to_mma_layout(std::move(p));
    tensor t{nullptr, type, p.rows, p.cols};
    t.packed.mma = p.mma;
    t.packed.bits = p.bits;
    t.packed.group_size = p.group_size;
    t.packed.words = reinterpret_cast<uint32_t*>(ops_->alloc_ints(static_cast<int64_t>(p.words.size())));
    t.packed.scales = reinterpret_cast<uint16_t*>(ops_->alloc_ints(static_cast<int64_t>(p.scales.size() + 1) / 2));
    t.packed.zeros = reinterpret_cast<uint8_t*>(ops_->alloc_ints(static_cast<int64_t>(p.zeros.size() + 3) / 4));
    ops_->upload_bytes(p.words.data(), t.packed.words, p.words.size() * 4);
    ops_->upload_bytes(p.scales.data(), t.packed.scales, p.scales.size() * 2);
    ops_->upload_bytes(p.zeros.data(), t.packed.zeros, p.zeros.size());
    if (!p.perm.empty()) {
      int32_t* perm = ops_->alloc_ints(p.cols);
      ops_->upload_bytes(p.perm.data(), perm, p.perm.size() * 4);
      t.packed.perm = perm;
    }
    return t;
  }
  // Random weights [rows, cols] quantized to nearest; with `permuted`, the
  // codes' columns shuffled as act-order would (perm a random permutation
  // whose groups are then contiguous).
  static packed_linear random_packed(int64_t rows, int64_t cols, int bits, int64_t group, bool permuted,
                                     uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& v : w) v = d(rng);
    packed_linear p = rtn_quantize(w.data(), rows, cols, bits, group);
    if (permuted) {
      p.perm.resize(static_cast<size_t>(cols));
      std::iota(p.perm.begin(), p.perm.end(), 0);
      std::shuffle(p.perm.begin(), p.perm.end(), rng);
    }
    return p;
  }
  std::vector<float> download(const tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    ops_->download(t, v.data());
    return v;
  }
  std::unique_ptr<cuda_ops> ops_;
};

float round_to(dtype type, float v) {
  if (type == dtype::bf16) return bf16_to_f32(f32_to_bf16(v));
  if (type == dtype::f16) return f16_to_f32(f32_to_f16(v));
  return v;
}

TEST_F(cuda_qgemm, dequantize_is_exact) {
  for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (int bits : {4, 8}) {
      for (bool permuted : {false, true}) {
        const std::string what = std::string(dtype_name(type)) + " " + std::to_string(bits) + "-bit" +
                                 (permuted ? " act-order" : "");
        const packed_linear p = random_packed(40, 256, bits, 64, permuted, 7);
        const tensor w = upload(p, type);
        const tensor out = ops_->alloc(type, p.rows, p.cols);
        cuda::packed_weight_args a{w.packed.words, w.packed.scales, w.packed.zeros, bits, p.group_size, p.rows, p.cols};
        cuda::packed_dequantize(type == dtype::f32 ? cuda::element_type::f32
                                : type == dtype::bf16 ? cuda::element_type::bf16
                                                      : cuda::element_type::f16,
                                a, w.packed.perm, out.data, ops_->stream());
        std::vector<float> want(static_cast<size_t>(p.rows * p.cols));
        unpack_linear(p, want.data());
        for (float& v : want) v = round_to(type, v);
        EXPECT_EQ(download(out), want) << what;
      }
    }
  }
}

TEST_F(cuda_qgemm, dummy_codes_match_the_host_quantizer) {
  for (dtype type : {dtype::f32, dtype::bf16}) {
    for (int64_t group : {int64_t{32}, int64_t{128}, int64_t{-1}}) {
      for (int bits : {4, 8}) {
        const int64_t rows = 24, cols = 384;
        const uint64_t key = dummy_key(3, "model.layers.0.mlp.down_proj.weight");
        std::vector<float> values(static_cast<size_t>(rows * cols));
        fill_dummy_f32(key, values.data(), values.size(), 1e-3f, 0.0f);
        for (float& v : values) v = round_to(type, v);
        packed_linear want = rtn_quantize(values.data(), rows, cols, bits, group);
        if (mma_layout_fits(bits, rows, cols, want.group_size)) want = to_mma_layout(std::move(want));
        packed_linear empty = want;
        std::fill(empty.words.begin(), empty.words.end(), 0u);
        const tensor w = upload(empty, type);
        ops_->fill_dummy_packed(w, key, 1e-3f);
        ops_->synchronize();
        packed_linear got = want;
        ASSERT_EQ(cudaMemcpy(got.words.data(), w.packed.words, got.words.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.scales.data(), w.packed.scales, got.scales.size() * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.zeros.data(), w.packed.zeros, got.zeros.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        const std::string what = std::string(dtype_name(type)) + " group " + std::to_string(group) + " " +
                                 std::to_string(bits) + "-bit" + (want.mma ? " (tensor-core layout)" : "");
        EXPECT_EQ(got.words, want.words) << what;
        EXPECT_EQ(got.scales, want.scales) << what;
        EXPECT_EQ(got.zeros, want.zeros) << what;
      }
    }
  }
}

// linear() with a packed weight against the double sum over the exact
// dequantized weight and x as the device holds it.
TEST_F(cuda_qgemm, products_match_the_reference) {
  struct shape {
    int64_t rows, cols, group;
  };
  // Widths not a multiple of a warp's 1024 (4-bit) / 512 (8-bit) columns,
  // rows that leave a warp's pair half empty, the whole input as a group.
  // The tensor-core layout (4-bit, rows a multiple of 16, columns and
  // groups multiples of 64) for the last three.
  const std::vector<shape> shapes = {{96, 1056, 32}, {130, 512, 128}, {64, 800, -1},
                                     {128, 1024, 128}, {48, 256, 64}, {64, 512, -1}};
  for (dtype type : {dtype::bf16, dtype::f16, dtype::f32}) {
    ops_ = std::make_unique<cuda_ops>(0, 64);
    ops_->reserve_packed(200 * 1100, 1100, type);
    for (const shape& s : shapes) {
      for (int bits : {4, 8}) {
        for (bool permuted : {false, true}) {
          const packed_linear p = random_packed(s.rows, s.cols, bits, s.group, permuted, 11);
          const tensor w = upload(p, type);
          std::vector<float> wf(static_cast<size_t>(p.rows * p.cols));
          unpack_linear(p, wf.data());
          for (int64_t m : {1, 2, 3, 5, 8, 9, 16, 17, 40, 300}) {
            const std::string what = std::string(dtype_name(type)) + " " + std::to_string(bits) + "-bit " +
                                     std::to_string(m) + "x" + std::to_string(s.cols) + " -> " +
                                     std::to_string(s.rows) + " group " + std::to_string(s.group) +
                                     (permuted ? " act-order" : "") + (w.packed.mma ? " (tensor cores)" : "");
            std::mt19937 rng(static_cast<uint32_t>(m));
            std::uniform_real_distribution<float> d(-1.0f, 1.0f);
            std::vector<float> xh(static_cast<size_t>(m * s.cols));
            for (float& v : xh) v = d(rng);
            const tensor x = ops_->alloc(type, m, s.cols), out = ops_->alloc(type, m, s.rows);
            ops_->upload(xh.data(), x);
            ops_->download(x, xh.data());  // as rounded
            ops_->linear(x, w, nullptr, out);
            const std::vector<float> got = download(out);
            const double round = type == dtype::f32 ? 1e-6 : type == dtype::bf16 ? 1.0 / 128 : 1.0 / 1024;
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t o = 0; o < s.rows; ++o) {
                double want = 0, scale = 0;
                for (int64_t j = 0; j < s.cols; ++j) {
                  const double prod = double(xh[i * s.cols + j]) * wf[o * s.cols + j];
                  want += prod;
                  scale += std::fabs(prod);
                }
                // The dequantized cuBLAS path rounds the weight to the
                // type first (relative 2^-8 for bf16 of each product).
                ASSERT_NEAR(got[i * s.rows + o], want, round * (std::fabs(want) + scale) + 1e-6)
                    << what << ": row " << i << ", output " << o;
              }
            }
          }
        }
      }
    }
  }
}

// Act-order parts stacked in one weight (q/k/v whose checkpoints permute
// their inputs differently): each part's rows with its own permutation.
TEST_F(cuda_qgemm, act_order_parts_keep_their_permutations) {
  const int64_t cols = 256, rows[3] = {64, 32, 32};
  for (bool mma : {false, true}) {
    ops_ = std::make_unique<cuda_ops>(0, 64);
    ops_->reserve_packed(128 * cols, cols, dtype::bf16);
    std::vector<packed_linear> parts;
    packed_linear all;
    for (int i = 0; i < 3; ++i) {
      parts.push_back(random_packed(rows[i], cols, 4, 64, true, 20 + i));
      packed_linear q = parts.back();
      if (mma) q = to_mma_layout(std::move(q));
      if (i == 0) {
        all = q;
      } else {
        all.rows += q.rows;
        all.words.insert(all.words.end(), q.words.begin(), q.words.end());
        all.scales.insert(all.scales.end(), q.scales.begin(), q.scales.end());
        all.zeros.insert(all.zeros.end(), q.zeros.begin(), q.zeros.end());
      }
    }
    all.perm.clear();
    tensor w = upload(all, dtype::bf16, mma);
    ASSERT_EQ(w.packed.mma, mma);
    int32_t* perms = ops_->alloc_ints(3 * cols);
    for (int i = 0; i < 3; ++i) ops_->upload_bytes(parts[i].perm.data(), perms + i * cols, cols * 4);
    w.packed.perm = perms;
    w.packed.parts = 3;
    w.packed.part_end[0] = 64;
    w.packed.part_end[1] = 96;
    w.packed.part_end[2] = 128;
    for (int64_t m : {1, 9, 300}) {
      std::vector<float> xh(static_cast<size_t>(m * cols));
      std::mt19937 rng(static_cast<uint32_t>(m));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (float& v : xh) v = d(rng);
      const tensor x = ops_->alloc(dtype::bf16, m, cols), out = ops_->alloc(dtype::bf16, m, 128);
      ops_->upload(xh.data(), x);
      ops_->download(x, xh.data());
      ops_->linear(x, w, nullptr, out);
      const std::vector<float> got = download(out);
      int64_t row0 = 0;
      for (int i = 0; i < 3; ++i) {
        std::vector<float> wf(static_cast<size_t>(rows[i] * cols));
        unpack_linear(parts[i], wf.data());
        for (int64_t t = 0; t < m; ++t) {
          for (int64_t o = 0; o < rows[i]; ++o) {
            double want = 0, scale = 0;
            for (int64_t j = 0; j < cols; ++j) {
              want += double(xh[t * cols + j]) * wf[o * cols + j];
              scale += std::fabs(double(xh[t * cols + j]) * wf[o * cols + j]);
            }
            ASSERT_NEAR(got[t * 128 + row0 + o], want, (std::fabs(want) + scale) / 128 + 1e-6)
                << (mma ? "tensor cores" : "gemv") << ", m " << m << ", part " << i << ", row " << o << ", token " << t;
          }
        }
        row0 += rows[i];
      }
    }
  }
}

// LoRA deltas over a packed base (linear_lora: the packed product, then
// the deltas): the same outputs as over the base dequantized to bf16, at
// 1, 5 and 40 tokens, half of them with the adapter and half without.
TEST_F(cuda_qgemm, lora_deltas_over_packed_weights) {
  const int64_t rows = 128, cols = 256, rank = 8;
  ops_->reserve_packed(rows * cols, cols, dtype::bf16);
  const packed_linear p = random_packed(rows, cols, 4, 64, false, 3);
  const tensor packed = upload(p, dtype::bf16);
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  unpack_linear(p, wf.data());
  const tensor dense = ops_->alloc(dtype::bf16, rows, cols);
  ops_->upload(wf.data(), dense);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  std::vector<float> ah(static_cast<size_t>(rank * cols)), bh(static_cast<size_t>(rows * rank));
  for (float& v : ah) v = d(rng);
  for (float& v : bh) v = d(rng);
  lora_stack stack{ops_->alloc(dtype::bf16, rank, cols), ops_->alloc(dtype::bf16, rows, rank), 1, rank};
  ops_->upload(ah.data(), stack.a);
  ops_->upload(bh.data(), stack.b);
  for (int64_t m : {1, 5, 40}) {
    std::vector<int32_t> slots(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t) slots[static_cast<size_t>(t)] = t % 2 == 0 ? 0 : -1;
    const lora_delta delta = lora_delta_for(*ops_, stack, slots);
    std::vector<float> xh(static_cast<size_t>(m * cols));
    for (float& v : xh) v = d(rng) * 10.0f;
    const tensor x = ops_->alloc(dtype::bf16, m, cols);
    ops_->upload(xh.data(), x);
    const tensor got = ops_->alloc(dtype::bf16, m, rows), want = ops_->alloc(dtype::bf16, m, rows);
    ops_->linear_lora(x, packed, nullptr, delta, got);
    ops_->linear_lora(x, dense, nullptr, delta, want);
    const std::vector<float> g = download(got), w = download(want);
    double largest = 0;
    for (float v : w) largest = std::max(largest, std::fabs(double(v)));
    ASSERT_GT(largest, 0.0);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], std::fabs(w[i]) / 64 + largest / 256) << m << " tokens, output " << i;
    }
  }
}

}  // namespace
}  // namespace troupe
