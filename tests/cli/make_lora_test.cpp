// `troupe make-lora`: random PEFT adapters that troupe (and its checks)
// accept, deterministic by seed, that change a model's output; clear usage
// errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(make_lora, writes_adapters_the_engine_serves) {
  const temp_dir dir("make-lora");
  run_result r = run_troupe({"make-lora", "--model", model_dir("tiny-llama"), "--out",
                             dir.path().string(), "--rank", "8", "--seed", "3", "--count", "2",
                             "--targets", "q_proj,v_proj,down_proj", "--b-scale", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, (dir / "lora-0").string() + "\n" + (dir / "lora-1").string() + "\n");
  const std::string a = slurp(dir / "lora-0" / "adapter_model.safetensors");
  EXPECT_NE(a, slurp(dir / "lora-1" / "adapter_model.safetensors"));
  const temp_dir again("make-lora");
  r = run_troupe({"make-lora", "--model", model_dir("tiny-llama"), "--out", again.path().string(),
                  "--rank", "8", "--seed", "3", "--targets", "q_proj,v_proj,down_proj", "--b-scale",
                  "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(a, slurp(again / "adapter_model.safetensors")) << "the same seed gave another adapter";
  // Served, it changes the greedy output; the base's is unchanged beside it.
  const std::vector<std::string> gen = {
      "generate", "--model", model_dir("tiny-llama"), "--prompt-ids", "1,2,3", "--max-tokens", "8",
      "--temperature", "0", "--enable-lora", "--lora-modules",
      "r0=" + (dir / "lora-0").string(), "r1=" + (dir / "lora-1").string(), "--max-loras", "2"};
  auto with = [&](const std::string& lora) {
    std::vector<std::string> args = gen;
    if (!lora.empty()) args.insert(args.end(), {"--lora", lora});
    const run_result g = run_troupe(args);
    EXPECT_EQ(g.exit_code, 0) << g.err;
    return g.out;
  };
  const std::string base = with(""), r0 = with("r0"), r1 = with("r1");
  EXPECT_NE(base, r0);
  EXPECT_NE(r0, r1);
  const run_result plain = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids",
                                       "1,2,3", "--max-tokens", "8", "--temperature", "0"});
  EXPECT_EQ(plain.out, base);
}

TEST(make_lora, usage_errors) {
  run_result r = run_troupe({"make-lora", "--model", model_dir("tiny-llama"), "--targets", "lm_head",
                             "--dtype", "int8"});
  EXPECT_EQ(r.exit_code, 2);
  for (const char* want : {"--out: required", "--dtype: 'int8' is not one of bfloat16, float16, float32",
                           "--targets: 'lm_head' is not a projection of the Llama family"}) {
    EXPECT_NE(r.err.find(want), std::string::npos) << want << "\n" << r.err;
  }
  r = run_troupe({"make-lora", "--bogus", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag '--bogus'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace troupe::testing
