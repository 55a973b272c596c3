// Parallel sampling (n > 1) by fork and copy-on-write: siblings sample their
// first token from the leader's prompt logits, share the prompt's blocks,
// and copy the partly filled last block on first write. Checked on the
// scheduler core with a real kv_ledger (block counts) and end to end through
// the engine (each sample equals the same request run alone with its seed).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "actors/block_manager/kv_ledger.h"
#include "actors/engine.h"
#include "tests/actors/waiting_sink.h"
#include "actors/scheduler/token_budget_scheduler.h"
#include "tests/actors/fake_worker.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

TEST(fork, siblings_share_prompt_blocks_and_copy_the_partial_one) {
  scheduler_limits l;
  l.block_size = 4;
  l.num_blocks_usable = 64;
  l.max_model_len = 64;
  l.max_num_batched_tokens = 32;
  l.max_num_seqs = 8;
  token_budget_scheduler sched(l);
  kv_ledger ledger(l.num_blocks_usable + 1, l.block_size, false);
  testing::fake_worker worker;
  sampling_params p;
  p.max_tokens = 3;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 full blocks + 2 tokens
  ASSERT_EQ(sched.add_request(1, prompt, p), "");
  for (request_id c = 2; c <= 4; ++c) ASSERT_EQ(sched.add_request(c, prompt, p, 1), "");
  std::map<request_id, std::vector<int32_t>> tokens;
  std::map<request_id, finish_reason> finished;
  auto step = [&] {
    const kv_transaction txn = sched.schedule();
    const step_plan plan = sched.commit(ledger.apply(txn));
    if (plan.step_id != 0) sched.update(worker.execute(plan));
    for (const request_output& o : sched.take_outputs()) {
      tokens[o.id].insert(tokens[o.id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finish != finish_reason::none) finished[o.id] = o.finish;
    }
  };
  step();  // the leader's prefill samples all four first tokens
  EXPECT_EQ(ledger.pool().num_blocks_used(), 3);
  for (request_id c = 2; c <= 4; ++c) EXPECT_EQ(tokens[c], (std::vector<int32_t>{int32_t(200 + c)}));
  step();  // forks share 3 blocks; the partial one is copied for 3 of the 4 writers
  EXPECT_EQ(worker.copies, 3);
  EXPECT_EQ(ledger.pool().num_blocks_used(), 2 + 4) << "2 shared full blocks + 4 last blocks";
  const auto* leader_blocks = ledger.blocks_of(1);
  ASSERT_NE(leader_blocks, nullptr);
  for (request_id c = 2; c <= 4; ++c) {
    const auto* b = ledger.blocks_of(c);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ((*b)[0], (*leader_blocks)[0]);
    EXPECT_EQ((*b)[1], (*leader_blocks)[1]);
    EXPECT_NE((*b)[2], (*leader_blocks)[2]);
  }
  EXPECT_EQ(ledger.pool().ref_count((*leader_blocks)[0]), 4);
  while (sched.has_unfinished()) step();
  step();  // returns the last blocks
  for (request_id id = 1; id <= 4; ++id) {
    EXPECT_EQ(tokens[id].size(), 3u) << id;
    EXPECT_EQ(finished[id], finish_reason::length);
  }
  EXPECT_EQ(ledger.pool().num_blocks_free(), l.num_blocks_usable);
}

TEST(fork, n4_samples_equal_solo_runs_with_their_seeds) {
  engine_config c;
  c.model = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";
  c.max_model_len = 256;
  c.num_gpu_blocks_override = 128;
  c.log_level = "warn";
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.error_message();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 37 + 11) % 1024);  // partial last block
  sampling_params p;
  p.temperature = 1.2f;
  p.max_tokens = 20;
  p.ignore_eos = true;
  p.has_seed = true;
  auto run_group = [&] {
    std::vector<engine::submission> batch;
    std::vector<std::shared_ptr<testing::waiting_sink>> sinks;
    for (int j = 0; j < 4; ++j) {
      sampling_params q = p;
      q.seed = 7 + j;
      sinks.push_back(std::make_shared<testing::waiting_sink>());
      batch.push_back({prompt, q, sinks.back(), j == 0 ? -1 : 0});
    }
    (*e)->submit_batch(std::move(batch));
    std::vector<std::vector<int32_t>> out;
    for (auto& s : sinks) out.push_back(s->wait());
    return out;
  };
  const engine_stats before = (*e)->stats();
  const auto group = run_group();
  const engine_stats after = (*e)->stats();
  // One prefill for all four (37 prompt tokens), then 19 decode steps each.
  EXPECT_EQ(after.num_computed_tokens - before.num_computed_tokens, 37 + 4 * 19);
  EXPECT_EQ(run_group(), group) << "n = 4 is reproducible by seed";
  for (int j = 0; j < 4; ++j) {
    sampling_params q = p;
    q.seed = 7 + j;
    auto sink = std::make_shared<testing::waiting_sink>();
    (*e)->submit(prompt, q, sink);
    EXPECT_EQ(sink->wait(), group[static_cast<size_t>(j)]) << "sample " << j;
  }
  EXPECT_NE(group[0], group[1]);
}

}  // namespace
}  // namespace troupe
