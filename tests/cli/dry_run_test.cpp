// `troupe serve --dry-run` on Llama-3.1-70B's config (examples/models):
// the per-rank memory plan for T = 1, 2, 4, 8 without loading anything.
// The reference is the model's published parameter count (70,553,706,496,
// bfloat16): one rank holds it all, and a rank of T holds 1/T of every
// sharded weight plus the replicated norms ((2 x 80 + 1) x 8192 values).
// The KV cache a token takes on a rank: K and V of 80 layers, the rank's
// 8 / T KV heads of 128.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

constexpr int64_t params_70b = 70'553'706'496;
constexpr int64_t replicated_norms = (2 * 80 + 1) * 8192;

std::string model_70b() { return std::string(TROUPE_TEST_DATA) + "/../../examples/models/llama-3.1-70b"; }

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

int64_t rank_weight_bytes(int t) { return 2 * ((params_70b - replicated_norms) / t + replicated_norms); }

run_result dry_run(const std::string& t, const std::string& max_model_len) {
  return run_troupe({"serve", "--model", model_70b(), "--tensor-parallel-size", t,
                     "--max-model-len", max_model_len, "--dry-run", "--gpu-memory-gib", "80"});
}

TEST(dry_run, llama_70b_per_rank_memory_for_t_2_4_8) {
  for (int t : {2, 4, 8}) {
    const run_result r = dry_run(std::to_string(t), "8192");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("nothing loaded or allocated"), std::string::npos) << r.out;
    for (int rank = 0; rank < t; ++rank) {
      const std::string line = "rank " + std::to_string(rank) + ": weights " +
                               gib(rank_weight_bytes(t)) + " GiB";
      EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
    }
    EXPECT_EQ(r.out.find("rank " + std::to_string(t) + ":"), std::string::npos) << r.out;
    const std::string per_token = "(" + std::to_string(2 * 80 * (8 / t) * 128 * 2) + " bytes a token)";
    EXPECT_NE(r.out.find(per_token), std::string::npos) << per_token << "\n" << r.out;
    EXPECT_NE(r.out.find("fits\n"), std::string::npos) << r.out;
  }
}

