// Per-expert routing counts (log_expert_counts): the stats line's load from
// two readings (expert_load_between, hand-computed, counters that wrap),
// the worker group's answer (each pipeline stage's first rank, stages in
// order), and the counts of a real run: tiny-qwen2-moe (sparse layers 0 and
// 2, layer 1 dense; 8 experts, top 2) on the CPU backend through the
// worker actor, every sparse layer routing each token of the step to 2
// experts, a CUDA graph's padding (TROUPE_DEBUG_PAD_DECODE: the decode
// steps of 3 sequences padded to 4) never counted.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <cstdlib>
#include <numeric>

#include "actors/scheduler/expert_load.h"
#include "actors/worker/worker_actor.h"
#include "tests/actors/fixture_runner.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

TEST(expert_load, differences_imbalance_and_the_line) {
  expert_counts before, now;
  before.experts = now.experts = 4;
  before.layers = now.layers = {3, 7};
  before.counts = {10, 0, 5, 5, 0xFFFFFFFEu, 1, 2, 3};
  now.counts = {14, 0, 9, 5, 2u, 1, 2, 3};  // layer 7 expert 0 wrapped: +4
  const expert_load load = expert_load_between(before, now);
  EXPECT_EQ(load.per_layer, (std::vector<std::vector<int64_t>>{{4, 0, 4, 0}, {4, 0, 0, 0}}));
  EXPECT_EQ(load.per_expert, (std::vector<int64_t>{8, 0, 4, 0}));
  EXPECT_EQ(load.routed, 12);
  EXPECT_DOUBLE_EQ(load.imbalance, 8.0 * 4 / 12);             // max / mean over the sum
  EXPECT_DOUBLE_EQ(load.mean_layer_imbalance, (2.0 + 4.0) / 2);  // 4 / (8 / 4), 4 / (4 / 4)
  EXPECT_DOUBLE_EQ(load.worst_layer_imbalance, 4.0);
  EXPECT_EQ(load.worst_layer, 7);
  EXPECT_EQ(expert_load_line(load, 5.0),
            "expert load over 5.0 s (2 MoE layers, 4 experts, 12 token-expert routings): max/mean 2.67 "
            "over the layers' sum, per layer 3.00 on average and 4.00 at worst (layer 7); tokens per "
            "expert: 8 0 4 0");
  EXPECT_EQ(expert_layer_line(load, 0), "layer 3 (max/mean 2.00): 4 0 4 0");

  // The first reading (nothing before) counts from zero; nothing routed: no line.
  const expert_load first = expert_load_between({}, before);
  EXPECT_EQ(first.per_expert, (std::vector<int64_t>{10 + 0xFFFFFFFEll, 1, 7, 8}));
  EXPECT_EQ(expert_load_line(expert_load_between(now, now), 5.0), "");
  EXPECT_EQ(expert_load_between(now, now).worst_layer, -1);
}

struct caf_config : caf::actor_system_config {
  caf_config() {
    add_message_types<caf::id_block::troupe>();
    set("logger.verbosity", caf::atom("quiet"));
  }
};

TEST(expert_counts, the_worker_group_asks_each_stage_first_rank) {
  caf_config cfg;
  caf::actor_system sys{cfg};
  // Two stages of two tensor-parallel ranks; a rank answers its stage's
  // layer and marks itself in the counts (the second ranks must not be asked).
  auto rank = [](caf::event_based_actor*, int32_t layer, uint32_t mark) -> caf::behavior {
    return {[=](atoms::get_expert_counts) {
      expert_counts c;
      c.experts = 2;
      c.layers = {layer};
      c.counts = {mark, 1};
      return c;
    }};
  };
  std::vector<caf::actor> ranks = {sys.spawn(rank, 0, 10u), sys.spawn(rank, 0, 11u), sys.spawn(rank, 5, 20u),
                                   sys.spawn(rank, 5, 21u)};
  caf::actor group = sys.spawn(worker_group_actor, ranks, 2, worker_group_hooks{});
  caf::scoped_actor self{sys};
  self->request(group, std::chrono::seconds(10), atoms::get_expert_counts_v)
      .receive(
          [](const expert_counts& c) {
            EXPECT_EQ(c.experts, 2);
            EXPECT_EQ(c.layers, (std::vector<int32_t>{0, 5}));
            EXPECT_EQ(c.counts, (std::vector<uint32_t>{10, 1, 20, 1}));
          },
          [](const caf::error& err) { ADD_FAILURE() << caf_error_text(err); });
  for (const caf::actor& a : ranks) self->send_exit(a, caf::exit_reason::user_shutdown);
  self->send_exit(group, caf::exit_reason::user_shutdown);
}

