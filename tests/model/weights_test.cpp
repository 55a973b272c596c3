// weights: dtype conversions on known bit patterns, safetensors files written
// here byte by byte (good and corrupt), sharded checkpoints, the fixture's
// real model.safetensors (values read independently with Python's struct),
// and dummy weights.
#include "model/weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/model/safetensors_writer.h"
#include "tests/temp_dir.h"
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "/work/main/tests/data"
#endif

namespace troupe {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using namespace safetensors_writing;

class weights_files : public ::testing::Test {
 protected:
  testing::temp_dir tmp_{"weights-test"};
  std::string open_error(const std::string& file) {
    auto r = safetensors_file::open(dir_ / file);
    return r.ok() ? std::string("(no error)") : r.error_message();
  }
  const fs::path& dir_ = tmp_.path();
};

TEST(weights_convert, bf16_known_bits) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x3EC0), 0.375f);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7F80)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));
}

TEST(weights_convert, f16_known_bits) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

#ifdef __FLT16_MAX__
TEST(weights_convert, f16_matches_compiler_for_all_values) {
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const float expected = float(std::bit_cast<_Float16>(uint16_t(v)));
    const float got = f16_to_f32(uint16_t(v));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << v;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << v;
    }
  }
}
#endif

TEST(weights_convert, f32_to_bf16_rounds_to_nearest_even) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);  // above half
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F807FFFu)), 0x3F80);  // below half
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // max float -> inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
}

TEST(weights_convert, bf16_round_trip_is_identity) {
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const float f = bf16_to_f32(uint16_t(v));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), v);
  }
}

TEST_F(weights_files, reads_f32_bf16_f16) {
  write_safetensors(dir_ / "model.safetensors",
                    {{"a", "F32", {2, 2}, f32_bytes({1.5f, -0.25f, 3.0f, 1e-3f})},
                     {"b", "BF16", {3}, u16_bytes({0x3F80, 0xC000, 0x3EC0})},
                     {"c", "F16", {1, 3}, u16_bytes({0x3C00, 0xC000, 0x3555})}});
  auto ckpt = checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  EXPECT_THAT(ckpt->names(), ElementsAre("a", "b", "c"));
  const tensor_info* b = ckpt->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, stored_type::bf16);
  EXPECT_THAT(b->shape, ElementsAre(3));
  EXPECT_EQ(b->nbytes, 6u);
  EXPECT_EQ(b->file, "model.safetensors");
  EXPECT_EQ(ckpt->find("zzz"), nullptr);

  std::vector<float> out(4);
  ASSERT_TRUE(ckpt->read_f32("a", {2, 2}, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(1.5f, -0.25f, 3.0f, 1e-3f));
  ASSERT_TRUE(ckpt->read_f32("b", {3}, out.data()).ok());
  EXPECT_THAT(std::vector<float>(out.begin(), out.begin() + 3), ElementsAre(1.0f, -2.0f, 0.375f));
  ASSERT_TRUE(ckpt->read_f32("c", {1, 3}, out.data()).ok());
  EXPECT_THAT(std::vector<float>(out.begin(), out.begin() + 3), ElementsAre(1.0f, -2.0f, 0.333251953125f));
}

TEST_F(weights_files, unaligned_header_length) {
  // Header length 61 puts the f32 data at an odd address in the mapping.
  std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  header.resize(61, ' ');
  write_raw(dir_ / "x.safetensors", header.size(), header, f32_bytes({7.0f, -7.5f}));
  auto ckpt = checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  std::vector<float> out(2);
  ASSERT_TRUE(ckpt->read_f32("w", {2}, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(7.0f, -7.5f));
}

TEST_F(weights_files, header_length_past_end) {
  write_raw(dir_ / "model.safetensors", 123456789, "", bytes(992, 0));  // 1000 bytes in all
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: corrupt header (header length 123456789 exceeds file size 1000)");
}

TEST_F(weights_files, file_too_short) {
  std::ofstream(dir_ / "model.safetensors") << "abc";
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: corrupt header (file is 3 bytes, too short for the header length)");
}

TEST_F(weights_files, unreadable_file) {
  EXPECT_EQ(open_error("absent.safetensors"),
            "cannot open '" + (dir_ / "absent.safetensors").string() + "': No such file or directory");
}

TEST_F(weights_files, header_not_json) {
  write_raw(dir_ / "model.safetensors", 9, "{not json", bytes(4, 0));
  EXPECT_EQ(open_error("model.safetensors"), "model.safetensors: corrupt header (not valid JSON)");
}

TEST_F(weights_files, unsupported_dtype) {
  write_safetensors(dir_ / "model.safetensors", {{"x", "I8", {4}, bytes(4, 1)}});
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: tensor 'x' has unsupported dtype 'I8' (supported: F32, BF16, F16, and I32, "
            "F8_E4M3 in quantized checkpoints)");
}

TEST_F(weights_files, offsets_outside_data_section) {
  const std::string header = R"({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}})";
  write_raw(dir_ / "model.safetensors", header.size(), header, bytes(16, 0));
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: tensor 'w' has data_offsets [0, 64] outside the data section (16 bytes)");
  const std::string reversed = R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})";
  write_raw(dir_ / "model.safetensors", reversed.size(), reversed, bytes(16, 0));
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: tensor 'w' has data_offsets [8, 4] outside the data section (16 bytes)");
}

