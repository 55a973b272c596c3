// FP8 W8A8 products on the device (kernels/cuda/quant/fp8.cu,
// kernels/cuda/cuda_fp8.cpp) against model/fp8_linear.h's reference: the
// activations' quantization bit for bit (groups of 128 and whole rows,
// f32/bf16/f16 inputs), the dummy weights bit for bit, and linear() with
// an FP8 weight (the mma kernel at few rows, cuBLASLt's block-scaled GEMM
// above, both scale layouts) against the double sum over the same codes.
// Skipped where no CUDA device is visible; run on the GPU host by
// scripts/gpu-check.sh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#include "tests/kernels/cuda_lora_fixture.h"
#include "kernels/cuda/quant/fp8.h"
#include "model/fp8_linear.h"
#include "model/weights.h"

namespace troupe {
namespace {

class cuda_fp8 : public cuda_lora_fixture {
 protected:
  cuda_fp8() : cuda_lora_fixture(64, 1) {}
  std::vector<float> download(const tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    ops_->download(t, v.data());
    return v;
  }
  template <class T>
  std::vector<T> fetch(const void* device, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // An FP8 weight [rows, cols] with blocks of block_out x block_in, in
  // device memory, from host codes and unpadded scales.
  tensor upload(const fp8_codes& f, int64_t rows, int64_t cols, int64_t block_out, int64_t block_in, dtype type) {
    quant_config q;
    q.kind = quant_config::method::fp8;
    q.block_out = block_out;
    q.block_in = block_in;
    tensor t{nullptr, type, rows, cols};
    packed_parts& p = t.packed;
    p.bits = 8;
    p.fp8 = true;
    p.block_out = block_out;
    p.block_in = q.fp8_block_in(cols);
    p.group_size = p.block_in;
    p.scale_stride = fp8_scale_stride(q, cols);
    const std::vector<float> padded = fp8_padded_scales(f.scales, (rows + block_out - 1) / block_out,
                                                        (cols + p.block_in - 1) / p.block_in, p.scale_stride);
    p.words = reinterpret_cast<uint32_t*>(ops_->alloc_ints(rows * cols / 4));
    p.fp8_scales = reinterpret_cast<float*>(ops_->alloc_ints(static_cast<int64_t>(padded.size())));
    ops_->upload_bytes(f.codes.data(), p.words, f.codes.size());
    ops_->upload_bytes(padded.data(), p.fp8_scales, padded.size() * 4);
    return t;
  }
};

std::vector<float> random_values(int64_t n, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng) * spread;
  return v;
}

const char* name_of(dtype t) { return t == dtype::f32 ? "f32" : t == dtype::bf16 ? "bf16" : "f16"; }

TEST_F(cuda_fp8, activations_quantize_as_the_host_does) {
  for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (int64_t cols : {128, 384, 4096}) {
      for (int64_t group : {int64_t{128}, cols}) {
        const int64_t rows = 5;
        std::vector<float> xh = random_values(rows * cols, 7, 3.0f);
        for (int64_t c = 0; c < 128; ++c) xh[static_cast<size_t>(2 * cols + c)] = 0.0f;  // an all-zero group
        xh[static_cast<size_t>(cols + 3)] = 1e4f;                                       // one outlier
        const tensor x = ops_->alloc(type, rows, cols);
        ops_->upload(xh.data(), x);
        ops_->download(x, xh.data());  // as rounded
        const int64_t groups = (cols + group - 1) / group;
        uint8_t* codes = nullptr;
        float* scales = nullptr;
        ASSERT_EQ(cudaMalloc(&codes, static_cast<size_t>(rows * cols)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&scales, static_cast<size_t>(rows * groups) * 4), cudaSuccess);
        const cuda::element_type et = type == dtype::bf16  ? cuda::element_type::bf16
                                      : type == dtype::f16 ? cuda::element_type::f16
                                                           : cuda::element_type::f32;
        cuda::fp8_quantize_activations(et, x.data, rows, cols, group, codes, scales, ops_->stream());
        ops_->synchronize();
        std::vector<uint8_t> want_codes(static_cast<size_t>(rows * cols));
        std::vector<float> want_scales(static_cast<size_t>(rows * groups));
        fp8_quantize_activations(xh.data(), rows, cols, group, want_codes.data(), want_scales.data());
        const std::string what = std::string(name_of(type)) + " cols " + std::to_string(cols) + " group " +
                                 std::to_string(group);
        EXPECT_EQ(fetch<uint8_t>(codes, want_codes.size()), want_codes) << what;
        // On the device group-major: [groups][rows].
        const std::vector<float> got = fetch<float>(scales, want_scales.size());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t g = 0; g < groups; ++g) {
            EXPECT_EQ(got[g * rows + r], want_scales[r * groups + g]) << what << " row " << r << " group " << g;
          }
        }
        cudaFree(codes);
        cudaFree(scales);
      }
    }
  }
}

