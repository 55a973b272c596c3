// Quantized checkpoints (model/quantization.h): each packing rule on words
// computed by hand, e4m3 on known codes, quantization_config's checks, and
// checkpoints written here with packed tensors (good, mismatched, missing)
// read through checkpoint::read_f32. The fixtures' goldens are
// tests/cli/golden_formats_test.cpp's.
#include "model/quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/weights.h"
#include "tests/model/safetensors_writer.h"
#include "tests/temp_dir.h"

namespace troupe {
namespace {

using namespace safetensors_writing;

TEST(quantization, gptq_4bit_words) {
  // in 8, out 8: row 0 of qweight holds inputs 0..7 of each output; output
  // o's word 0x76543210 + o gives input i the value i (+ o at input 0).
  std::vector<int32_t> qweight(8);
  for (int o = 0; o < 8; ++o) qweight[o] = static_cast<int32_t>(0x76543210u + static_cast<uint32_t>(o));
  // v1 stores zero - 1: 0x77777777 is zero 8 for all eight outputs.
  const std::vector<int32_t> qzeros = {0x77777777};
  std::vector<float> scales(8);
  for (int o = 0; o < 8; ++o) scales[o] = 0.5f * static_cast<float>(o + 1);
  const std::vector<int32_t> g_idx(8, 0);
  std::vector<float> w(64);
  gptq_dequantize(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 8, 4, true, w.data());
  for (int o = 0; o < 8; ++o) {
    for (int i = 0; i < 8; ++i) {
      const int q = i == 0 ? o : i;
      EXPECT_EQ(w[o * 8 + i], static_cast<float>(q - 8) * scales[o]) << o << "," << i;
    }
  }
  // gptq_v2: zeros as stored (7).
  gptq_dequantize(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 8, 4, false, w.data());
  EXPECT_EQ(w[1 * 8 + 3], (3.0f - 7.0f) * scales[1]);
}

TEST(quantization, gptq_8bit_words_and_act_order_groups) {
  // in 8, out 4: rows of 4 inputs; word 0x03020100 gives inputs 0..3 the values 0..3.
  const std::vector<int32_t> qweight = {0x03020100, 0x03020100, 0x03020100, 0x03020100,
                                        0x07060504, 0x07060504, 0x07060504, 0x07060504};
  // Two groups; v1 zeros: 0x7F (zero 128) in group 0, 0x00 (zero 1) in group 1.
  const std::vector<int32_t> qzeros = {0x7F7F7F7F, 0x00000000};
  const std::vector<float> scales = {1, 1, 1, 1, 2, 2, 2, 2};
  // Act-order: inputs 0, 2, 4, 6 in group 1, the others in group 0.
  const std::vector<int32_t> g_idx = {1, 0, 1, 0, 1, 0, 1, 0};
  std::vector<float> w(32);
  gptq_dequantize(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 4, 8, true, w.data());
  for (int o = 0; o < 4; ++o) {
    for (int i = 0; i < 8; ++i) {
      const float expected = i % 2 == 0 ? (static_cast<float>(i) - 1.0f) * 2.0f : static_cast<float>(i) - 128.0f;
      EXPECT_EQ(w[o * 8 + i], expected) << o << "," << i;
    }
  }
}

TEST(quantization, awq_interleaved_nibbles) {
  // in 2, out 8 (one word per input): nibble k of 0x76543210 holds k, and
  // column c sits at nibble [0, 4, 1, 5, 2, 6, 3, 7][c].
  const std::vector<int32_t> qweight = {0x76543210, 0x00000000};
  const std::vector<int32_t> qzeros = {0x11111111};  // zero 1 for every column
  std::vector<float> scales(8, 0.25f);
  std::vector<float> w(16);
  awq_dequantize(qweight.data(), qzeros.data(), scales.data(), 2, 8, 2, w.data());
  const int nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(w[c * 2 + 0], (static_cast<float>(nibble[c]) - 1.0f) * 0.25f) << c;
    EXPECT_EQ(w[c * 2 + 1], -0.25f) << c;
  }
}

TEST(quantization, e4m3_codes_and_fp8_blocks) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);  // the largest
  EXPECT_EQ(e4m3_to_f32(0xC0), -2.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x0F), std::ldexp(1.875f, -6));  // the smallest exponent, all mantissa
  EXPECT_EQ(e4m3_to_f32(0x07), std::ldexp(0.875f, -6));  // the largest subnormal
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)) && e4m3_to_f32(0x80) == 0.0f);
  // out 3, in 3 in blocks of 2 x 2: scales [[1, 2], [4, 8]].
  const std::vector<uint8_t> q(9, 0x38);
  const std::vector<float> scale_inv = {1, 2, 4, 8};
  std::vector<float> w(9);
  fp8_block_dequantize(q.data(), scale_inv.data(), 3, 3, 2, 2, w.data());
  EXPECT_EQ(w, (std::vector<float>{1, 1, 2, 1, 1, 2, 4, 4, 8}));
}