TEST_F(weights_files, offsets_not_matching_shape) {
  const std::string header = R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})";
  write_raw(dir_ / "model.safetensors", header.size(), header, bytes(16, 0));
  EXPECT_EQ(open_error("model.safetensors"),
            "model.safetensors: tensor 'w' has 12 bytes of data but shape [4] of F32 needs 16");
}

TEST_F(weights_files, malformed_entries) {
  const std::string no_shape = R"({"w": {"dtype": "F16", "data_offsets": [0, 2]}})";
  write_raw(dir_ / "model.safetensors", no_shape.size(), no_shape, bytes(2, 0));
  EXPECT_EQ(open_error("model.safetensors"), "model.safetensors: corrupt header (tensor 'w' has an invalid shape)");
  const std::string one_offset = R"({"w": {"dtype": "F16", "shape": [1], "data_offsets": [0]}})";
  write_raw(dir_ / "model.safetensors", one_offset.size(), one_offset, bytes(2, 0));
  EXPECT_EQ(open_error("model.safetensors"), "model.safetensors: corrupt header (tensor 'w' has invalid data_offsets)");
}

TEST_F(weights_files, missing_tensor_and_wrong_shape) {
  write_safetensors(dir_ / "model.safetensors", {{"x", "F32", {4, 8}, bytes(128, 0)}});
  auto ckpt = checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  std::vector<float> out(64);
  EXPECT_EQ(ckpt->read_f32("model.norm.weight", {8}, out.data()).error_message(),
            "missing tensor 'model.norm.weight' (looked in model.safetensors)");
  EXPECT_EQ(ckpt->read_f32("x", {8, 8}, out.data()).error_message(),
            "tensor 'x' in model.safetensors has shape [4, 8], expected [8, 8]");
}

TEST_F(weights_files, sharded_with_index) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors",
                    {{"a", "F32", {2}, f32_bytes({1, 2})}, {"b", "BF16", {1}, u16_bytes({0x3F80})}});
  write_safetensors(dir_ / "model-00002-of-00002.safetensors", {{"c", "F16", {1}, u16_bytes({0xC000})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 14}, "weight_map": {"a": "model-00001-of-00002.safetensors",
            "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})";
  auto ckpt = checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  EXPECT_THAT(ckpt->names(), ElementsAre("a", "b", "c"));
  EXPECT_EQ(ckpt->find("c")->file, "model-00002-of-00002.safetensors");
  float out[2];
  ASSERT_TRUE(ckpt->read_f32("c", {1}, out).ok());
  EXPECT_EQ(out[0], -2.0f);
  ASSERT_TRUE(ckpt->read_f32("a", {2}, out).ok());
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(ckpt->read_f32("d", {1}, out).error_message(),
            "missing tensor 'd' (looked in model-00001-of-00002.safetensors, model-00002-of-00002.safetensors)");
}

TEST_F(weights_files, index_names_missing_shard) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})";
  EXPECT_EQ(checkpoint::open(dir_).error_message(),
            "shard 'model-00002-of-00002.safetensors' listed in " +
                (dir_ / "model.safetensors.index.json").string() + " does not exist");
}

TEST_F(weights_files, index_maps_tensor_to_wrong_shard) {
  write_safetensors(dir_ / "s1.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  write_safetensors(dir_ / "s2.safetensors", {{"c", "F32", {1}, f32_bytes({1})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "s2.safetensors", "c": "s2.safetensors", "x": "s1.safetensors"}})";
  EXPECT_EQ(checkpoint::open(dir_).error_message(),
            (dir_ / "model.safetensors.index.json").string() +
                ": tensor 'a' is mapped to 's2.safetensors', which does not contain it");
}

TEST_F(weights_files, index_malformed) {
  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"metadata": {}})";
  EXPECT_EQ(checkpoint::open(dir_).error_message(),
            (dir_ / "model.safetensors.index.json").string() +
                ": missing 'weight_map' (an object of tensor name -> file)");
}

