// token_budget_scheduler driven step by step against a real kv_ledger (the
// block manager) and a fake worker that keeps request state exactly as
// actors/worker/model_runner.cpp does, plus a simulated KV cache that checks
// every token's context is where the block table says it is.
//
// The simulated KV cache is content-addressed: the KV at position p stands
// for the whole context it was computed from (tokens 0..p), whoever wrote it.
// So a prefix-cache hit passes only when the hit block holds exactly the new
// request's prefix, and overwriting KV that another request still reads is
// caught when it is written.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_harness.h"

namespace troupe {
namespace {

using namespace sched_testing;

TEST(scheduler_test, respects_token_budget_and_max_num_seqs) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 10;
  l.max_num_seqs = 3;
  harness h(l);
  const std::vector<int64_t> prompts = {3, 25, 7, 12, 1, 30, 9, 4};
  int64_t expected_computed = 0, expected_generated = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int32_t max_tokens = 2 + int32_t(i % 5);
    ASSERT_EQ(h.add(i + 1, prompts[i], tokens(max_tokens)), "");
    expected_computed += prompts[i] + max_tokens - 1;  // the last token is never run
    expected_generated += max_tokens;
  }
  const auto first = h.step();
  int64_t first_total = 0;
  for (auto [id, n] : first) first_total += n;
  EXPECT_EQ(first_total, 10);  // enough work waits: the budget is filled
  // Fair shares (each request is a group; a group's share is one slot and
  // 10 * 1 / 3 = 3 tokens): three requests get 3 tokens each, the token left
  // goes to the first that wants more.
  EXPECT_EQ(first, (std::map<request_id, int64_t>{{1, 3}, {2, 4}, {3, 3}}));
  h.run_to_completion();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const result& r = h.results[i + 1];
    EXPECT_EQ(r.tokens, std::vector<int32_t>(2 + i % 5, 7)) << "request " << i + 1;
    EXPECT_EQ(r.finish, finish_reason::length);
    EXPECT_EQ(r.num_finishes, 1);
  }
  const engine_stats s = h.sched.stats();
  EXPECT_EQ(s.num_requests_finished, 8);
  EXPECT_EQ(s.num_generated_tokens, expected_generated);
  EXPECT_EQ(s.num_computed_tokens, expected_computed);
  EXPECT_EQ(s.num_preemptions, 0);
  EXPECT_EQ(s.num_steps, h.num_steps);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, with_shares_as_large_as_the_engine_admission_is_vllms) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 10;
  l.max_num_seqs = 3;
  l.max_num_seqs_per_request = 3;  // one request may take everything: no fair shares
  harness h(l);
  for (int64_t len : {3, 25, 7}) ASSERT_EQ(h.add(h.ids.size() + 1, len, tokens(2)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 3}, {2, 7}}));
  h.run_to_completion();
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, chunked_prefill_splits_a_long_prompt_and_mixes_in_decodes) {
  harness h(small_limits());  // budget 16
  ASSERT_EQ(h.add(1, 4, tokens(10)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 4}}));
  ASSERT_EQ(h.add(2, 40, tokens(2)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 15}}));
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 15}}));
  EXPECT_TRUE(h.results[2].tokens.empty());  // no token from a partial prefill
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 10}}));
  EXPECT_EQ(h.results[2].tokens.size(), 1u);
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 1}}));
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 10u);
  h.drain_and_expect_all_blocks_free();
}

// Three decoders leave 29 of 32 tokens; a 30-token prompt must wait for them
// whole when chunked prefill is off, and starts at once as a chunk when on.
void run_long_prompt_behind_decodes(bool chunked, std::vector<std::map<request_id, int64_t>>& log) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 32;
  l.max_model_len = 32;
  l.enable_chunked_prefill = chunked;
  harness h(l);
  for (request_id id : {1, 2, 3}) ASSERT_EQ(h.add(id, 2, tokens(6)), "");
  log.push_back(h.step());
  ASSERT_EQ(h.add(4, 30, tokens(2)), "");
  while (h.sched.has_unfinished()) log.push_back(h.step());
  for (request_id id : {1, 2, 3, 4}) EXPECT_EQ(h.results[id].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, without_chunked_prefill_a_prompt_over_the_budget_left_waits) {
  std::vector<std::map<request_id, int64_t>> log;
  run_long_prompt_behind_decodes(false, log);
  size_t first = 0;
  while (first < log.size() && !log[first].count(4)) ++first;
  ASSERT_LT(first, log.size());
  EXPECT_EQ(log[first].at(4), 30);  // whole, never chunked
  EXPECT_EQ(first, 6u);             // after the decoders' 5 remaining steps
  for (size_t i = 0; i < first; ++i) EXPECT_EQ(log[i].size(), 3u) << "step " << i;
  std::vector<std::map<request_id, int64_t>> chunked_log;
  run_long_prompt_behind_decodes(true, chunked_log);
  EXPECT_EQ(chunked_log[1].at(4), 29);  // chunked: starts right away
}