std::unique_ptr<model_runner> moe_runner(bool count) {
  runner_limits rl;
  rl.max_num_batched_tokens = 64;
  rl.max_num_seqs = 4;
  rl.max_model_len = 64;
  rl.block_size = 16;
  rl.num_blocks = 16;
  rl.count_experts = count;
  return testing::cpu_fixture_runner(std::string(TROUPE_TEST_DATA) + "/moe/tiny-qwen2-moe", rl);
}

// A prefill of three prompts (21 tokens), then `decodes` steps of 3 tokens.
std::vector<step_plan> plans(int decodes) {
  return testing::three_prompt_plans(decodes, [](size_t, new_request_data& d) { d.params.temperature = 0.0f; });
}

// Each sparse layer's counts sum to tokens x top_k, no expert more than
// the tokens (a token's experts are distinct).
void expect_counts(const expert_counts& c, int64_t tokens) {
  ASSERT_EQ(c.experts, 8);
  ASSERT_EQ(c.layers, (std::vector<int32_t>{0, 2}));  // layer 1 is dense (mlp_only_layers)
  ASSERT_EQ(c.counts.size(), 16u);
  for (size_t l = 0; l < 2; ++l) {
    const auto first = c.counts.begin() + static_cast<std::ptrdiff_t>(l * 8);
    EXPECT_EQ(std::accumulate(first, first + 8, int64_t{0}), tokens * 2) << "layer " << c.layers[l];
    for (auto it = first; it != first + 8; ++it) EXPECT_LE(*it, tokens);
  }
}

TEST(expert_counts, a_run_counts_every_token_of_every_sparse_layer_but_not_the_padding) {
  ::setenv("TROUPE_DEBUG_PAD_DECODE", "1", 1);  // 3 decode sequences run as the bucket of 4
  std::shared_ptr<model_runner> runner = moe_runner(true);
  runner->capture_graphs();  // the CPU backend captures nothing; it pads as graphs would
  ::unsetenv("TROUPE_DEBUG_PAD_DECODE");
  ASSERT_EQ(runner->graph_sizes(), (std::vector<int64_t>{1, 2, 4}));
  expect_counts(runner->read_expert_counts(), 0);  // nothing counted yet
  const std::vector<step_plan> steps = plans(4);
  runner->execute(steps[0]);
  const expert_counts after_prefill = runner->read_expert_counts();
  expect_counts(after_prefill, 21);

  // The rest through the worker actor, whose answer is the runner's reading.
  caf_config cfg;
  caf::actor_system sys{cfg};
  caf::actor worker = sys.spawn<caf::detached>(worker_actor, runner, false, 0);
  caf::scoped_actor self{sys};
  for (size_t k = 1; k < steps.size(); ++k) {
    self->request(worker, std::chrono::seconds(60), steps[k])
        .receive([](const step_output&) {}, [](const caf::error& err) { ADD_FAILURE() << caf_error_text(err); });
  }
  self->request(worker, std::chrono::seconds(60), atoms::get_expert_counts_v)
      .receive([](const expert_counts& c) { expect_counts(c, 21 + 4 * 3); },
               [](const caf::error& err) { ADD_FAILURE() << caf_error_text(err); });
  self->send_exit(worker, caf::exit_reason::user_shutdown);
}

TEST(expert_counts, off_unless_asked) {
  std::unique_ptr<model_runner> runner = moe_runner(false);
  runner->execute(plans(0)[0]);
  const expert_counts c = runner->read_expert_counts();
  EXPECT_TRUE(c.layers.empty());
  EXPECT_TRUE(c.counts.empty());
}

}  // namespace
}  // namespace troupe
