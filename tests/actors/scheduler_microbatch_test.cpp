// Pipeline micro-batches (token_budget_scheduler with pipeline_depth P):
// up to P steps in flight, no request in two of them, each taking at most
// ceil(running / P) running requests. Driven by the harness's pipelined
// loop (steps run and update in commit order, as every stage runs them)
// against the real kv_ledger and the content-addressed fake cache; outputs
// must equal the lockstep run's exactly, and check_invariants (which
// refuses a request in two steps in flight) holds after every commit.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/actors/scheduler_harness.h"

namespace troupe {
namespace {

using namespace sched_testing;

scheduler_limits micro_limits(int64_t depth) {
  scheduler_limits l = small_limits();
  l.pipeline_depth = depth;
  l.eos_token_ids = {104};
  return l;
}

using workload = std::vector<std::pair<int64_t, sampling_params>>;  // (prompt length, params)

workload lengths(const std::vector<std::pair<int64_t, int32_t>>& reqs) {
  workload w;
  for (const auto& [len, max_tokens] : reqs) w.push_back({len, tokens(max_tokens)});
  return w;
}

// Drafts for odd requests that continue the context model, every third
// proposal wrong from its second token (speculative decoding).
void draft_for_odd_requests(harness& h) {
  auto proposals = std::make_shared<int64_t>(0);
  h.draft_fn = [&h, proposals](request_id id, int32_t limit) {
    std::vector<int32_t> d;
    auto it = h.worker.requests.find(id);
    if (id % 2 == 0 || it == h.worker.requests.end()) return d;
    context ctx = it->second.token_ids;
    const bool wrong = ++*proposals % 3 == 0;
    for (int32_t j = 0; j < limit; ++j) {
      d.push_back(wrong && j == 1 ? 999 : next_of_context(ctx));
      ctx.push_back(d.back());
    }
    return d;
  };
}

// Runs w in lockstep (depth 1, no speculation) and with micro-batches;
// returns the steps planned ahead, and each step's running requests.
int64_t expect_micro_batches_equal_lockstep(const scheduler_limits& l, const workload& w,
                                            std::vector<size_t>* per_step = nullptr) {
  std::map<request_id, result> want;
  {
    scheduler_limits lock = l;
    lock.pipeline_depth = 1;
    lock.num_speculative_tokens = 0;
    harness h(lock);
    h.worker.sample_from_context = true;
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(h.add(i + 1, w[i].first, w[i].second), "");
    h.run_to_completion();
    want = h.results;
  }
  harness h(l);
  h.worker.sample_from_context = true;
  if (l.num_speculative_tokens > 0) draft_for_odd_requests(h);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(h.add(i + 1, w[i].first, w[i].second), "");
  const int64_t ahead = h.run_pipelined(per_step);
  EXPECT_EQ(h.sched.stats().num_steps_ahead, ahead);
  for (const auto& [id, r] : want) {
    EXPECT_EQ(h.results[id].tokens, r.tokens) << "request " << id;
    EXPECT_EQ(h.results[id].finish, r.finish) << "request " << id;
    EXPECT_EQ(h.results[id].num_finishes, 1) << "request " << id;
  }
  h.drain_and_expect_all_blocks_free();
  return ahead;
}

TEST(scheduler_microbatch_test, steps_in_flight_take_disjoint_balanced_halves) {
  // Eight decoding requests (no EOS), two stages: once all are admitted,
  // each step takes four (1-4, then 5-8, ...) and two steps are in flight.
  scheduler_limits l = micro_limits(2);
  l.eos_token_ids.clear();
  workload w;
  for (int i = 0; i < 8; ++i) w.push_back({3, tokens(30)});
  std::vector<size_t> per_step;
  const int64_t ahead = expect_micro_batches_equal_lockstep(l, w, &per_step);
  EXPECT_GT(ahead, 50);
  EXPECT_LE(*std::max_element(per_step.begin(), per_step.end()), 4u);
  EXPECT_GT(std::count(per_step.begin(), per_step.end(), 4u), 50);
}

TEST(scheduler_microbatch_test, three_and_four_stages_keep_outputs) {
  workload w = lengths({{5, 20}, {17, 12}, {3, 25}, {9, 7}, {30, 15}, {2, 30}, {11, 9}});
  for (int64_t depth : {3, 4}) {
    SCOPED_TRACE(depth);
    std::vector<size_t> per_step;
    EXPECT_GT(expect_micro_batches_equal_lockstep(micro_limits(depth), w, &per_step), 10);
    EXPECT_LE(*std::max_element(per_step.begin(), per_step.end()),
              (w.size() + static_cast<size_t>(depth) - 1) / static_cast<size_t>(depth));
  }
}

TEST(scheduler_microbatch_test, chunked_prefills_and_prefix_caching_stay_exact) {
  scheduler_limits l = micro_limits(2);
  l.max_num_batched_tokens = 8;  // prompts arrive in chunks beside the decodes
  l.enable_prefix_caching = true;
  workload w;
  for (int i = 0; i < 10; ++i) w.push_back({(i * 7) % 23 + 1, tokens(3 + (i * 5) % 11)});
  EXPECT_GT(expect_micro_batches_equal_lockstep(l, w), 0);
}

TEST(scheduler_microbatch_test, a_tight_cache_preempts_only_with_nothing_in_flight) {
  scheduler_limits l = micro_limits(2);
  l.num_blocks_usable = 12;
  workload w;
  for (int i = 0; i < 6; ++i) w.push_back({5 + i, tokens(12)});
  expect_micro_batches_equal_lockstep(l, w);
}

TEST(scheduler_microbatch_test, speculation_verifies_drafts_in_micro_batches) {
  scheduler_limits l = micro_limits(2);
  l.num_speculative_tokens = 3;
  l.spec_adaptive = false;
  workload w = lengths({{5, 30}, {17, 40}, {3, 25}, {9, 35}, {30, 20}});
  EXPECT_GT(expect_micro_batches_equal_lockstep(l, w), 10);
}

TEST(scheduler_microbatch_test, penalties_do_not_hold_micro_batches_back) {
  // Async scheduling runs a penalized request in lockstep (its sampler
  // needs the token still out); a micro-batch never plans a request whose
  // token is out, so penalties change nothing here.
  workload w;
  for (int i = 0; i < 4; ++i) {
    sampling_params p = tokens(20);
    p.repetition_penalty = 1.3f;
    w.push_back({4 + i, p});
  }
  EXPECT_GT(expect_micro_batches_equal_lockstep(micro_limits(2), w), 20);
}

}  // namespace
}  // namespace troupe