TEST(scheduler_test, preemption_under_a_tiny_cache_keeps_every_output_exact) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 8;  // small: a victim could come back as a chunk at once
  l.num_blocks_usable = 10;
  harness h(l);
  h.worker.next_token = [](request_id id, int64_t i) {
    return 100 + int32_t((id * 13 + i * 7) % 50);
  };
  // (prompt, max_tokens): each fits the cache alone (5 blocks), not all at once.
  const std::vector<std::pair<int64_t, int32_t>> reqs = {
      {6, 12}, {9, 10}, {5, 14}, {11, 9}, {7, 13}};
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(h.add(i + 1, reqs[i].first, tokens(reqs[i].second)), "");
  }
  int64_t preemptions = 0, preempting_steps = 0;
  hooks k;
  bool preempted_now = false;
  k.after_schedule = [&] {
    preempted_now = h.sched.stats().num_preemptions > preemptions;
    preemptions = h.sched.stats().num_preemptions;
  };
  for (int i = 0; i < 1000 && h.sched.has_unfinished(); ++i) {
    h.step(k);
    if (!preempted_now) continue;
    ++preempting_steps;  // as vLLM: a step that preempts admits nobody
    EXPECT_TRUE(h.last_plan.new_requests.empty()) << "step " << h.last_plan.step_id;
  }
  ASSERT_FALSE(h.sched.has_unfinished());
  EXPECT_GT(preempting_steps, 0);
  EXPECT_GT(h.sched.stats().num_preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const request_id id = i + 1;
    std::vector<int32_t> want;
    for (int32_t k = 0; k < reqs[i].second; ++k) want.push_back(h.worker.next_token(id, k));
    EXPECT_EQ(h.results[id].tokens, want) << "request " << id;
    EXPECT_EQ(h.results[id].finish, finish_reason::length);
    EXPECT_EQ(h.results[id].num_finishes, 1);
  }
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, requests_keep_their_seed_or_get_one_from_the_engine) {
  harness h(small_limits());
  sampling_params seeded = tokens(2);
  seeded.has_seed = true;
  seeded.seed = 424242;
  ASSERT_EQ(h.add(1, 3, seeded), "");
  ASSERT_EQ(h.add(2, 3, tokens(2)), "");
  ASSERT_EQ(h.add(3, 3, tokens(2)), "");
  h.step();
  EXPECT_EQ(h.worker.first_seed.at(1), 424242u);
  EXPECT_NE(h.worker.first_seed.at(2), h.worker.first_seed.at(3));
  // A fixed engine seed reproduces the drawn seeds.
  harness again(small_limits());
  ASSERT_EQ(again.add(1, 3, seeded), "");
  ASSERT_EQ(again.add(2, 3, tokens(2)), "");
  again.step();
  EXPECT_EQ(again.worker.first_seed.at(2), h.worker.first_seed.at(2));
}

TEST(scheduler_test, eos_stops_unless_ignore_eos) {
  scheduler_limits l = small_limits();
  l.eos_token_ids = {2, 3};
  harness h(l);
  h.worker.next_token = [](request_id, int64_t i) { return i == 3 ? 3 : 9; };
  ASSERT_EQ(h.add(1, 5, tokens(8)), "");
  sampling_params ignore = tokens(8);
  ignore.ignore_eos = true;
  ASSERT_EQ(h.add(2, 5, ignore), "");
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens, (std::vector<int32_t>{9, 9, 9, 3}));
  EXPECT_EQ(h.results[1].finish, finish_reason::stop);
  EXPECT_EQ(h.results[2].tokens, (std::vector<int32_t>{9, 9, 9, 3, 9, 9, 9, 9}));
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, stop_token_ids_stop_even_with_ignore_eos) {
  harness h(small_limits());
  h.worker.next_token = [](request_id, int64_t i) { return i == 2 ? 55 : 9; };
  sampling_params p = tokens(8);
  p.ignore_eos = true;
  p.stop_token_ids = {54, 55};
  ASSERT_EQ(h.add(1, 5, p), "");
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens, (std::vector<int32_t>{9, 9, 55}));
  EXPECT_EQ(h.results[1].finish, finish_reason::stop);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, finishes_at_max_model_len) {
  scheduler_limits l = small_limits();
  l.max_model_len = 16;
  harness h(l);
  ASSERT_EQ(h.add(1, 10, tokens(100)), "");
  ASSERT_EQ(h.add(2, 16, tokens(100)), "");  // a full-length prompt still gets one token
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 6u);
  EXPECT_EQ(h.results[1].finish, finish_reason::length);
  EXPECT_EQ(h.results[2].tokens.size(), 1u);
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, add_request_rejects_what_can_never_run) {
  scheduler_limits l = small_limits();
  l.max_model_len = 16;
  l.num_blocks_usable = 3;  // 12 tokens of KV
  token_budget_scheduler s(l);
  EXPECT_EQ(s.add_request(1, {}, tokens(4)), "the prompt is empty");
  EXPECT_EQ(s.add_request(2, std::vector<int32_t>(17, 5), tokens(4)),
            "the prompt has 17 tokens, more than max_model_len 16");
  EXPECT_EQ(s.add_request(3, std::vector<int32_t>(10, 5), tokens(5)),
            "the request needs up to 4 KV blocks but the cache has only 3");
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.stats().num_prompt_tokens, 0);
  EXPECT_EQ(s.add_request(4, std::vector<int32_t>(10, 5), tokens(2)), "");  // 12 tokens fit
  EXPECT_TRUE(s.has_unfinished());
}

