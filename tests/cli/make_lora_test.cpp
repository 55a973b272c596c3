// `troupe make-lora`: random PEFT adapters that troupe (and its checks)
// accept, deterministic by seed, that change a model's output; clear usage
// errors.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
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

// 16 random adapters through 4 device slots and 8 in host memory: a seeded
// random mix of 200 requests (adapters and the base, prompts of 3-60
// tokens, 4-24 tokens out) in one batch gives every request the tokens it
// gets run alone (--max-num-seqs 1: one request at a time), with no error;
// adapters wait for slots and for reads, slots are reused hundreds of
// times, dropped adapters are read again on the loader thread (never on a
// step's path), and the host cache never holds more than 8.
TEST(make_lora, sixteen_adapters_through_four_slots_match_one_at_a_time) {
  const temp_dir dir("lora-mix");
  run_result r = run_troupe({"make-lora", "--model", model_dir("tiny-llama"), "--out", dir.path().string(),
                             "--rank", "8", "--count", "16", "--b-scale", "0.5", "--dtype", "float32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> args = {"generate", "--model", model_dir("tiny-llama"), "--temperature", "0",
                                   "--enable-lora", "--max-loras", "4", "--max-lora-rank", "8",
                                   "--max-cpu-loras", "8",
                                   "--prompts-file", (dir / "prompts.jsonl").string(), "--lora-modules"};
  for (int i = 0; i < 16; ++i) args.push_back("a" + std::to_string(i) + "=" + (dir / ("lora-" + std::to_string(i))).string());
  {
    std::mt19937 rng(7);
    std::ofstream out(dir / "prompts.jsonl");
    for (int i = 0; i < 200; ++i) {
      const int lora = static_cast<int>(rng() % 17);  // 16: the base
      const int len = 3 + static_cast<int>(rng() % 58);
      out << "{\"prompt_ids\":[";
      for (int t = 0; t < len; ++t) out << (t ? "," : "") << rng() % 1000;
      out << "],\"max_tokens\":" << 4 + rng() % 21;
      if (lora < 16) out << ",\"lora\":\"a" << lora << "\"";
      out << "}\n";
    }
  }
  const run_result mixed = run_troupe(args);
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  args.insert(args.end(), {"--max-num-seqs", "1"});
  const run_result alone = run_troupe(args);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(mixed.out, alone.out);
  EXPECT_EQ(split_lines(mixed.out).size(), 200u);
  EXPECT_EQ(mixed.out.find("(error)"), std::string::npos);
  EXPECT_EQ(stats_value(mixed.err, "requests"), 200) << mixed.err;
  for (const run_result* r : {&mixed, &alone}) {
    EXPECT_LE(stats_value(r->err, "lora_host_resident_max"), 8) << r->err;
    EXPECT_GT(stats_value(r->err, "lora_reads"), 8) << r->err;  // read again after drops
    EXPECT_EQ(stats_value(r->err, "lora_reads_on_step"), 0) << r->err;
  }
}

}  // namespace
}  // namespace troupe::testing