// The FP8 KV cache's encoding: nearest code, ties to even, saturated.
TEST(quantization, e4m3_encoding) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;  // every code, -0 too
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);   // halfway between 1 and 1.125: to the even 1
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);   // halfway between 1.125 and 1.25: to the even 1.25
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);     // nearer 1.125
  EXPECT_EQ(f32_to_e4m3(-3.3f), 0xC5);     // -3.25 (2^1 x 1.625)
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7E);   // saturated to 448
  EXPECT_EQ(f32_to_e4m3(-460.0f), 0xFE);   // -448
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal: to the even 0
  EXPECT_EQ(f32_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 subnormal steps: to the even 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(0.96f, -6)), 0x08);   // rounds up into the smallest normal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.97f, -1)), 0x38);   // rounds up into the next exponent: 1.0
}

std::string config_error(const std::string& json) {
  auto r = parse_quant_config(json, "config.json");
  return r.ok() ? "(parsed)" : r.error_message();
}

TEST(quantization, config_is_read_and_checked) {
  auto g = parse_quant_config(R"({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": true,
                                  "sym": false, "checkpoint_format": "gptq_v2"})", "c");
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->kind, quant_config::method::gptq);
  EXPECT_EQ(g->bits, 8);
  EXPECT_TRUE(g->desc_act);
  EXPECT_FALSE(g->zeros_minus_one);
  auto f = parse_quant_config(R"({"quant_method": "fp8", "weight_block_size": [64, 32]})", "c");
  ASSERT_TRUE(f.ok()) << f.error_message();
  EXPECT_EQ(f->block_out, 64);
  EXPECT_EQ(f->block_in, 32);
  EXPECT_EQ(config_error(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})"),
            "config.json: 'quantization_config.bits': 3 is not supported (GPTQ: 4 or 8)");
  EXPECT_EQ(config_error(R"({"quant_method": "awq", "bits": 4, "version": "gemv"})"),
            "config.json: 'quantization_config.version': 'gemv' is not supported (gemm)");
  EXPECT_EQ(config_error(R"({"quant_method": "awq", "bits": 4, "zero_point": false})"),
            "config.json: 'quantization_config.zero_point': false is not supported (AWQ with zero points only)");
  EXPECT_EQ(config_error(R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})"),
            "config.json: 'quantization_config.activation_scheme': 'static' is not supported (dynamic)");
  EXPECT_EQ(config_error(R"({"quant_method": "fp8"})"),
            "config.json: 'quantization_config.weight_block_size': required (block FP8; per-tensor FP8 "
            "checkpoints are not supported yet)");
  // AutoGPTQ's quantize_config.json need not name the method.
  auto q = parse_quant_config(R"({"bits": 4, "group_size": 128, "desc_act": false})", "quantize_config.json", "gptq");
  ASSERT_TRUE(q.ok()) << q.error_message();
  EXPECT_EQ(q->kind, quant_config::method::gptq);
  EXPECT_EQ(config_error(R"({"quant_method": "bitsandbytes"})"),
            "config.json: 'quantization_config.quant_method': 'bitsandbytes' is not supported (gptq, awq, fp8)");
  EXPECT_EQ(config_error(R"({"bits": 4, "group_size": 0})"),
            "config.json: 'quantization_config.quant_method': required (gptq, awq, fp8)");
  EXPECT_EQ(config_error(R"({"quant_method": "gptq", "bits": "4"})"),
            "config.json: 'quantization_config.bits' must be an integer");
  EXPECT_EQ(config_error(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})"),
            "config.json: 'quantization_config.group_size': 0 must be positive or -1");
}

