// model/fp8_linear.h: FP8 block quantization by hand-computed codes and
// scales, the activations' groups, the W8A8 product against the float
// product of the dequantized operands, online FP8's weights, and the
// block-FP8 fixture's codes read for the packed kernels.
#include "model/fp8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "model/model_config.h"
#include "model/quantization.h"
#include "model/weights.h"

namespace troupe {
namespace {

TEST(fp8_linear, blocks_quantize_by_hand) {
  // Two rows, blocks of 1 x 2: scale = amax / 448, code = e4m3(w / scale).
  const std::vector<float> w = {448.0f, -224.0f, 0.0f, 0.0f, 1.0f, 0.5f, 3.0f, -1.5f};
  std::vector<uint8_t> codes(8);
  std::vector<float> scales(4);
  fp8_quantize_blocks(w.data(), 2, 4, 1, 2, codes.data(), scales.data());
  // 448 = 1.75 x 2^8: exponent 15, mantissa 6 (0x7E); 224 = 1.75 x 2^7 (0x76).
  EXPECT_EQ(codes, (std::vector<uint8_t>{0x7E, 0xF6, 0x00, 0x00, 0x7E, 0x76, 0x7E, 0xF6}));
  EXPECT_EQ(scales, (std::vector<float>{1.0f, 1.0f /* all zeros */, 1.0f / 448.0f, 3.0f / 448.0f}));
  // One block of 2 x 4 (the larger block takes both rows' amax).
  fp8_quantize_blocks(w.data(), 2, 4, 2, 4, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(codes[4], f32_to_e4m3(1.0f));  // 0x38: exponent 7, mantissa 0
  EXPECT_EQ(codes[4], 0x38);
}

TEST(fp8_linear, activation_groups_and_a_short_last_group) {
  const std::vector<float> x = {1.0f, -2.0f, 4.0f, 8.0f, 0.25f};
  std::vector<uint8_t> codes(5);
  std::vector<float> scales(2);
  fp8_quantize_activations(x.data(), 1, 5, 4, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 8.0f / 448.0f);
  EXPECT_EQ(scales[1], 0.25f / 448.0f);
  EXPECT_EQ(codes[3], 0x7E);  // the group's amax is 448
  EXPECT_EQ(codes[4], 0x7E);
  EXPECT_NEAR(e4m3_to_f32(codes[0]) * scales[0], 1.0f, 1e-6f);  // 56 is exact in e4m3
}

TEST(fp8_linear, w8a8_product_is_the_product_of_the_dequantized_operands) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 3, n = 40, k = 256;
  std::vector<float> x(rows * k), w(n * k);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng) * 0.1f;
  for (auto [block_out, block_in] : {std::pair<int64_t, int64_t>{1, k}, {16, 128}}) {
    std::vector<uint8_t> xq(x.size()), wq(w.size());
    std::vector<float> xs(rows * (k / block_in)), ws(((n + block_out - 1) / block_out) * (k / block_in));
    fp8_quantize_activations(x.data(), rows, k, block_in, xq.data(), xs.data());
    fp8_quantize_blocks(w.data(), n, k, block_out, block_in, wq.data(), ws.data());
    std::vector<float> out(rows * n), xd(x.size()), wd(w.size());
    fp8_w8a8_linear(xq.data(), xs.data(), rows, wq.data(), ws.data(), n, k, block_out, block_in, out.data());
    fp8_block_dequantize(xq.data(), xs.data(), rows, k, 1, block_in, xd.data());
    fp8_block_dequantize(wq.data(), ws.data(), n, k, block_out, block_in, wd.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < n; ++o) {
        double want = 0.0;
        for (int64_t i = 0; i < k; ++i) want += double(xd[r * k + i]) * wd[o * k + i];
        EXPECT_NEAR(out[r * n + o], want, 1e-5 * (1.0 + std::fabs(want))) << r << " " << o;
      }
    }
    // Quantization error is that of 3 mantissa bits: small against the
    // unquantized product.
    double err = 0.0, norm = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < n; ++o) {
        double exact = 0.0;
        for (int64_t i = 0; i < k; ++i) exact += double(x[r * k + i]) * w[o * k + i];
        err += (out[r * n + o] - exact) * (out[r * n + o] - exact);
        norm += exact * exact;
      }
    }
    EXPECT_LT(std::sqrt(err / norm), 0.06);
  }
}

