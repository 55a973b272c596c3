// Tensor and pipeline parallelism at the worker: T x P model_runners on
// the CPU backend, a thread a rank meeting in cpu_groups, each holding its
// part of the fixture checkpoints (model/tp_layout.h: its heads and rows,
// its stage's layers), run the same plans (a batched prefill with prompt
// logprobs, then decode steps; greedy, and sampled with seeds); the
// earlier stages take each step's tokens from the last (as the worker
// group gives them). Checks:
// - the last stage's ranks answer with the same tokens and logprobs, bit
//   for bit (the rule the worker group relies on);
// - the answers match one rank holding everything within 1e-4 (float32
//   sums in another order), for T = 2 and 4, for T values that need
//   padding: 3 (KV heads padded, intermediate padded, vocabulary
//   replicated) and 8 on tiny-qwen2 (query heads padded in each group),
//   for P = 2, 3, 4, and for T = 2 and 3 with P = 2;
// - dummy weights are the same logical weights for every T;
// - llama_model::memory_footprint is what create allocates.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <thread>

#include "actors/worker/model_runner.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "parallel/cpu_group.h"
#include "tests/actors/fixture_runner.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

constexpr int64_t block_size = 16;
constexpr int num_decode_steps = 6;

std::string model_dir(const std::string& name) {
  return std::string(TROUPE_TEST_DATA) + "/models/" + name;
}

// A rank's runner (its part of the checkpoint, or dummy weights) in its
// groups (null: none).
std::unique_ptr<model_runner> make_rank(const model_config& cfg, const checkpoint* ckpt,
                                        std::unique_ptr<communicator> tp,
                                        std::unique_ptr<communicator> pp) {
  std::unique_ptr<ops> backend = std::make_unique<cpu_ops>();
  weight_source source;
  source.ckpt = ckpt;
  source.dummy_seed = 7;
  runner_limits rl;
  rl.max_num_batched_tokens = 256;
  rl.max_num_seqs = 8;
  rl.max_model_len = 64;
  rl.block_size = block_size;
  rl.num_blocks = 16;
  model_parallel parallel;
  parallel.tp = tp.get();
  parallel.pp = pp.get();
  parallel.max_logits_rows = model_runner::logits_chunk_rows;
  auto model = llama_model::create(cfg, *backend, source, rl.max_num_batched_tokens,
                                   rl.max_model_len, parallel);
  EXPECT_TRUE(static_cast<bool>(model)) << model.error_message();
  std::vector<std::unique_ptr<communicator>> groups;
  groups.push_back(std::move(tp));
  groups.push_back(std::move(pp));
  return std::make_unique<model_runner>(std::move(backend), std::move(model.value()), rl,
                                        std::move(groups));
}

// A batched prefill of three prompts (one greedy with prompt logprobs, two
// sampled with seeds), then decode steps.
std::vector<step_plan> plans() {
  return testing::three_prompt_plans(num_decode_steps, [](size_t i, new_request_data& d) {
    d.params.temperature = i == 0 ? 0.0f : 1.0f;
    d.params.logprobs = 5;
    d.params.prompt_logprobs = i == 0 ? 5 : -1;
    d.seed = 100 + i;
  });
}