// ---- abort -------------------------------------------------------------------

TEST(scheduler_test, abort_while_waiting_finishes_at_once) {
  scheduler_limits l = small_limits();
  l.max_num_seqs = 1;
  harness h(l);
  ASSERT_EQ(h.add(1, 4, tokens(3)), "");
  ASSERT_EQ(h.add(2, 4, tokens(3)), "");
  h.step();
  EXPECT_EQ(h.sched.stats().num_waiting, 1);
  h.sched.abort_request(2);
  h.sched.abort_request(99);  // unknown: ignored
  h.collect();
  EXPECT_EQ(h.results[2].finish, finish_reason::abort);
  EXPECT_TRUE(h.results[2].tokens.empty());
  EXPECT_EQ(h.results.count(99), 0u);
  EXPECT_EQ(h.sched.stats().num_waiting, 0);
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 3u);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, abort_while_running_between_steps_frees_blocks) {
  harness h(small_limits());
  ASSERT_EQ(h.add(1, 9, tokens(20)), "");
  for (int i = 0; i < 3; ++i) h.step();
  EXPECT_GT(h.ledger.pool().num_blocks_used(), 0);
  h.sched.abort_request(1);
  h.collect();
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 3u);
  EXPECT_FALSE(h.sched.has_unfinished());
  // The worker is told to drop it with the next plan.
  ASSERT_EQ(h.add(2, 3, tokens(1)), "");
  h.step();
  EXPECT_EQ(h.worker.requests.count(1), 0u);
  h.drain_and_expect_all_blocks_free();
}

// Aborts at each point of a step in flight: the step's token is discarded.
void abort_in_flight(bool before_commit) {
  harness h(small_limits());
  ASSERT_EQ(h.add(1, 9, tokens(20)), "");
  ASSERT_EQ(h.add(2, 5, tokens(4)), "");
  h.step();
  h.step();
  hooks k;
  auto abort = [&] {
    h.sched.abort_request(1);
    EXPECT_TRUE(h.sched.take_outputs().empty());  // not yet: the step is out
  };
  (before_commit ? k.after_schedule : k.after_execute) = abort;
  EXPECT_EQ(h.step(k).count(1), 1u);
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 2u);
  h.run_to_completion();
  EXPECT_EQ(h.results[2].tokens.size(), 4u);
  EXPECT_EQ(h.worker.requests.count(1), 0u);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, abort_in_flight_after_commit) { abort_in_flight(false); }
TEST(scheduler_test, abort_in_flight_before_commit) { abort_in_flight(true); }

TEST(scheduler_test, abort_of_a_request_preempted_by_the_step_in_flight) {
  scheduler_limits l = small_limits();
  l.num_blocks_usable = 4;  // two requests of up to 3 blocks each
  harness h(l);
  ASSERT_EQ(h.add(1, 4, tokens(8)), "");
  ASSERT_EQ(h.add(2, 4, tokens(8)), "");
  bool aborted = false;
  hooks k;
  k.after_schedule = [&] {
    if (aborted || h.sched.stats().num_preemptions == 0) return;
    EXPECT_EQ(h.sched.stats().num_waiting, 1);  // the newest, 2, went back to waiting
    h.sched.abort_request(2);
    aborted = true;
  };
  for (int i = 0; i < 100 && h.sched.has_unfinished(); ++i) h.step(k);
  ASSERT_TRUE(aborted);
  EXPECT_EQ(h.results[2].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 8u);
  EXPECT_EQ(h.results[1].finish, finish_reason::length);
  EXPECT_EQ(h.worker.requests.count(2), 0u);
  h.drain_and_expect_all_blocks_free();
}

// ---- prefix caching ------------------------------------------------------


}  // namespace
}  // namespace troupe
