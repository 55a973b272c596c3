// load_lora_adapter against the PEFT fixtures: what is
// read (rank, scaling folded into lora_B, targets, shapes) and every
// problem a bad adapter folder has, each named.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "model/lora_adapter.h"
#include "model/weights.h"
#include "tests/model/lora_fixtures.h"

namespace troupe {
namespace {

using testing::temp_dir;
using testing::base;
using testing::copy_adapter;
using testing::data;
namespace fs = std::filesystem;

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(file, std::ios::trunc) << text;
}

TEST(lora_adapter, reads_the_fixtures) {
  auto sql = load_lora_adapter("sql", data("lora/tiny-llama-lora-sql"), base("tiny-llama"), 16);
  ASSERT_TRUE(sql.ok()) << sql.error_message();
  EXPECT_EQ((*sql)->rank, 8);
  EXPECT_DOUBLE_EQ((*sql)->scaling, 16.0 / 8);
  EXPECT_EQ((*sql)->targets.size(), 7u);
  auto poet = load_lora_adapter("poet", data("lora/tiny-llama-lora-poet"), base("tiny-llama"), 16);
  ASSERT_TRUE(poet.ok()) << poet.error_message();
  EXPECT_EQ((*poet)->rank, 16);
  EXPECT_DOUBLE_EQ((*poet)->scaling, 8.0 / 16);
  EXPECT_EQ((*poet)->targets, (std::vector<lora_target>{lora_target::q_proj, lora_target::v_proj}));
  EXPECT_EQ((*poet)->at(0, lora_target::k_proj).rank, 0);  // left alone
  // lora_B as stored times the scaling; lora_A as stored.
  auto file = safetensors_file::open(data("lora/tiny-llama-lora-poet/adapter_model.safetensors"));
  ASSERT_TRUE(file.ok());
  const auto& tensors = (*file)->tensors();
  const tensor_info& b = tensors.at("base_model.model.model.layers.2.self_attn.v_proj.lora_B.weight");
  const tensor_info& a = tensors.at("base_model.model.model.layers.2.self_attn.v_proj.lora_A.weight");
  ASSERT_EQ(b.type, stored_type::f32);
  const lora_weights& v = (*poet)->at(2, lora_target::v_proj);
  ASSERT_EQ(v.b.size(), b.nbytes / 4);
  ASSERT_EQ(v.a.size(), a.nbytes / 4);
  for (size_t i = 0; i < v.b.size(); ++i) {
    EXPECT_EQ(v.b[i], static_cast<const float*>(b.data)[i] * 0.5f) << i;
  }
  for (size_t i = 0; i < v.a.size(); ++i) EXPECT_EQ(v.a[i], static_cast<const float*>(a.data)[i]);
}

TEST(lora_adapter, rslora_scales_by_the_square_root) {
  auto dir = copy_adapter("tiny-llama-lora-poet");
  replace_in(dir->path() / "adapter_config.json", "\"use_rslora\": false", "\"use_rslora\": true");
  auto a = load_lora_adapter("p", dir->path(), base("tiny-llama"), 16);
  ASSERT_TRUE(a.ok()) << a.error_message();
  EXPECT_DOUBLE_EQ((*a)->scaling, 8.0 / 4.0);  // alpha 8 / sqrt(16)
}

TEST(lora_adapter, lists_every_problem_naming_the_adapter) {
  auto dir = copy_adapter("tiny-llama-lora-sql");
  const fs::path cfg = dir->path() / "adapter_config.json";
  replace_in(cfg, "\"bias\": \"none\"", "\"bias\": \"all\"");
  replace_in(cfg, "\"use_dora\": false", "\"use_dora\": true");
  replace_in(cfg, "\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]");
  replace_in(cfg, "\"up_proj\",", "\"up_proj\", \"lm_head\",");
  auto a = load_lora_adapter("sql", dir->path(), base("tiny-llama"), 4);
  ASSERT_FALSE(a.ok());
  const std::string& m = a.error_message();
  EXPECT_EQ(m.rfind("LoRA adapter 'sql' (" + dir->path().string() + "): ", 0), 0u) << m;
  for (const char* want : {"rank 8 is above max_lora_rank 4", "bias 'all' is not supported",
                           "modules_to_save is not supported", "use_dora is not supported",
                           "target module 'lm_head' is not one this architecture has (q_proj, "
                           "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"}) {
    EXPECT_NE(m.find(want), std::string::npos) << "missing: " << want << "\n" << m;
  }
}

TEST(lora_adapter, missing_files) {
  temp_dir empty("lora");
  auto a = load_lora_adapter("x", empty.path(), base("tiny-llama"), 16);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error_message().find("cannot read adapter_config.json"), std::string::npos);
  auto dir = copy_adapter("tiny-llama-lora-sql");
  fs::rename(dir->path() / "adapter_model.safetensors", dir->path() / "adapter_model.bin");
  a = load_lora_adapter("x", dir->path(), base("tiny-llama"), 16);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error_message().find("adapter_model.bin is not supported"), std::string::npos)
      << a.error_message();
  fs::remove(dir->path() / "adapter_model.bin");
  a = load_lora_adapter("x", dir->path(), base("tiny-llama"), 16);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error_message().find("adapter_model.safetensors is missing"), std::string::npos);
  a = load_lora_adapter("x", "/nonexistent/adapter", base("tiny-llama"), 16);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error_message(), "LoRA adapter 'x' (/nonexistent/adapter): not a directory");
}

TEST(lora_adapter, wrong_base_model) {
  auto a = load_lora_adapter("chat", data("lora/tiny-qwen2-lora-chat"), base("tiny-llama"), 16);
  ASSERT_FALSE(a.ok());
  // Qwen2's 3 layers fit Llama's 4; its widths do not (first three in full).
  EXPECT_NE(a.error_message().find("k_proj.lora_B.weight' has shape [64, 4], expected [32, 4]"),
            std::string::npos)
      << a.error_message();
  EXPECT_NE(a.error_message().find("more tensors whose shapes do not fit"), std::string::npos);
}

}  // namespace
}  // namespace troupe