bytes i32_bytes(const std::vector<int32_t>& values) {
  bytes b(values.size() * 4);
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

class quantized_checkpoint : public ::testing::Test {
 protected:
  testing::temp_dir dir_{"quant-test"};
  quant_config gptq() {
    auto q = parse_quant_config(R"({"quant_method": "gptq", "bits": 4, "group_size": 8})", "c");
    return q.value();
  }
  // A GPTQ linear of out 8, in 8 (one group), scales 1, zeros 8.
  std::vector<raw_tensor> linear(std::vector<int64_t> qweight_shape = {1, 8}) {
    std::vector<int32_t> words(static_cast<size_t>(qweight_shape[0] * qweight_shape[1]), 0x76543210);
    return {{"l.qweight", "I32", qweight_shape, i32_bytes(words)},
            {"l.qzeros", "I32", {1, 1}, i32_bytes({0x77777777})},
            {"l.scales", "F16", {1, 8}, u16_bytes({0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00})}};
  }
  std::string read_error(const std::vector<raw_tensor>& tensors, const quant_config& q) {
    write_safetensors(dir_.path() / "model.safetensors", tensors);
    auto ckpt = checkpoint::open(dir_.path());
    if (!ckpt.ok()) return ckpt.error_message();
    ckpt->set_quantization(q);
    std::vector<float> w(64);
    const status s = ckpt->read_f32("l.weight", {8, 8}, w.data());
    return s.ok() ? "(read)" : s.error_message();
  }
};

TEST_F(quantized_checkpoint, a_packed_linear_reads_as_its_weight) {
  write_safetensors(dir_.path() / "model.safetensors", linear());
  auto ckpt = checkpoint::open(dir_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  ckpt->set_quantization(gptq());
  std::vector<float> w(64);
  const status s = ckpt->read_f32("l.weight", {8, 8}, w.data());
  ASSERT_TRUE(s.ok()) << s.error_message();
  for (int o = 0; o < 8; ++o) {
    for (int i = 0; i < 8; ++i) EXPECT_EQ(w[o * 8 + i], static_cast<float>(i - 8));
  }
  // Without the quantization the packed words are not a weight.
  ckpt->set_quantization(quant_config{});
  EXPECT_NE(ckpt->read_f32("l.weight", {8, 8}, w.data()).error_message().find("no GPTQ or AWQ quantization_config"),
            std::string::npos);
  EXPECT_EQ(ckpt->read_f32("m.weight", {8, 8}, w.data()).error_message(),
            "missing tensor 'm.weight' (looked in model.safetensors)");
}

TEST_F(quantized_checkpoint, mismatched_or_missing_tensors_are_named) {
  EXPECT_EQ(read_error(linear({2, 8}), gptq()),
            "tensor 'l.qweight' in model.safetensors has shape [2, 8], expected [1, 8] (GPTQ 4-bit, group size 8)");
  std::vector<raw_tensor> no_zeros = linear();
  no_zeros.erase(no_zeros.begin() + 1);
  EXPECT_EQ(read_error(no_zeros, gptq()),
            "missing tensor 'l.qzeros' (looked in model.safetensors) (GPTQ 4-bit, group size 8)");
  std::vector<raw_tensor> float_words = linear();
  float_words[0].dtype = "F32";
  EXPECT_EQ(read_error(float_words, gptq()),
            "tensor 'l.qweight' in model.safetensors is F32, expected I32 (GPTQ 4-bit, group size 8)");
  std::vector<raw_tensor> bad_group = linear();
  bad_group.push_back({"l.g_idx", "I32", {8}, i32_bytes({0, 0, 0, 0, 0, 0, 0, 3})});
  EXPECT_EQ(read_error(bad_group, gptq()),
            "tensor 'l.g_idx' in model.safetensors: input 7 is in group 3, outside [0, 1)");
  // Act-order without g_idx: its groups cannot be guessed.
  auto act_order = parse_quant_config(R"({"quant_method": "gptq", "bits": 4, "group_size": 8, "desc_act": true})",
                                      "c").value();
  EXPECT_EQ(read_error(linear(), act_order),
            "missing tensor 'l.g_idx' (looked in model.safetensors), which act-order (desc_act) GPTQ needs");
  // Packed words without a quantization_config.
  EXPECT_EQ(read_error(linear(), quant_config{}),
            "tensor 'l.qweight' is a packed (GPTQ / AWQ) weight, but config.json has no GPTQ or AWQ "
            "quantization_config");
  // FP8 without its scales, and without an FP8 config.
  const std::vector<raw_tensor> fp8 = {{"l.weight", "F8_E4M3", {8, 8}, bytes(64, 0x38)}};
  auto q = parse_quant_config(R"({"quant_method": "fp8", "weight_block_size": [4, 4]})", "c").value();
  EXPECT_EQ(read_error(fp8, q),
            "missing tensor 'l.weight_scale_inv' (looked in model.safetensors) (block FP8, blocks of 4 x 4)");
  EXPECT_EQ(read_error(fp8, quant_config{}),
            "tensor 'l.weight' in model.safetensors is F8_E4M3, but config.json has no FP8 quantization_config");
  // A corrupt FP8 weight: a NaN code, a negative or infinite scale (a
  // zero scale is a block of zeros, and reads).
  std::vector<raw_tensor> nan_code = fp8;
  nan_code[0].data[2 * 8 + 5] = 0xFF;
  nan_code.push_back({"l.weight_scale_inv", "F32", {2, 2}, f32_bytes({1.0f, 1.0f, 1.0f, 1.0f})});
  EXPECT_EQ(read_error(nan_code, q),
            "tensor 'l.weight' in model.safetensors holds a NaN code at [2, 5] (a corrupt FP8 checkpoint?)");
  std::vector<raw_tensor> bad_scale = fp8;
  bad_scale.push_back({"l.weight_scale_inv", "F32", {2, 2}, f32_bytes({1.0f, 0.0f, -0.5f, 1.0f})});
  EXPECT_EQ(read_error(bad_scale, q),
            "tensor 'l.weight_scale_inv' in model.safetensors holds -0.500000 at [1, 0] (scales are finite and not "
            "negative)");
  bad_scale.back().data = f32_bytes({1.0f, 0.0f, 2.0f, INFINITY});
  EXPECT_EQ(read_error(bad_scale, q),
            "tensor 'l.weight_scale_inv' in model.safetensors holds inf at [1, 1] (scales are finite and not "
            "negative)");
  bad_scale.back().data = f32_bytes({1.0f, 0.0f, 2.0f, 1.0f});
  EXPECT_EQ(read_error(bad_scale, q), "(read)");
  // The packed path (read_fp8_linear) checks the same.
  write_safetensors(dir_.path() / "model.safetensors", nan_code);
  auto ckpt = checkpoint::open(dir_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  ckpt->set_quantization(q);
  auto f = ckpt->read_fp8_linear("l.weight", 8, 8);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error_message().find("holds a NaN code at [2, 5]"), std::string::npos) << f.error_message();
}

}  // namespace
}  // namespace troupe