// The outputs of plans() from the ranks of the last pipeline stage, ranks
// (stage-major, T a stage) on threads of their own. The earlier stages
// take each step's tokens from the last stage's first rank, as the worker
// group gives them.
std::vector<std::vector<step_output>> run(const std::string& model, int tp, int pp = 1,
                                          bool dummy = false) {
  auto cfg = load_model_config(model_dir(model));
  EXPECT_TRUE(static_cast<bool>(cfg));
  auto ckpt = checkpoint::open(model_dir(model));
  EXPECT_TRUE(static_cast<bool>(ckpt));
  std::vector<std::vector<std::unique_ptr<communicator>>> tp_groups, pp_groups;
  for (int s = 0; s < pp; ++s) tp_groups.push_back(cpu_group::create(tp));
  for (int t = 0; t < tp; ++t) pp_groups.push_back(cpu_group::create(pp));
  const std::vector<step_plan> steps = plans();
  std::vector<std::promise<step_output>> answers(steps.size());
  std::vector<std::shared_future<step_output>> answered;
  for (auto& a : answers) answered.push_back(a.get_future().share());
  std::vector<std::vector<step_output>> outputs(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int g = 0; g < tp * pp; ++g) {
    threads.emplace_back([&, g] {
      const auto s = static_cast<size_t>(g / tp), t = static_cast<size_t>(g % tp);
      auto runner = make_rank(cfg.value(), dummy ? nullptr : &ckpt.value(),
                              tp == 1 ? nullptr : std::move(tp_groups[s][t]),
                              pp == 1 ? nullptr : std::move(pp_groups[t][s]));
      EXPECT_EQ(runner->is_last_stage(), static_cast<int>(s) == pp - 1);
      for (size_t k = 0; k < steps.size(); ++k) {
        step_output out = runner->execute(steps[k]);
        if (!runner->is_last_stage()) {
          EXPECT_TRUE(out.outputs.empty());
          runner->apply_stage_results(answered[k].get());
          continue;
        }
        if (t == 0) answers[k].set_value(out);
        outputs[t].push_back(std::move(out));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return outputs;
}

void expect_same_bits(const token_logprobs& a, const token_logprobs& b, const std::string& where) {
  EXPECT_EQ(a.token_id, b.token_id) << where;
  EXPECT_EQ(a.logprob, b.logprob) << where;
  EXPECT_EQ(a.top_ids, b.top_ids) << where;
  EXPECT_EQ(a.top_logprobs, b.top_logprobs) << where;
}

void expect_close(const token_logprobs& want, const token_logprobs& got, const std::string& where) {
  EXPECT_EQ(want.token_id, got.token_id) << where;
  EXPECT_NEAR(want.logprob, got.logprob, 1e-4) << where;
  ASSERT_EQ(want.top_ids.size(), got.top_ids.size()) << where;
  for (size_t k = 0; k < want.top_ids.size(); ++k) {
    EXPECT_NEAR(want.top_logprobs[k], got.top_logprobs[k], 1e-4) << where << " top " << k;
  }
}

// compare(a, b, where) over every logprob of two runs' outputs, step by step.
template <class Compare>
void compare_runs(const std::vector<step_output>& a, const std::vector<step_output>& b,
                  Compare compare, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].outputs.size(), b[s].outputs.size()) << where;
    for (size_t i = 0; i < a[s].outputs.size(); ++i) {
      const sampled_output &x = a[s].outputs[i], &y = b[s].outputs[i];
      const std::string at = where + " step " + std::to_string(s) + " request " + std::to_string(x.id);
      ASSERT_EQ(x.id, y.id) << at;
      ASSERT_EQ(x.token_ids, y.token_ids) << at;
      ASSERT_EQ(x.logprobs.size(), y.logprobs.size()) << at;
      for (size_t t = 0; t < x.logprobs.size(); ++t) compare(x.logprobs[t], y.logprobs[t], at);
      ASSERT_EQ(x.prompt_logprobs.size(), y.prompt_logprobs.size()) << at;
      for (size_t t = 0; t < x.prompt_logprobs.size(); ++t) {
        compare(x.prompt_logprobs[t], y.prompt_logprobs[t], at + " prompt position " + std::to_string(t));
      }
    }
  }
}

struct tp_case {
  std::string model;
  int size;
  int stages = 1;
};

std::string case_name(const ::testing::TestParamInfo<tp_case>& info) {
  std::string s = info.param.model + "_T" + std::to_string(info.param.size) + "_P" +
                  std::to_string(info.param.stages);
  for (char& ch : s) {
    if (ch == '-') ch = '_';
  }
  return s;
}

class tensor_parallel_ranks : public ::testing::TestWithParam<tp_case> {};

TEST_P(tensor_parallel_ranks, agree_bit_for_bit_and_match_one_rank) {
  const auto one = run(GetParam().model, 1);
  const auto ranks = run(GetParam().model, GetParam().size, GetParam().stages);
  ASSERT_EQ(one[0].size(), plans().size());
  ASSERT_FALSE(one[0][0].outputs[0].prompt_logprobs.empty());
  for (size_t r = 1; r < ranks.size(); ++r) {
    compare_runs(ranks[0], ranks[r], expect_same_bits, "rank " + std::to_string(r));
  }
  compare_runs(one[0], ranks[0], expect_close,
               "T=1 vs T=" + std::to_string(GetParam().size) + " P=" +
                   std::to_string(GetParam().stages));
}

INSTANTIATE_TEST_SUITE_P(
    fixtures, tensor_parallel_ranks,
    ::testing::Values(tp_case{"tiny-llama", 2}, tp_case{"tiny-llama", 4},
                      tp_case{"tiny-llama", 3},      // KV heads and intermediate padded
                      tp_case{"tiny-llama-mha", 3},  // 8 KV heads padded to 9
                      tp_case{"tiny-qwen2", 2}, tp_case{"tiny-qwen2", 4},
                      tp_case{"tiny-qwen2", 8},  // query heads padded in each group
                      tp_case{"tiny-qwen3", 2}, tp_case{"tiny-qwen3", 4},
                      // Pipeline stages (tiny-qwen2's 3 layers split 2 + 1;
                      // tied embeddings loaded again on the last stage),
                      // and both at once.
                      tp_case{"tiny-llama", 1, 2}, tp_case{"tiny-llama", 1, 4},
                      tp_case{"tiny-qwen2", 1, 2}, tp_case{"tiny-qwen2", 1, 3},
                      tp_case{"tiny-qwen3", 1, 2}, tp_case{"tiny-llama-mha", 1, 2},
                      tp_case{"tiny-llama", 2, 2}, tp_case{"tiny-qwen2", 2, 2},
                      tp_case{"tiny-llama", 3, 2}),
    case_name);

// Rank r of stage `stage` of a T x P layout over the CPU backend, with
// dummy weights (`source` may offload).
result<std::unique_ptr<llama_model>> make_layout_rank(const model_config& cfg, cpu_ops& backend,
                                                      const weight_source& source,
                                                      std::vector<std::unique_ptr<communicator>>& tp_members,
                                                      std::vector<std::unique_ptr<communicator>>& pp_members,
                                                      int r, int stage) {
  model_parallel parallel;
  parallel.tp = tp_members[static_cast<size_t>(r)].get();
  parallel.pp = pp_members.size() > 1 ? pp_members[static_cast<size_t>(stage)].get() : nullptr;
  parallel.max_logits_rows = 64;
  return llama_model::create(cfg, backend, source, 100, 80, parallel);
}

// llama_model::memory_footprint (the dry run's plan) is what create
// allocates, for every rank of every T and stage of every P.
TEST(tensor_parallel_memory, footprint_is_what_create_allocates) {
  for (const std::string name : {"tiny-llama", "tiny-llama-mha", "tiny-qwen2", "tiny-qwen3"}) {
    auto cfg = load_model_config(model_dir(name));
    ASSERT_TRUE(static_cast<bool>(cfg));
    for (int size : {1, 2, 3, 4, 8}) {
      for (int stages : {1, 2, 3}) {
        if (stages > cfg->num_hidden_layers) continue;  // (tiny-llama-mha has 2)
        auto tp_members = cpu_group::create(size);
        auto pp_members = cpu_group::create(stages);
        for (int g = 0; g < size * stages; ++g) {
          const int stage = g / size, r = g % size;
          cpu_ops backend;
          weight_source source;  // dummy
          auto model = make_layout_rank(cfg.value(), backend, source, tp_members, pp_members, r, stage);
          ASSERT_TRUE(static_cast<bool>(model)) << model.error_message();
          const auto f = llama_model::memory_footprint(cfg.value(), model.value()->layout(), stage,
                                                       stages, dtype::f32, 100, 80, 64);
          EXPECT_EQ(f.weights + f.workspace, backend.allocated_bytes())
              << name << " T=" << size << " P=" << stages << " rank " << g;
        }
      }
    }
  }
}

// With cpu_offload_gb: the device weights the plan counts (the staging
// buffer, not the offloaded layers) plus its host arenas are what create
// allocates (the cpu backend's alloc_host is its alloc), for no layer, the
// first alone (a 1-byte budget) and every layer of the stage.
TEST(tensor_parallel_memory, offloaded_layers_are_counted_on_the_host) {
  for (const std::string name : {"tiny-llama", "tiny-qwen2"}) {
    auto cfg = load_model_config(model_dir(name));
    ASSERT_TRUE(static_cast<bool>(cfg));
    for (int stages : {1, 2}) {
      for (const int64_t budget : {int64_t{0}, int64_t{1}, int64_t{1} << 40}) {
        auto tp_members = cpu_group::create(2);
        auto pp_members = cpu_group::create(stages);
        for (int g = 0; g < 2 * stages; ++g) {
          const int stage = g / 2, r = g % 2;
          cpu_ops backend;
          weight_source source;  // dummy
          source.cpu_offload_bytes = budget;
          auto model = make_layout_rank(cfg.value(), backend, source, tp_members, pp_members, r, stage);
          ASSERT_TRUE(static_cast<bool>(model)) << model.error_message();
          const auto f = llama_model::memory_footprint(cfg.value(), model.value()->layout(), stage,
                                                       stages, dtype::f32, 100, 80, 64, budget);
          const std::string where = name + " P=" + std::to_string(stages) + " budget " +
                                    std::to_string(budget) + " rank " + std::to_string(g);
          EXPECT_EQ(f.weights + f.workspace + f.host_weights, backend.allocated_bytes()) << where;
          const stage_layers& layers = model.value()->stage();
          const int64_t want = budget == 0 ? 0 : budget == 1 ? 1 : layers.end - layers.begin;
          EXPECT_EQ(model.value()->offload().num_offloaded, want) << where;
          EXPECT_EQ(f.host_weights > 0, want > 0) << where;
        }
      }
    }
  }
}

// The same for the mixture-of-experts fixtures, whose plan also counts the
// MoE kernels' scratch (ops::moe_scratch_bytes), which only the cuda
// backend reserves: every expert's slice on every rank, the router
// replicated.
TEST(tensor_parallel_memory, moe_footprint_is_what_create_allocates_plus_the_kernels_scratch) {
  for (const std::string name : {"tiny-qwen3-moe", "tiny-mixtral", "tiny-qwen2-moe"}) {
    auto cfg = load_model_config(std::string(TROUPE_TEST_DATA) + "/moe/" + name);
    ASSERT_TRUE(static_cast<bool>(cfg));
    for (int size : {1, 2, 3}) {
      auto members = cpu_group::create(size);
      for (int r = 0; r < size; ++r) {
        cpu_ops backend;
        weight_source source;  // dummy
        model_parallel parallel;
        parallel.tp = members[static_cast<size_t>(r)].get();
        parallel.max_logits_rows = 64;
        auto model = llama_model::create(cfg.value(), backend, source, 100, 80, parallel);
        ASSERT_TRUE(static_cast<bool>(model)) << model.error_message();
        const tp_layout& l = model.value()->layout();
        const auto f = llama_model::memory_footprint(cfg.value(), l, 0, 1, dtype::f32, 100, 80, 64);
        const moe_shape scratch{100, cfg->moe.num_experts, cfg->moe.top_k, l.expert_intermediate,
                                cfg->hidden_size};
        EXPECT_EQ(l.expert_intermediate, (cfg->moe.intermediate + size - 1) / size);
        EXPECT_EQ(l.shared_intermediate, (cfg->moe.shared_intermediate + size - 1) / size);
        EXPECT_EQ(f.weights + f.workspace - moe_scratch_bytes(scratch, dtype::f32), backend.allocated_bytes())
            << name << " T=" << size << " rank " << r;
      }
    }
  }
}

TEST(tensor_parallel_dummy, dummy_weights_are_the_same_for_every_t) {
  // The prompt tokens' logprobs (the sampled tokens may part at near-ties:
  // dummy weights give nearly flat distributions). They spread over about
  // 1e-2 (unit-RMS hidden states, weights of 1e-3); weights that differed
  // by T would move them by far more than the bound.
  const auto prompt_logprobs = [](const std::vector<std::vector<step_output>>& run) {
    std::vector<float> out;
    for (const token_logprobs& lp : run[0][0].outputs[0].prompt_logprobs) out.push_back(lp.logprob);
    return out;
  };
  const auto one = prompt_logprobs(run("tiny-llama", 1, 1, true));
  ASSERT_EQ(one.size(), 4u);
  for (int size : {2, 3}) {
    const auto got = prompt_logprobs(run("tiny-llama", size, 1, true));
    ASSERT_EQ(got.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(got[i], one[i], 1e-5) << "T=" << size;
  }
}

}  // namespace
}  // namespace troupe