TEST_F(cuda_fp8, dummy_weights_match_the_host_quantizer) {
  for (dtype type : {dtype::f32, dtype::bf16}) {
    for (auto [block_out, block_in] : {std::pair<int64_t, int64_t>{128, 128}, {1, -1}}) {
      const int64_t rows = 256, cols = 384;
      quant_config q;
      q.kind = quant_config::method::fp8;
      q.block_out = block_out;
      q.block_in = block_in;
      const int64_t bi = q.fp8_block_in(cols);
      fp8_codes none;
      none.codes.assign(static_cast<size_t>(rows * cols), 0);
      none.scales.assign(static_cast<size_t>(((rows + block_out - 1) / block_out) * (cols / bi)), 0.0f);
      const tensor w = upload(none, rows, cols, block_out, block_in, type);
      const uint64_t key = dummy_key(3, "model.layers.0.mlp.down_proj.weight");
      ops_->fill_dummy_packed(w, key, 1e-3f);
      ops_->synchronize();
      // The host's: the float dummies as the model's type rounds them.
      const tensor f = ops_->alloc(type, rows, cols);
      ops_->fill_dummy(f, key, 1e-3f, 0.0f);
      const std::vector<float> values = download(f);
      fp8_codes want = none;
      fp8_quantize_blocks(values.data(), rows, cols, block_out, bi, want.codes.data(), want.scales.data());
      const std::string what = std::string(name_of(type)) + " block " + std::to_string(block_out);
      EXPECT_EQ(fetch<uint8_t>(w.packed.words, want.codes.size()), want.codes) << what;
      const int64_t blocks_in = cols / bi, stride = w.packed.scale_stride;
      const std::vector<float> got = fetch<float>(w.packed.fp8_scales, want.scales.size() / blocks_in * stride);
      for (size_t r = 0; r < want.scales.size() / blocks_in; ++r) {
        for (int64_t c = 0; c < blocks_in; ++c) {
          EXPECT_EQ(got[r * stride + c], want.scales[r * blocks_in + c]) << what << " block row " << r;
        }
      }
    }
  }
}

// linear() with an FP8 weight against the double sum over the same codes:
// the mma kernel (up to 16 rows) and cuBLASLt (more; rows past a multiple
// of 4 on the kernel), per-row and 128 x 128 block scales, every model
// type.
TEST_F(cuda_fp8, products_match_the_reference) {
  ops_->reserve_fp8(303, 1024);
  struct shape {
    int64_t rows, cols, block_out, block_in;
  };
  for (const shape s : {shape{256, 1024, 128, 128}, shape{384, 512, 1, -1}, shape{128, 896, 128, 128}}) {
    quant_config q;
    q.kind = quant_config::method::fp8;
    q.block_out = s.block_out;
    q.block_in = s.block_in;
    const int64_t bi = q.fp8_block_in(s.cols), groups = s.cols / bi;
    // Weights whose blocks differ in size (the scales' layout matters).
    std::vector<float> wf = random_values(s.rows * s.cols, 11, 1.0f);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) wf[static_cast<size_t>(r * s.cols + c)] *= 1.0f + float((r / 128 + 3 * (c / 128)) % 7);
    }
    fp8_codes f;
    f.codes.resize(wf.size());
    f.scales.resize(static_cast<size_t>(((s.rows + s.block_out - 1) / s.block_out) * groups));
    fp8_quantize_blocks(wf.data(), s.rows, s.cols, s.block_out, bi, f.codes.data(), f.scales.data());
    for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
      const tensor w = upload(f, s.rows, s.cols, s.block_out, s.block_in, type);
      for (int64_t m : {1, 3, 8, 9, 16, 17, 20, 64, 300, 301, 302, 303}) {
        std::vector<float> xh = random_values(m * s.cols, static_cast<uint32_t>(m), 2.0f);
        for (int64_t c = 0; c < s.cols; ++c) xh[static_cast<size_t>(c)] *= 1.0f + float(c / 128);
        const tensor x = ops_->alloc(type, m, s.cols), out = ops_->alloc(type, m, s.rows);
        ops_->upload(xh.data(), x);
        ops_->download(x, xh.data());  // as rounded
        ops_->linear(x, w, nullptr, out);
        const std::vector<float> got = download(out);
        std::vector<uint8_t> xq(static_cast<size_t>(m * s.cols));
        std::vector<float> xs(static_cast<size_t>(m * groups)), want(static_cast<size_t>(m * s.rows));
        fp8_quantize_activations(xh.data(), m, s.cols, bi, xq.data(), xs.data());
        fp8_w8a8_linear(xq.data(), xs.data(), m, f.codes.data(), f.scales.data(), s.rows, s.cols, s.block_out, bi,
                        want.data());
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
          worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
          scale = std::max(scale, std::fabs(double(want[i])));
        }
        // The mma kernel sums in float32; cuBLASLt's FP8 GEMM (more than
        // 16 rows) adds its partial sums with fewer bits (about 3e-4 of the
        // largest output seen on an H200).
        const double tol = (type != dtype::f32 ? 1e-2 : m <= 16 ? 1e-5 : 2e-3) * scale;
        EXPECT_LE(worst, tol) << name_of(type) << " " << s.rows << "x" << s.cols << " block " << s.block_out
                              << " m " << m << " (largest output " << scale << ")";
      }
    }
  }
}

