// Test helpers around model_runner on the CPU backend: a runner over a
// fixture checkpoint (one rank, the whole checkpoint), and the plans of a
// small batch (three prompts prefilled in one step, then decode steps), as
// the scheduler would send them.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/worker/model_runner.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace troupe::testing {

// The checkpoint in `dir` (config.json and its safetensors) on a cpu_ops
// backend, under `rl`.
inline std::unique_ptr<model_runner> cpu_fixture_runner(const std::string& dir, const runner_limits& rl) {
  auto cfg = load_model_config(dir);
  EXPECT_TRUE(static_cast<bool>(cfg)) << cfg.error_message();
  auto ckpt = checkpoint::open(dir);
  EXPECT_TRUE(static_cast<bool>(ckpt)) << ckpt.error_message();
  if (!cfg || !ckpt) return nullptr;
  std::unique_ptr<ops> backend = std::make_unique<cpu_ops>();
  weight_source source;
  source.ckpt = &ckpt.value();
  model_parallel parallel;
  parallel.max_logits_rows = model_runner::logits_chunk_rows;
  auto model =
      llama_model::create(cfg.value(), *backend, source, rl.max_num_batched_tokens, rl.max_model_len, parallel);
  EXPECT_TRUE(static_cast<bool>(model)) << model.error_message();
  if (!model) return nullptr;
  return std::make_unique<model_runner>(std::move(backend), std::move(model.value()), rl);
}

// Requests 1, 2 and 3 (prompts of 5, 9 and 7 tokens, 21 in all; request i
// in blocks 2i + 1 and 2i + 2) prefilled by step 1, then `decodes` steps of
// one token each. `params(i, d)` sets request i's sampling parameters and
// seed (default: the defaults).
inline std::vector<step_plan> three_prompt_plans(int decodes,
                                                 const std::function<void(size_t, new_request_data&)>& params = {}) {
  const std::vector<std::vector<int32_t>> prompts = {
      {11, 402, 33, 874, 45}, {7, 7, 900, 12, 64, 301, 5, 88, 19}, {1000, 3, 512, 77, 2, 640, 9}};
  std::vector<step_plan> out(1);
  out[0].step_id = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    new_request_data d;
    d.id = 1 + i;
    d.token_ids = prompts[i];
    d.num_prompt_tokens = static_cast<int64_t>(prompts[i].size());
    d.params.max_tokens = 32;
    if (params) params(i, d);
    d.block_ids = {static_cast<int32_t>(1 + 2 * i), static_cast<int32_t>(2 + 2 * i)};
    d.num_scheduled_tokens = d.num_prompt_tokens;
    out[0].total_num_scheduled_tokens += d.num_scheduled_tokens;
    out[0].new_requests.push_back(d);
  }
  for (int s = 0; s < decodes; ++s) {
    step_plan decode;
    decode.step_id = 2 + s;
    for (size_t i = 0; i < prompts.size(); ++i) {
      cached_request_data c;
      c.id = 1 + i;
      c.num_scheduled_tokens = 1;
      decode.cached_requests.push_back(c);
      decode.total_num_scheduled_tokens += 1;
    }
    out.push_back(decode);
  }
  return out;
}

}  // namespace troupe::testing
