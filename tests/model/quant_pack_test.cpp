// The packed layout of GPTQ / AWQ linears (model/quant_pack.h): words
// packed by hand, act-order's permutation and its refusals, AWQ's nibble
// order, the round-to-nearest quantizer on a hand-computed group, and the
// fixtures' every quantized linear packed and unpacked against the
// exact dequantization checkpoint::read_f32 gives.
#include "model/quant_pack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/model_config.h"
#include "model/weights.h"

namespace troupe {
namespace {

TEST(quant_pack, gptq_words_move_to_rows) {
  // in 8, out 8, 4 bits, groups of 4: qweight row 0 holds inputs 0..7 of
  // each output; output o's word 0x76543210 + o gives input i the code i
  // (input 0: o).
  std::vector<int32_t> qweight(8);
  for (int o = 0; o < 8; ++o) qweight[o] = static_cast<int32_t>(0x76543210u + static_cast<uint32_t>(o));
  // v1 zeros minus one: group 0 zero 8 (stored 7), group 1 zero 1 (stored 0).
  const std::vector<int32_t> qzeros = {0x77777777, 0x00000000};
  std::vector<float> scales(16);
  for (int i = 0; i < 16; ++i) scales[i] = 0.25f * static_cast<float>(i + 1);
  auto p = pack_gptq(qweight.data(), qzeros.data(), scales.data(), nullptr, 8, 8, 4, 4, true, "t");
  ASSERT_TRUE(p.ok()) << p.error_message();
  EXPECT_EQ(p->words_per_row(), 1);
  EXPECT_TRUE(p->perm.empty());
  // Row o: one word, column j at nibble j: the same word as the checkpoint's.
  for (int o = 0; o < 8; ++o) EXPECT_EQ(p->words[o], 0x76543210u + static_cast<uint32_t>(o)) << o;
  EXPECT_EQ(p->zeros[0], 8);  // row 0, group 0
  EXPECT_EQ(p->zeros[1], 1);  // row 0, group 1
  EXPECT_EQ(f16_to_f32(p->scales[2 * 3 + 1]), scales[8 + 3]);  // row 3, group 1
  std::vector<float> got(64), want(64);
  unpack_linear(*p, got.data());
  std::vector<int32_t> g_idx(8);
  for (int i = 0; i < 8; ++i) g_idx[i] = i / 4;
  gptq_dequantize(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 8, 4, true, want.data());
  EXPECT_EQ(got, want);
}

TEST(quant_pack, act_order_sorts_inputs_by_group) {
  // in 8, out 4, 8 bits, groups of 4; act-order puts inputs 0, 2, 4, 6 in
  // group 1 and the odd ones in group 0.
  const std::vector<int32_t> qweight = {0x03020100, 0x13121110, 0x23222120, 0x33323130,
                                        0x07060504, 0x17161514, 0x27262524, 0x37363534};
  const std::vector<int32_t> qzeros = {0x7F7F7F7F, 0x00000000};
  const std::vector<float> scales = {1, 1, 1, 1, 2, 2, 2, 2};
  const std::vector<int32_t> g_idx = {1, 0, 1, 0, 1, 0, 1, 0};
  auto p = pack_gptq(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 4, 8, 4, true, "t");
  ASSERT_TRUE(p.ok()) << p.error_message();
  EXPECT_EQ(p->perm, (std::vector<int32_t>{1, 3, 5, 7, 0, 2, 4, 6}));
  // Row 1: packed columns 0..3 are inputs 1, 3, 5, 7 (codes 0x11, 0x13,
  // 0x15, 0x17), then inputs 0, 2, 4, 6.
  EXPECT_EQ(p->words[1 * 2 + 0], 0x17151311u);
  EXPECT_EQ(p->words[1 * 2 + 1], 0x16141210u);
  std::vector<float> got(32), want(32);
  unpack_linear(*p, got.data());
  gptq_dequantize(qweight.data(), qzeros.data(), scales.data(), g_idx.data(), 8, 4, 8, true, want.data());
  EXPECT_EQ(got, want);
  // Groups of other sizes than the group size: the kernels cannot read them.
  const std::vector<int32_t> uneven = {1, 0, 1, 0, 1, 0, 1, 1};
  auto bad = pack_gptq(qweight.data(), qzeros.data(), scales.data(), uneven.data(), 8, 4, 8, 4, true, "m.q_proj");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find("'m.q_proj': g_idx puts fewer than 4 inputs in group 0"), std::string::npos)
      << bad.error_message();
}

TEST(quant_pack, awq_columns_leave_the_interleave) {
  // in 8, out 8 (one word per input): input 0's word 0x76543210 holds k at
  // nibble k, and column c sits at nibble [0, 4, 1, 5, 2, 6, 3, 7][c];
  // input 1 has code 1 in every column, the others 0.
  std::vector<int32_t> qweight(8, 0);
  qweight[0] = 0x76543210;
  qweight[1] = 0x11111111;
  const std::vector<int32_t> qzeros = {0x22222222};  // zero 2 for every column
  const std::vector<float> scales(8, 0.25f);
  const packed_linear p = pack_awq(qweight.data(), qzeros.data(), scales.data(), 8, 8, 8);
  const int nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int c = 0; c < 8; ++c) {
    // Row c, one word: input 0's code in bits 0..3, input 1's above it.
    EXPECT_EQ(p.words[c], static_cast<uint32_t>(nibble[c]) | 0x10u) << c;
    EXPECT_EQ(p.zeros[c], 2);
  }
  std::vector<float> got(64), want(64);
  unpack_linear(p, got.data());
  awq_dequantize(qweight.data(), qzeros.data(), scales.data(), 8, 8, 8, want.data());
  EXPECT_EQ(got, want);
}

