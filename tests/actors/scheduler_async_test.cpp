// Async scheduling (token_budget_scheduler with async_scheduling): a step
// planned while the previous one is in flight gives that step's sampled
// requests a placeholder token. Driven by the scheduler harness's pipelined
// loop against the real kv_ledger and the content-addressed fake cache, so a
// placeholder computed in the wrong slot, a block freed while a later step
// still reads it, or a token lost or doubled shows; outputs must equal the
// lockstep run's exactly.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_harness.h"

namespace troupe {
namespace {

using namespace sched_testing;

scheduler_limits async_limits() {
  scheduler_limits l = small_limits();
  l.async_scheduling = true;
  return l;
}

struct workload {
  std::vector<std::pair<int64_t, int32_t>> reqs;  // (prompt length, max_tokens)
};

// Runs the same requests lockstep and pipelined; tokens come from the
// context read back from the fake KV cache, EOS (token 104 in the
// context-driven model's range) ends some early.
void expect_async_equals_lockstep(scheduler_limits l, const workload& w, int64_t* ahead_out) {
  l.eos_token_ids = {104};
  std::map<request_id, result> want;
  {
    scheduler_limits lock = l;
    lock.async_scheduling = false;
    harness h(lock);
    h.worker.sample_from_context = true;
    for (size_t i = 0; i < w.reqs.size(); ++i) {
      ASSERT_EQ(h.add(i + 1, w.reqs[i].first, tokens(w.reqs[i].second)), "");
    }
    h.run_to_completion();
    EXPECT_EQ(h.sched.stats().num_steps_ahead, 0);
    want = h.results;
    h.drain_and_expect_all_blocks_free();
  }
  l.async_scheduling = true;
  harness h(l);
  h.worker.sample_from_context = true;
  for (size_t i = 0; i < w.reqs.size(); ++i) {
    ASSERT_EQ(h.add(i + 1, w.reqs[i].first, tokens(w.reqs[i].second)), "");
  }
  const int64_t ahead = h.run_pipelined();
  EXPECT_EQ(h.sched.stats().num_steps_ahead, ahead);
  for (const auto& [id, r] : want) {
    EXPECT_EQ(h.results[id].tokens, r.tokens) << "request " << id;
    EXPECT_EQ(h.results[id].finish, r.finish) << "request " << id;
    EXPECT_EQ(h.results[id].num_finishes, 1) << "request " << id;
  }
  h.drain_and_expect_all_blocks_free();
  *ahead_out = ahead;
}

TEST(scheduler_async_test, decodes_are_planned_ahead_with_the_same_outputs) {
  workload w;
  for (int i = 0; i < 6; ++i) w.reqs.push_back({3 + i * 5, 4 + i * 3});
  int64_t ahead = 0;
  expect_async_equals_lockstep(async_limits(), w, &ahead);
  EXPECT_GT(ahead, 10);
}

// Speculative decoding with async scheduling: requests whose drafter has a
// match wait for their tokens and verify drafts (right ones continue the
// context model, every third proposal is wrong from its second token);
// the others keep being planned ahead. Outputs equal the lockstep run
// without speculation, and steps are still planned ahead.
TEST(scheduler_async_test, speculation_keeps_outputs_and_plans_others_ahead) {
  scheduler_limits l = async_limits();
  l.eos_token_ids = {104};
  l.num_speculative_tokens = 3;
  l.spec_adaptive = false;
  const workload w{{{5, 30}, {17, 40}, {3, 25}, {9, 35}, {30, 20}}};
  std::map<request_id, result> want;
  {
    scheduler_limits plain = l;
    plain.async_scheduling = false;
    plain.num_speculative_tokens = 0;
    harness h(plain);
    h.worker.sample_from_context = true;
    for (size_t i = 0; i < w.reqs.size(); ++i) {
      ASSERT_EQ(h.add(i + 1, w.reqs[i].first, tokens(w.reqs[i].second)), "");
    }
    h.run_to_completion();
    want = h.results;
  }
  harness h(l);
  h.worker.sample_from_context = true;
  int64_t proposals = 0;
  // Requests 1 and 3 get drafts (the others' drafter finds nothing).
  h.draft_fn = [&](request_id id, int32_t limit) {
    std::vector<int32_t> d;
    auto it = h.worker.requests.find(id);
    if (id % 2 == 0 || it == h.worker.requests.end()) return d;
    context ctx = it->second.token_ids;
    const bool wrong = ++proposals % 3 == 0;
    for (int32_t j = 0; j < limit; ++j) {
      d.push_back(wrong && j == 1 ? 999 : next_of_context(ctx));
      ctx.push_back(d.back());
    }
    return d;
  };
  for (size_t i = 0; i < w.reqs.size(); ++i) {
    ASSERT_EQ(h.add(i + 1, w.reqs[i].first, tokens(w.reqs[i].second)), "");
  }
  const int64_t ahead = h.run_pipelined();
  for (const auto& [id, r] : want) {
    EXPECT_EQ(h.results[id].tokens, r.tokens) << "request " << id;
    EXPECT_EQ(h.results[id].finish, r.finish) << "request " << id;
  }
  const engine_stats s = h.sched.stats();
  EXPECT_GT(s.spec_num_accepted_tokens, 10);
  EXPECT_GT(s.spec_num_draft_tokens, s.spec_num_accepted_tokens);
  EXPECT_GT(ahead, 10);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_async_test, chunked_prefills_and_prefix_caching_stay_exact) {
  scheduler_limits l = async_limits();
  l.max_num_batched_tokens = 8;  // prompts arrive in chunks beside the decodes
  l.enable_prefix_caching = true;
  workload w;
  for (int i = 0; i < 10; ++i) w.reqs.push_back({(i * 7) % 23 + 1, 3 + (i * 5) % 11});
  int64_t ahead = 0;
  expect_async_equals_lockstep(l, w, &ahead);
  EXPECT_GT(ahead, 0);
}

TEST(scheduler_async_test, a_tight_cache_falls_back_to_lockstep_and_preempts_there) {
  scheduler_limits l = async_limits();
  l.num_blocks_usable = 12;
  workload w;
  for (int i = 0; i < 6; ++i) w.reqs.push_back({5 + i, 12});
  int64_t ahead = 0;
  expect_async_equals_lockstep(l, w, &ahead);
}

TEST(scheduler_async_test, preempts_only_with_no_step_in_flight) {
  scheduler_limits l = async_limits();
  l.num_blocks_usable = 10;
  harness h(l);
  for (request_id id = 1; id <= 4; ++id) ASSERT_EQ(h.add(id, 6, tokens(14)), "");
  // can_schedule_ahead refuses whatever would need a victim; a pipelined run
  // still preempts (in the lockstep steps between) and finishes everything.
  h.run_pipelined();
  EXPECT_GT(h.sched.stats().num_preemptions, 0);
  for (request_id id = 1; id <= 4; ++id) EXPECT_EQ(h.results[id].tokens.size(), 14u);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_async_test, nothing_is_planned_past_max_tokens) {
  harness h(async_limits());
  h.worker.pipelined = true;
  ASSERT_EQ(h.add(1, 4, tokens(2)), "");
  const step_plan first = h.commit_step({});  // the prompt; samples token 1
  ASSERT_NE(first.step_id, 0);
  ASSERT_TRUE(h.sched.can_schedule_ahead());
  const step_plan second = h.commit_step({});  // token 1 is a placeholder here
  ASSERT_EQ(second.cached_requests.size(), 1u);
  EXPECT_EQ(second.cached_requests[0].num_scheduled_tokens, 1);
  // Token 2 would be the last: nothing after it may be planned.
  EXPECT_FALSE(h.sched.can_schedule_ahead());
  std::map<request_id, int64_t> ran;
  h.execute_step(first, ran, {});
  EXPECT_FALSE(h.sched.can_schedule_ahead());  // second is in flight and samples token 2
  h.execute_step(second, ran, {});
  EXPECT_EQ(h.results[1].tokens.size(), 2u);
  EXPECT_EQ(h.results[1].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

// A request whose sampler reads its output (penalties here; constraints
// likewise) is planned ahead like the others: the worker samples its row
// once the token in flight is back. Outputs equal the lockstep run's.
TEST(scheduler_async_test, penalties_are_planned_ahead_too) {
  harness h(async_limits());
  h.worker.pipelined = true;
  sampling_params p = tokens(5);
  p.frequency_penalty = 0.5f;
  ASSERT_EQ(h.add(1, 4, p), "");
  const step_plan first = h.commit_step({});
  ASSERT_NE(first.step_id, 0);
  EXPECT_TRUE(h.sched.can_schedule_ahead());
  ASSERT_EQ(h.add(2, 3, tokens(3)), "");
  const step_plan second = h.commit_step({});  // planned while the first runs
  EXPECT_EQ(second.new_requests.size(), 1u);
  EXPECT_EQ(second.cached_requests.size(), 1u);
  std::map<request_id, int64_t> ran;
  h.execute_step(first, ran, {});
  h.execute_step(second, ran, {});
  h.run_pipelined();
  EXPECT_EQ(h.results[1].tokens.size(), 5u);
  EXPECT_EQ(h.results[2].tokens.size(), 3u);
  h.drain_and_expect_all_blocks_free();
}

// A request the in-flight step ends (EOS) was planned ahead too: that work
// is dropped, it finishes once, the worker is told to drop it, and its
// blocks come back.
TEST(scheduler_async_test, eos_in_the_step_in_flight_drops_the_step_planned_ahead) {
  scheduler_limits l = async_limits();
  l.eos_token_ids = {3};
  harness h(l);
  h.worker.pipelined = true;
  h.worker.next_token = [](request_id, int64_t i) { return i == 1 ? 3 : 9; };
  ASSERT_EQ(h.add(1, 5, tokens(10)), "");
  const step_plan s1 = h.commit_step({});        // prompt -> token 0
  const step_plan s2 = h.commit_step({});        // token 0 -> token 1 (EOS)
  std::map<request_id, int64_t> ran;
  h.execute_step(s1, ran, {});
  ASSERT_TRUE(h.sched.can_schedule_ahead());
  const step_plan s3 = h.commit_step({});        // planned before the EOS is known
  ASSERT_EQ(s3.cached_requests.size(), 1u);
  h.execute_step(s2, ran, {});                   // EOS: finished now
  EXPECT_EQ(h.results[1].finish, finish_reason::stop);
  EXPECT_EQ(h.results[1].tokens, (std::vector<int32_t>{9, 3}));
  h.execute_step(s3, ran, {});                   // its output is dropped
  EXPECT_EQ(h.results[1].num_finishes, 1);
  EXPECT_EQ(h.results[1].tokens.size(), 2u);
  const step_plan s4 = h.commit_step({});        // its blocks go back
  EXPECT_EQ(s4.step_id, 0);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_async_test, abort_with_two_steps_in_flight) {
  harness h(async_limits());
  h.worker.pipelined = true;
  ASSERT_EQ(h.add(1, 6, tokens(20)), "");
  ASSERT_EQ(h.add(2, 4, tokens(6)), "");
  const step_plan s1 = h.commit_step({});
  const step_plan s2 = h.commit_step({});
  ASSERT_EQ(h.sched.steps_in_flight(), 2);
  h.sched.abort_request(1);
  EXPECT_TRUE(h.sched.take_outputs().empty());  // when a step returns
  std::map<request_id, int64_t> ran;
  h.execute_step(s1, ran, {});
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].num_finishes, 1);
  h.execute_step(s2, ran, {});                   // request 1's part is dropped
  EXPECT_EQ(h.results[1].num_finishes, 1);
  h.run_pipelined();
  EXPECT_EQ(h.results[2].tokens.size(), 6u);
  EXPECT_EQ(h.worker.requests.count(1), 0u);
  h.drain_and_expect_all_blocks_free();
}

// With nothing running to plan ahead, a transaction is worth it only when
// the first waiting request can be admitted; aborting a waiting request
// finishes it at once even with a step in flight.
TEST(scheduler_async_test, admissions_ahead_only_when_they_fit_and_waiting_aborts_finish) {
  scheduler_limits l = async_limits();
  l.max_num_seqs = 1;
  harness h(l);
  h.worker.pipelined = true;
  ASSERT_EQ(h.add(1, 4, tokens(2)), "");
  const step_plan first = h.commit_step({});
  ASSERT_NE(first.step_id, 0);
  ASSERT_TRUE(h.sched.can_schedule_ahead());
  const step_plan second = h.commit_step({});  // request 1's last token
  std::map<request_id, int64_t> ran;
  h.execute_step(first, ran, {});
  ASSERT_EQ(h.add(2, 4, tokens(2)), "");
  ASSERT_EQ(h.add(3, 4, tokens(2)), "");
  EXPECT_FALSE(h.sched.can_schedule_ahead());  // max_num_seqs 1: request 2 cannot join
  h.sched.abort_request(3);                    // waiting, in no step: finished now
  h.collect();
  EXPECT_EQ(h.results[3].finish, finish_reason::abort);
  h.execute_step(second, ran, {});
  h.run_pipelined();
  EXPECT_EQ(h.results[1].tokens.size(), 2u);
  EXPECT_EQ(h.results[2].tokens.size(), 2u);
  EXPECT_EQ(h.results[3].num_finishes, 1);
  h.drain_and_expect_all_blocks_free();
}

}  // namespace
}  // namespace troupe