TEST_F(weights_files, unindexed_files_sorted) {
  write_safetensors(dir_ / "b.safetensors", {{"y", "F32", {1}, f32_bytes({2})}});
  write_safetensors(dir_ / "a.safetensors", {{"x", "F32", {1}, f32_bytes({1})}});
  std::ofstream(dir_ / "notes.txt") << "ignored";
  auto ckpt = checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  float out;
  EXPECT_EQ(ckpt->read_f32("z", {1}, &out).error_message(),
            "missing tensor 'z' (looked in a.safetensors, b.safetensors)");
}

TEST_F(weights_files, duplicate_tensor_across_files) {
  write_safetensors(dir_ / "a.safetensors", {{"x", "F32", {1}, f32_bytes({1})}});
  write_safetensors(dir_ / "b.safetensors", {{"x", "F32", {1}, f32_bytes({2})}});
  EXPECT_EQ(checkpoint::open(dir_).error_message(), "tensor 'x' is in both a.safetensors and b.safetensors");
}

TEST_F(weights_files, folder_errors) {
  EXPECT_EQ(checkpoint::open(dir_ / "nope").error_message(),
            "model folder '" + (dir_ / "nope").string() + "' does not exist");
  EXPECT_EQ(checkpoint::open(dir_).error_message(), "no .safetensors files in '" + dir_.string() + "'");
}

TEST(weights_fixture, tiny_llama_model_safetensors) {
  auto ckpt = checkpoint::open(fs::path(TROUPE_TEST_DATA) / "models" / "tiny-llama");
  ASSERT_TRUE(ckpt.ok()) << ckpt.error_message();
  EXPECT_EQ(ckpt->names().size(), 39u);  // 4 layers x 9 + embed, norm, lm_head
  const tensor_info* embed = ckpt->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->type, stored_type::f32);
  EXPECT_THAT(embed->shape, ElementsAre(1024, 128));
  std::vector<float> out(1024 * 128);
  ASSERT_TRUE(ckpt->read_f32("model.embed_tokens.weight", {1024, 128}, out.data()).ok());
  // Bit patterns read with Python's struct from the file itself.
  EXPECT_EQ(std::bit_cast<uint32_t>(out.front()), 0x3EB6BBCEu);
  EXPECT_EQ(std::bit_cast<uint32_t>(out.back()), 0xBE911A19u);
  ASSERT_TRUE(ckpt->read_f32("model.norm.weight", {128}, out.data()).ok());
  EXPECT_EQ(std::bit_cast<uint32_t>(out[5]), 0x3F2B4D5Fu);
}

TEST(weights_dummy, deterministic_and_order_independent) {
  std::vector<float> a1(1000), b1(1000), a2(1000), b2(1000), prefix(100);
  fill_dummy_f32(7, "a", a1.data(), a1.size(), 0.5f);
  fill_dummy_f32(7, "b", b1.data(), b1.size(), 0.5f);
  fill_dummy_f32(7, "b", b2.data(), b2.size(), 0.5f);  // other order
  fill_dummy_f32(7, "a", a2.data(), a2.size(), 0.5f);
  fill_dummy_f32(7, "a", prefix.data(), prefix.size(), 0.5f);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(b1, b2);
  EXPECT_NE(a1, b1);
  EXPECT_EQ(prefix, std::vector<float>(a1.begin(), a1.begin() + 100));
  std::vector<float> other_seed(1000);
  fill_dummy_f32(8, "a", other_seed.data(), other_seed.size(), 0.5f);
  EXPECT_NE(a1, other_seed);
}

TEST(weights_dummy, uniform_in_range) {
  const float scale = 0.02f;
  std::vector<float> v(100000);
  fill_dummy_f32(0, "model.layers.0.mlp.up_proj.weight", v.data(), v.size(), scale);
  double sum = 0;
  float lo = scale, hi = -scale;
  size_t below_zero = 0;
  for (float x : v) {
    ASSERT_GE(x, -scale);
    ASSERT_LE(x, scale);
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    below_zero += x < 0;
  }
  EXPECT_LT(std::abs(sum / double(v.size())), 0.01 * scale);
  EXPECT_LT(lo, -0.99f * scale);
  EXPECT_GT(hi, 0.99f * scale);
  EXPECT_NEAR(double(below_zero) / double(v.size()), 0.5, 0.01);
}

}  // namespace
}  // namespace troupe