TEST(quant_pack, tensor_core_layout_places_fragments) {
  // 32 rows x 128 columns (two row blocks, two chunks), code (row + col) % 16.
  packed_linear p;
  p.bits = 4;
  p.group_size = 64;
  p.rows = 32;
  p.cols = 128;
  p.words.assign(32 * 16, 0u);
  p.scales.assign(32 * 2, f32_to_f16(0.5f));
  p.zeros.assign(32 * 2, 3);
  for (int64_t o = 0; o < 32; ++o) {
    for (int64_t j = 0; j < 128; ++j) {
      p.words[static_cast<size_t>(o * 16 + j / 8)] |= static_cast<uint32_t>((o + j) % 16) << (4 * (j % 8));
    }
  }
  ASSERT_TRUE(mma_layout_fits(4, 32, 128, 64));
  EXPECT_FALSE(mma_layout_fits(8, 32, 128, 64));
  EXPECT_FALSE(mma_layout_fits(4, 24, 128, 64));
  EXPECT_FALSE(mma_layout_fits(4, 32, 128, 32));
  const packed_linear m = to_mma_layout(p);
  EXPECT_TRUE(m.mma);
  // Row block 0, chunk 0, lane 5 (g 1, columns 2 and 3), tile 1 (columns
  // 16..31): nibbles 0..7 hold (1, 18), (9, 18), (1, 26), (9, 26), (1, 19),
  // (9, 19), (1, 27), (9, 27): codes 3, 11, 11, 3, 4, 12, 12, 4.
  EXPECT_EQ(m.words[(0 * 32 + 5) * 4 + 1], 0x4CC43BB3u) << std::hex << m.words[21];
  // Row block 1, chunk 1, lane 0, tile 0: (16, 64), (24, 64), (16, 72),
  // (24, 72), (16, 65), (24, 65), (16, 73), (24, 73): 0, 8, 8, 0, 1, 9, 9, 1.
  EXPECT_EQ(m.words[((1 * 2 + 1) * 32 + 0) * 4 + 0], 0x19910880u) << std::hex;
  std::vector<float> a(32 * 128), b(32 * 128);
  unpack_linear(p, a.data());
  unpack_linear(m, b.data());
  EXPECT_EQ(a, b);
}

TEST(quant_pack, round_to_nearest_by_hand) {
  // One group of 8 values in [-1, 1]: scale float16(2 / 15) =
  // 0.1333007812, zero rint(1 / scale) = rint(7.5018) = 8.
  const std::vector<float> w = {-1.0f, 0.0f, 0.5f, 1.0f, 0.2f, -0.2f, 0.0667f, -0.5f};
  const packed_linear p = rtn_quantize(w.data(), 1, 8, 4, 8);
  const float s = f16_to_f32(p.scales[0]);
  EXPECT_EQ(s, 0.1333007812f);
  EXPECT_EQ(p.zeros[0], 8);
  // Codes: rint(w / s) + 8, clamped to 0..15: 0, 8, 12, 15 (16), 10, 6, 9 (8.50), 4.
  EXPECT_EQ(p.words[0], 0x496AFC80u) << std::hex << p.words[0];
  std::vector<float> back(8);
  unpack_linear(p, back.data());
  for (size_t i = 0; i < w.size(); ++i) {
    // Within half a step, except 1.0 (clamped at code 15: one step under).
    EXPECT_LE(std::fabs(back[i] - w[i]), i == 3 ? s * 0.51f : s * 0.5f) << i;
  }
  // A group of zeros: scale 1, codes at the zero.
  const std::vector<float> zeros(32, 0.0f);
  const packed_linear z = rtn_quantize(zeros.data(), 1, 32, 8, -1);
  EXPECT_EQ(f16_to_f32(z.scales[0]), 1.0f);
  std::vector<float> zback(32, 1.0f);
  unpack_linear(z, zback.data());
  EXPECT_EQ(zback, zeros);
}