TEST(fp8_linear, which_tensors_online_fp8_quantizes) {
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.3.mlp.down_proj.weight",
                           "model.layers.1.mlp.shared_expert.gate_proj.weight",
                           "model.layers.0.block_sparse_moe.experts.2.w3.weight"}) {
    EXPECT_TRUE(fp8_quantizes(name)) << name;
  }
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.gate.weight",
                           "model.layers.0.input_layernorm.weight", "model.layers.0.mlp.shared_expert_gate.weight",
                           "model.layers.0.self_attn.q_proj.bias"}) {
    EXPECT_FALSE(fp8_quantizes(name)) << name;
  }
  quant_config q;
  q.kind = quant_config::method::fp8;
  EXPECT_EQ(fp8_scale_stride(q, 4096), 32);
  EXPECT_EQ(fp8_scale_stride(q, 768), 8);  // 6 blocks, padded to 16 bytes
  EXPECT_EQ(fp8_padded_scales({1, 2, 3, 4, 5, 6}, 2, 3, 4), (std::vector<float>{1, 2, 3, 0, 4, 5, 6, 0}));
  q.block_out = 1;
  q.block_in = -1;
  EXPECT_EQ(fp8_scale_stride(q, 4096), 1);
}

// The block-FP8 fixture's linears as the packed kernels get them: its
// codes and scales unchanged; a float checkpoint under online FP8: the
// float tensor quantized a row at a time, and read_f32 gives that
// quantization dequantized.
TEST(fp8_linear, checkpoints_read_for_the_kernels) {
  const std::filesystem::path data(TROUPE_TEST_DATA);
  {
    auto config = load_model_config(data / "quant" / "tiny-qwen3-fp8-block");
    ASSERT_TRUE(config.ok()) << config.error_message();
    auto ckpt = checkpoint::open(data / "quant" / "tiny-qwen3-fp8-block");
    ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
    ckpt->set_quantization(config->quantization);
    const int64_t out = config->intermediate_size, in = config->hidden_size;
    const std::string name = "model.layers.1.mlp.gate_proj.weight";
    auto f = ckpt->read_fp8_linear(name, out, in);
    ASSERT_TRUE(f.ok()) << f.error_message();
    std::vector<float> w(static_cast<size_t>(out * in)), from_codes(w.size());
    ASSERT_TRUE(ckpt->read_f32(name, {out, in}, w.data()).ok());
    fp8_block_dequantize(f->codes.data(), f->scales.data(), out, in, 128, 128, from_codes.data());
    EXPECT_EQ(from_codes, w);
    auto wrong = ckpt->read_fp8_linear(name, out, in + 128);
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error_message().find("has shape"), std::string::npos) << wrong.error_message();
  }
  auto config = load_model_config(data / "models" / "tiny-llama");
  ASSERT_TRUE(config.ok()) << config.error_message();
  auto ckpt = checkpoint::open(data / "models" / "tiny-llama");
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  const int64_t out = config->intermediate_size, in = config->hidden_size;
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  std::vector<float> raw(static_cast<size_t>(out * in)), online(raw.size()), want(raw.size());
  ASSERT_TRUE(ckpt->read_f32(name, {out, in}, raw.data()).ok());
  auto q = resolve_quantization("fp8", config->quantization, false);
  ASSERT_TRUE(q.ok()) << q.error_message();
  ckpt->set_quantization(*q);
  auto f = ckpt->read_fp8_linear(name, out, in);
  ASSERT_TRUE(f.ok()) << f.error_message();
  std::vector<uint8_t> codes(raw.size());
  std::vector<float> scales(static_cast<size_t>(out));
  fp8_quantize_blocks(raw.data(), out, in, 1, in, codes.data(), scales.data());
  EXPECT_EQ(f->codes, codes);
  EXPECT_EQ(f->scales, scales);
  ASSERT_TRUE(ckpt->read_f32(name, {out, in}, online.data()).ok());
  fp8_block_dequantize(codes.data(), scales.data(), out, in, 1, in, want.data());
  EXPECT_EQ(online, want);
  EXPECT_NE(online, raw);
  // Not a linear: read as stored.
  std::vector<float> norm(static_cast<size_t>(in)), norm_raw(norm.size());
  ASSERT_TRUE(ckpt->read_f32("model.norm.weight", {in}, norm.data()).ok());
  ckpt->set_quantization(quant_config{});
  ASSERT_TRUE(ckpt->read_f32("model.norm.weight", {in}, norm_raw.data()).ok());
  EXPECT_EQ(norm, norm_raw);
}

}  // namespace
}  // namespace troupe