// LoRA deltas over an FP8 base (linear_lora: the W8A8 product, then the
// deltas): the FP8 product alone plus B (A x), computed here in double
// from the same rounded x, A and B, on the tokens with the adapter; the
// others get the FP8 product alone. At 1, 5 and 40 tokens (the mma kernel
// and cuBLASLt).
TEST_F(cuda_fp8, lora_deltas_over_fp8_weights) {
  const int64_t rows = 128, cols = 256, rank = 8;
  ops_->reserve_fp8(40, cols);
  std::vector<float> wf = random_values(rows * cols, 3, 0.05f);
  fp8_codes f;
  f.codes.resize(wf.size());
  f.scales.resize(static_cast<size_t>(cols / 128));
  fp8_quantize_blocks(wf.data(), rows, cols, 128, 128, f.codes.data(), f.scales.data());
  const tensor w = upload(f, rows, cols, 128, 128, dtype::bf16);
  std::vector<float> ah = random_values(rank * cols, 4, 0.1f), bh = random_values(rows * rank, 5, 0.1f);
  lora_stack stack{ops_->alloc(dtype::bf16, rank, cols), ops_->alloc(dtype::bf16, rows, rank), 1, rank};
  ops_->upload(ah.data(), stack.a);
  ops_->upload(bh.data(), stack.b);
  ops_->download(stack.a, ah.data());  // as rounded
  ops_->download(stack.b, bh.data());
  for (int64_t m : {1, 5, 40}) {
    std::vector<int32_t> slots(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t) slots[static_cast<size_t>(t)] = t % 2 == 0 ? 0 : -1;
    const lora_delta delta = lora_delta_for(*ops_, stack, slots);
    std::vector<float> xh = random_values(m * cols, static_cast<uint32_t>(10 + m), 1.0f);
    const tensor x = ops_->alloc(dtype::bf16, m, cols);
    ops_->upload(xh.data(), x);
    ops_->download(x, xh.data());
    const tensor got = ops_->alloc(dtype::bf16, m, rows), base = ops_->alloc(dtype::bf16, m, rows);
    ops_->linear_lora(x, w, nullptr, delta, got);
    ops_->linear(x, w, nullptr, base);
    const std::vector<float> g = download(got), b = download(base);
    std::vector<double> want(b.begin(), b.end());
    double largest_delta = 0.0;
    for (int64_t t = 0; t < m; t += 2) {  // the tokens with the adapter
      for (int64_t o = 0; o < rows; ++o) {
        double d = 0.0;
        for (int64_t r = 0; r < rank; ++r) {
          double u = 0.0;
          for (int64_t c = 0; c < cols; ++c) u += double(ah[r * cols + c]) * xh[t * cols + c];
          d += double(bh[o * rank + r]) * u;
        }
        want[static_cast<size_t>(t * rows + o)] += d;
        largest_delta = std::max(largest_delta, std::fabs(d));
      }
    }
    double largest = 0.0;
    for (double v : want) largest = std::max(largest, std::fabs(v));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(g[i], want[i], std::fabs(want[i]) / 64 + largest / 256) << m << " tokens, output " << i;
    }
    EXPECT_GT(largest_delta, 0.05 * largest) << "the delta should matter";
  }
}

}  // namespace
}  // namespace troupe
