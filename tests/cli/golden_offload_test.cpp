// cpu_offload_gb (model/weight_offload.h) on the CPU backend, which runs
// the same arena, twin and staging copies as cuda within its own memory:
// the goldens of a dense, a Qwen2 (biases) and a Qwen2-MoE (experts and the
// shared expert) fixture within 1e-3 of transformers with one layer
// offloaded (a budget below one layer) and with every layer offloaded,
// alone and batched with chunked prefill, prefix caching and async
// scheduling, the log saying how many layers; and the plan's rule by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/weight_offload.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"
#include "tests/cli/golden_runs.h"

namespace troupe::testing {
namespace {

constexpr double tol = 1e-3;

std::vector<std::string> args_for(const std::string& dir, const char* offload_gb) {
  return {"generate", "--model", std::string(TROUPE_TEST_DATA) + "/" + dir, "--max-tokens", "24",
          "--temperature", "0", "--logprobs", "5", "--prompt-logprobs", "0", "--json", "--ignore-eos",
          "--cpu-offload-gb", offload_gb};
}

struct offload_case {
  const char* dir;
  const char* offload_gb;
  const char* log;  // what the start-up log says
};

class golden_offload : public ::testing::TestWithParam<offload_case> {};

TEST_P(golden_offload, goldens_hold_with_layers_in_host_memory) {
  const offload_case& c = GetParam();
  const std::string label = std::string(c.dir) + " cpu_offload_gb " + c.offload_gb;
  const std::string golden = std::string(TROUPE_TEST_DATA) + "/" + c.dir + "/golden.json";
  expect_golden_cases_alone(args_for(c.dir, c.offload_gb), golden, label, tol);
  const temp_dir dir("golden-offload");
  const std::string err = expect_golden_cases_chunked_async(args_for(c.dir, c.offload_gb), golden, dir.path(), label, tol);
  EXPECT_NE(err.find(c.log), std::string::npos) << err;
}

// 1e-6 GiB (about 1 KiB) is below any layer: the first alone; 1 GiB is
// more than these models hold: every layer.
INSTANTIATE_TEST_SUITE_P(
    fixtures, golden_offload,
    ::testing::Values(offload_case{"models/tiny-llama", "0.000001", "cpu_offload_gb: 1 of 4 layers"},
                      offload_case{"models/tiny-llama", "1", "cpu_offload_gb: 4 of 4 layers"},
                      offload_case{"models/tiny-qwen2", "1", "cpu_offload_gb: 3 of 3 layers"},
                      offload_case{"moe/tiny-qwen2-moe", "0.000001", "cpu_offload_gb: 1 of 3 layers"},
                      offload_case{"moe/tiny-qwen2-moe", "1", "cpu_offload_gb: 3 of 3 layers"}),
    [](const ::testing::TestParamInfo<offload_case>& info) {
      std::string s = std::string(info.param.dir) + "_" + info.param.offload_gb;
      for (char& ch : s) {
        if (ch == '-' || ch == '/' || ch == '.') ch = '_';
      }
      return s;
    });

// The rule: whole layers from the first while less than the budget is
// offloaded; arenas add the alignment slack; staging holds the largest.
TEST(offload_plan, whole_layers_from_the_first_until_the_budget_is_met) {
  const std::vector<int64_t> layers = {100, 300, 200, 50};
  const int64_t slack = 32 * 256;  // 32 tensors a layer at most, each 256-byte aligned
  EXPECT_EQ(offload_arena_bytes(0), slack);
  const offload_plan none = plan_offload(layers, 0);
  EXPECT_EQ(none.num_offloaded, 0);
  EXPECT_EQ(none.host_bytes, 0);
  EXPECT_EQ(none.staging_bytes, 0);
  EXPECT_EQ(none.offloaded, (std::vector<bool>{false, false, false, false}));
  const offload_plan one = plan_offload(layers, 1);  // below the first layer: it alone
  EXPECT_EQ(one.offloaded, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(one.host_bytes, 100 + slack);
  EXPECT_EQ(one.staging_bytes, 100 + slack);
  const offload_plan exact = plan_offload(layers, 400);  // 100 + 300 meets it
  EXPECT_EQ(exact.offloaded, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(exact.host_bytes, 400 + 2 * slack);
  EXPECT_EQ(exact.staging_bytes, 300 + slack);
  const offload_plan past = plan_offload(layers, 401);  // one more layer
  EXPECT_EQ(past.num_offloaded, 3);
  EXPECT_EQ(past.staging_bytes, 300 + slack);
  const offload_plan all = plan_offload(layers, int64_t{1} << 40);
  EXPECT_EQ(all.num_offloaded, 4);
  EXPECT_EQ(all.host_bytes, 650 + 4 * slack);
}

}  // namespace
}  // namespace troupe::testing