TEST(quant_pack, layout_limits_and_bytes) {
  quant_config q;
  q.kind = quant_config::method::gptq;
  q.bits = 4;
  q.group_size = 128;
  std::string why;
  EXPECT_TRUE(packable(q, 4096, 4096, &why));
  EXPECT_FALSE(packable(q, 8, 48, &why));
  EXPECT_EQ(why, "inputs (48) not a multiple of 32");
  q.group_size = 48;
  EXPECT_FALSE(packable(q, 8, 96, &why));
  EXPECT_EQ(why, "group size 48 not a multiple of 32");
  q.group_size = 128;
  // 4096 x 4096 at 4 bits: 8 MiB of codes, 32 groups a row of a float16
  // scale and a byte zero.
  EXPECT_EQ(packed_bytes(q, 4096, 4096), 4096 * 2048 + 4096 * 32 * 3);
  q.desc_act = true;
  EXPECT_EQ(packed_bytes(q, 4096, 4096), 4096 * 2048 + 4096 * 32 * 3 + 4096 * 4);
  // FP8 (model/fp8_linear.h): blocks of 128 inputs or whole rows, rows
  // of 16 and of the block's.
  q.kind = quant_config::method::fp8;
  q.block_out = 128;
  q.block_in = 128;
  EXPECT_TRUE(packable(q, 4096, 4096, &why));
  EXPECT_EQ(packed_bytes(q, 4096, 1024), 4096 * 1024 + 32 * 8 * 4);  // 8 blocks a row of scales, padded to 8
  EXPECT_EQ(packed_bytes(q, 4096, 896), 4096 * 896 + 32 * 8 * 4);   // 7, padded to 8
  EXPECT_FALSE(packable(q, 4096, 4000, &why));
  EXPECT_EQ(why, "inputs (4000) not a multiple of 128");
  EXPECT_FALSE(packable(q, 64, 4096, &why));
  EXPECT_EQ(why, "outputs (64) not a multiple of 16 and of the block's 128");
  q.block_in = 64;
  EXPECT_FALSE(packable(q, 4096, 4096, &why));
  EXPECT_EQ(why, "FP8 blocks of 64 inputs (the FP8 kernels take 128, or a whole row)");
  q.block_in = -1;  // online: a scale a row, unpadded
  q.block_out = 1;
  EXPECT_TRUE(packable(q, 48, 4096, &why));
  EXPECT_EQ(packed_bytes(q, 48, 4096), 48 * 4096 + 48 * 4);
  q.block_out = 8;
  EXPECT_FALSE(packable(q, 4096, 4096, &why));
  EXPECT_EQ(why, "FP8 blocks of 8 outputs (the FP8 kernels take 1 or a multiple of 16)");
}

// Every quantized linear of the GPTQ and AWQ fixtures: packed, then
// unpacked, equals the checkpoint's exact dequantization.
TEST(quant_pack, fixtures_unpack_to_their_dequantization) {
  const std::filesystem::path root = std::filesystem::path(TROUPE_TEST_DATA) / "quant";
  for (const char* name : {"tiny-llama-gptq-g64", "tiny-llama-gptq-actorder", "tiny-qwen2-awq-g64"}) {
    SCOPED_TRACE(name);
    auto config = load_model_config(root / name);
    ASSERT_TRUE(config.ok()) << config.error_message();
    auto ckpt = checkpoint::open(root / name);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
    ckpt->set_quantization(config->quantization);
    const int64_t h = config->hidden_size, inter = config->intermediate_size;
    const int64_t q_rows = config->num_attention_heads * config->head_dim;
    const int64_t kv_rows = config->num_key_value_heads * config->head_dim;
    const std::vector<std::tuple<std::string, int64_t, int64_t>> linears = {
        {"self_attn.q_proj", q_rows, h}, {"self_attn.k_proj", kv_rows, h}, {"self_attn.v_proj", kv_rows, h},
        {"self_attn.o_proj", h, q_rows}, {"mlp.gate_proj", inter, h},      {"mlp.up_proj", inter, h},
        {"mlp.down_proj", h, inter}};
    int permuted = 0;
    for (int64_t layer = 0; layer < config->num_hidden_layers; ++layer) {
      for (const auto& [module, out, in] : linears) {
        const std::string tensor_name = "model.layers." + std::to_string(layer) + "." + module + ".weight";
        auto p = ckpt->read_packed_linear(tensor_name, out, in);
        ASSERT_TRUE(p.ok()) << p.error_message();
        EXPECT_TRUE(packable(config->quantization, out, in, nullptr)) << tensor_name;
        permuted += p->perm.empty() ? 0 : 1;
        std::vector<float> got(static_cast<size_t>(out * in)), want(got.size());
        unpack_linear(*p, got.data());
        ASSERT_TRUE(ckpt->read_f32(tensor_name, {out, in}, want.data()).ok());
        ASSERT_EQ(got, want) << tensor_name;
      }
    }
    // Act-order permutes every linear; the others none.
    EXPECT_EQ(permuted, config->quantization.desc_act ? 7 * config->num_hidden_layers : 0);
  }
}

}  // namespace
}  // namespace troupe