// kv_cache_dtype fp8: a byte an element, so a token takes half of bf16's
// bytes and the same KV budget holds twice the tokens.
TEST(dry_run, fp8_kv_cache_holds_twice_the_tokens) {
  for (const char* kv : {"auto", "fp8"}) {
    const run_result r = run_troupe({"serve", "--model", model_70b(), "--tensor-parallel-size", "2",
                                     "--max-model-len", "8192", "--kv-cache-dtype", kv, "--dry-run",
                                     "--gpu-memory-gib", "80"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const int element_bytes = std::string(kv) == "fp8" ? 1 : 2;
    const std::string per_token = "(" + std::to_string(2 * 80 * 4 * 128 * element_bytes) + " bytes a token)";
    EXPECT_NE(r.out.find(per_token), std::string::npos) << per_token << "\n" << r.out;
    EXPECT_EQ(r.out.find("(80 layers, BF16, KV cache float8 e4m3)") != std::string::npos, element_bytes == 1)
        << r.out;
  }
  auto tokens = [](const std::string& out) {
    const size_t at = out.find(" tokens (");
    const size_t begin = out.rfind("= ", at);
    return std::stoll(out.substr(begin + 2, at - begin - 2));
  };
  const run_result bf16 = dry_run("2", "8192");
  const run_result fp8 = run_troupe({"serve", "--model", model_70b(), "--tensor-parallel-size", "2", "--max-model-len",
                                     "8192", "--kv-cache-dtype", "fp8", "--dry-run", "--gpu-memory-gib", "80"});
  // Blocks of 16 tokens out of the same bytes: twice, up to one block.
  EXPECT_NEAR(static_cast<double>(tokens(fp8.out)), 2.0 * static_cast<double>(tokens(bf16.out)), 16.0)
      << bf16.out << fp8.out;
}

// Llama-3.1-70B GPTQ 4-bit (group 128, examples/models): the dense
// products' weights packed (half a byte a weight, a float16 scale and a
// byte zero a group of 128), the embedding, LM head and norms in float16:
// fits one 80 GiB GPU, where the float16 model (131.42 GiB) does not.
TEST(dry_run, llama_70b_gptq_packs_onto_one_gpu) {
  const run_result r = run_troupe({"serve", "--model", model_70b() + "-gptq-int4", "--max-model-len", "8192",
                                   "--dry-run", "--gpu-memory-gib", "80"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // One layer's products: q/k/v 10240 x 8192, o 8192 x 8192, gate/up
  // 57344 x 8192, down 8192 x 28672 (rows x inputs).
  const int64_t rows[4] = {10240, 8192, 57344, 8192}, cols[4] = {8192, 8192, 8192, 28672};
  int64_t layer = 2 * 8192 * 2;  // the two norms
  for (int i = 0; i < 4; ++i) layer += rows[i] * cols[i] / 2 + rows[i] * (cols[i] / 128) * 3;
  const int64_t weights = 80 * layer + 2 * (2 * 128256LL * 8192 + 8192);
  const std::string line = "weights " + gib(weights) + " GiB";
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("fits\n"), std::string::npos) << r.out;
  // The float config with --quantization gptq and dummy weights: the same
  // 4-bit group-128 weights (bfloat16 embeddings and LM head, as float16's
  // take the same bytes).
  const run_result q = run_troupe({"serve", "--model", model_70b(), "--quantization", "gptq", "--load-format",
                                   "dummy", "--max-model-len", "8192", "--dry-run", "--gpu-memory-gib", "80"});
  ASSERT_EQ(q.exit_code, 0) << q.out << q.err;
  EXPECT_NE(q.out.find(line), std::string::npos) << line << "\n" << q.out;
  // Without dummy weights a float checkpoint has nothing to pack.
  const run_result bad = run_troupe({"serve", "--model", model_70b(), "--quantization", "gptq", "--dry-run"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("quantization: 'gptq' needs a GPTQ checkpoint"), std::string::npos) << bad.err;
}

// Llama-3.1-70B with online FP8 (--quantization fp8): a byte a weight of
// the dense products and a float32 scale an output row, the embedding, LM
// head and norms in bfloat16. 67.69 GiB: one H200 holds it with room for
// a long context; an 80 GiB GPU only a short one.
TEST(dry_run, llama_70b_fp8_weights_take_a_byte_each) {
  const run_result r = run_troupe({"serve", "--model", model_70b(), "--quantization", "fp8", "--load-format",
                                   "dummy", "--max-model-len", "8192", "--dry-run", "--gpu-memory-gib", "141"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const int64_t rows[4] = {10240, 8192, 57344, 8192}, cols[4] = {8192, 8192, 8192, 28672};
  int64_t layer = 2 * 8192 * 2;  // the two norms
  for (int i = 0; i < 4; ++i) layer += rows[i] * cols[i] + rows[i] * 4;
  const int64_t weights = 80 * layer + 2 * (2 * 128256LL * 8192 + 8192);
  const std::string line = "rank 0: weights " + gib(weights) + " GiB";
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("fits\n"), std::string::npos) << r.out;
}

// Pipeline stages: 80 layers in two stages of 40, each stage's ranks
// holding its layers' weights and KV; the embedding on the first, the
// final norm and LM head on the last.
TEST(dry_run, pipeline_stages_hold_their_layers) {
  const run_result r = run_troupe({"serve", "--model", model_70b(), "--tensor-parallel-size", "2",
                                   "--pipeline-parallel-size", "2", "--max-model-len", "8192",
                                   "--dry-run", "--gpu-memory-gib", "80"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const int64_t layer = 855'654'400;  // one layer's parameters
  const int64_t norms = 2 * 8192, vocab = 128256LL * 8192;
  // A stage's rank: 40 layers' sharded weights halved, their norms whole,
  // half the vocabulary rows (and the final norm on the last stage).
  const int64_t first = 40 * ((layer - norms) / 2 + norms) + vocab / 2;
  const int64_t last = first + 8192;
  for (int g = 0; g < 4; ++g) {
    const std::string line = "rank " + std::to_string(g) + ": weights " +
                             gib(2 * (g < 2 ? first : last)) + " GiB";
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  // K and V of 40 layers, 4 KV heads of 128, bfloat16.
  EXPECT_NE(r.out.find("(81920 bytes a token)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage 1: layers 40..79"), std::string::npos) << r.out;
}

// cpu_offload_gb 64 on one 80 GiB GPU: whole layers from the first until
// 64 GiB are offloaded (41 of 1,711,308,800 bytes: 40 are 63.75 GiB), each
// arena with 32 x 256 bytes of alignment slack; the device holds the rest
// and one layer's staging buffer, and the 70B plan then fits at 4096.
TEST(dry_run, cpu_offload_moves_whole_layers_to_host_memory) {
  const run_result r = run_troupe({"serve", "--model", model_70b(), "--max-model-len", "4096",
                                   "--cpu-offload-gb", "64", "--dry-run", "--gpu-memory-gib", "80"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const int64_t layer_bytes = 2 * 855'654'400LL, arena = layer_bytes + 32 * 256;
  const int64_t device = 2 * params_70b - 41 * layer_bytes + arena, host = 41 * arena;
  const std::string line = "rank 0: weights " + gib(device) + " GiB (and " + gib(host) +
                           " GiB in host memory: cpu_offload_gb)";
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("fits"), std::string::npos) << r.out;
  const run_result bad = run_troupe({"serve", "--model", model_70b(), "--cpu-offload-gb", "-1", "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("cpu_offload_gb: -1 must be 0 or more (GiB), at most 1048576"), std::string::npos)
      << bad.err;
}

TEST(dry_run, the_table_of_sizes_and_what_does_not_fit) {
  const run_result r = dry_run("1", "8192");
  // 131.42 GiB of weights on an 80 GiB GPU: exit 1, said plainly.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(gib(2 * params_70b), "131.42");
  EXPECT_NE(r.out.find("rank 0: weights 131.42 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does NOT fit one sequence of max_model_len"), std::string::npos) << r.out;
  for (int t : {1, 2, 4, 8}) {
    char row[64];
    std::snprintf(row, sizeof row, "  %-4d %-18s", t, gib(rank_weight_bytes(t)).c_str());
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  // --gpu-memory-gib belongs to the dry run.
  const run_result bad = run_troupe({"serve", "--model", model_70b(), "--gpu-memory-gib", "80"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--gpu-memory-gib: only with --dry-run"), std::string::npos) << bad.err;
}

// Mixture-of-experts: every expert and router counted, against the
// published parameter counts (Qwen3-30B-A3B 30,532,122,624; Mixtral-8x7B
// 46,702,792,704) and, for Qwen1.5-MoE-A2.7B (Qwen2-MoE: 60 experts of
// 1408, a shared expert of 5632 and its gate, q/k/v biases), the count
// worked out by hand from its config (24 layers x 570,560,512 + two
// vocabulary matrices of 311,164,928 + the final norm's 2048 =
// 14,315,784,192, the model card's "14.3B"), bfloat16; the KV a token
// takes as a dense model's.
TEST(dry_run, moe_models_count_every_expert) {
  const struct {
    const char* folder;
    int64_t params, kv_bytes_per_token;
    const char* verdict;
    int exit_code;  // 1: the plan does not fit
  } models[] = {{"qwen3-30b-a3b", 30'532'122'624, 2 * 48 * 4 * 128 * 2, "fits\n", 0},
                {"mixtral-8x7b", 46'702'792'704, 2 * 32 * 8 * 128 * 2, "does NOT fit", 1},
                {"qwen1.5-moe-a2.7b", 14'315'784'192, 2 * 24 * 16 * 128 * 2, "fits\n", 0}};
  for (const auto& m : models) {
    const run_result r = run_troupe({"serve", "--model", std::string(TROUPE_TEST_DATA) + "/../../examples/models/" +
                                     m.folder, "--max-model-len", "8192", "--dry-run", "--gpu-memory-gib", "80"});
    ASSERT_EQ(r.exit_code, m.exit_code) << r.out << r.err;
    const std::string line = "rank 0: weights " + gib(2 * m.params) + " GiB";
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
    EXPECT_NE(r.out.find("(" + std::to_string(m.kv_bytes_per_token) + " bytes a token)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(m.verdict), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace troupe::testing
