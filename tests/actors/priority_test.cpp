// scheduling_policy priority: the lowest-priority running request is the
// preemption victim (under fcfs it is the newest), and waiting requests are
// admitted by priority; every request still completes with all its tokens.
#include <gtest/gtest.h>

#include "actors/block_manager/kv_ledger.h"
#include "actors/scheduler/token_budget_scheduler.h"
#include "tests/actors/fake_worker.h"

namespace troupe {
namespace {

struct run_result {
  std::vector<request_id> finish_order;
  std::map<request_id, size_t> num_tokens;
  int64_t preemptions = 0;
  int64_t blocks_free_at_end = 0;
};

// A (priority 5) starts first; B (priority 0) arrives a step later; the
// cache (8 blocks of 4) cannot hold both at full length (6 blocks each).
run_result run(bool priority_policy) {
  scheduler_limits l;
  l.block_size = 4;
  l.num_blocks_usable = 8;
  l.max_model_len = 32;
  l.max_num_batched_tokens = 64;
  l.max_num_seqs = 4;
  l.priority_policy = priority_policy;
  token_budget_scheduler sched(l);
  kv_ledger ledger(l.num_blocks_usable + 1, l.block_size, false);
  testing::fake_worker worker;
  run_result out;
  auto step = [&] {
    const step_plan plan = sched.commit(ledger.apply(sched.schedule()));
    if (plan.step_id != 0) sched.update(worker.execute(plan));
    for (const request_output& o : sched.take_outputs()) {
      out.num_tokens[o.id] += o.new_token_ids.size();
      if (o.finish != finish_reason::none) out.finish_order.push_back(o.id);
    }
  };
  sampling_params low, high;
  low.max_tokens = high.max_tokens = 10;
  low.ignore_eos = high.ignore_eos = true;
  low.priority = 5;
  high.priority = 0;
  EXPECT_EQ(sched.add_request(1, std::vector<int32_t>(12, 3), low), "");
  step();
  EXPECT_EQ(sched.add_request(2, std::vector<int32_t>(12, 4), high), "");
  for (int i = 0; i < 200 && sched.has_unfinished(); ++i) step();
  step();  // returns the last blocks
  out.preemptions = sched.stats().num_preemptions;
  out.blocks_free_at_end = ledger.pool().num_blocks_free();
  return out;
}

TEST(priority_policy, lowest_priority_is_preempted_and_finishes_last) {
  const run_result r = run(true);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_EQ(r.finish_order, (std::vector<request_id>{2, 1}));
  EXPECT_EQ(r.num_tokens.at(1), 10u);
  EXPECT_EQ(r.num_tokens.at(2), 10u);
  EXPECT_EQ(r.blocks_free_at_end, 8);
}

TEST(priority_policy, fcfs_preempts_the_newest_instead) {
  const run_result r = run(false);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_EQ(r.finish_order, (std::vector<request_id>{1, 2}));
  EXPECT_EQ(r.num_tokens.at(1), 10u);
  EXPECT_EQ(r.num_tokens.at(2), 10u);
  EXPECT_EQ(r.blocks_free_at_end, 8);
}

TEST(priority_policy, waiting_requests_are_admitted_by_priority) {
  scheduler_limits l;
  l.block_size = 4;
  l.num_blocks_usable = 64;
  l.max_model_len = 32;
  l.max_num_batched_tokens = 8;  // one 8-token prompt a step
  l.max_num_seqs = 8;
  l.priority_policy = true;
  token_budget_scheduler sched(l);
  kv_ledger ledger(l.num_blocks_usable + 1, l.block_size, false);
  sampling_params p;
  p.max_tokens = 1;
  for (int i = 0; i < 3; ++i) {
    p.priority = 10 - i;  // later arrivals have higher priority
    ASSERT_EQ(sched.add_request(static_cast<request_id>(i + 1), std::vector<int32_t>(8, 1), p), "");
  }
  const step_plan plan = sched.commit(ledger.apply(sched.schedule()));
  ASSERT_EQ(plan.new_requests.size(), 1u);
  EXPECT_EQ(plan.new_requests[0].id, 3u);
}

}  // namespace
}  // namespace troupe
