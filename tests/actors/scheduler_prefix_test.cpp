// token_budget_scheduler with automatic prefix caching, against a real
// kv_ledger (see scheduler_harness.h): hits compute only what the cache
// lacks, shared blocks are counted once, outputs stay exact.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_harness.h"

namespace troupe {
namespace {

using namespace sched_testing;

scheduler_limits prefix_limits() {
  scheduler_limits l = small_limits();
  l.enable_prefix_caching = true;
  return l;
}

std::vector<int32_t> seq(int32_t first, int64_t n) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<int32_t>(i));
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every request that ran to its length produced the context-driven reference.
void expect_reference_outputs(harness& h, const std::map<request_id, int32_t>& max_tokens) {
  for (const auto& [id, n] : max_tokens) {
    EXPECT_EQ(h.results[id].tokens, reference_generation(h.prompts.at(id), n)) << "request " << id;
    EXPECT_EQ(h.results[id].finish, finish_reason::length) << "request " << id;
    EXPECT_EQ(h.results[id].num_finishes, 1) << "request " << id;
  }
}

// A (shared prefix + 3) runs to the end; then B (shared prefix + 2) and C
// (the first two blocks of the prefix, exactly) arrive.
struct later_hit_run {
  std::vector<new_request_data> b_first, c_first;
  int64_t computed_after_a = 0, computed_after_b_step = 0, computed_after_b = 0;
  engine_stats stats;
  std::map<request_id, result> results;
  int64_t num_blocks_cached = 0;
};

later_hit_run run_later_hit(bool caching) {
  scheduler_limits l = prefix_limits();
  l.enable_prefix_caching = caching;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 20);  // 5 blocks of 4
  later_hit_run run;
  EXPECT_EQ(h.add_prompt(1, concat(shared, {900, 901, 902}), tokens(4)), "");
  h.run_to_completion();
  run.computed_after_a = h.sched.stats().num_computed_tokens;
  EXPECT_EQ(h.add_prompt(2, concat(shared, {910, 911}), tokens(4)), "");
  h.step();
  run.b_first = h.last_plan.new_requests;
  run.computed_after_b_step = h.sched.stats().num_computed_tokens;
  h.run_to_completion();
  run.computed_after_b = h.sched.stats().num_computed_tokens;
  EXPECT_EQ(h.add_prompt(3, seq(500, 8), tokens(2)), "");
  h.step();
  run.c_first = h.last_plan.new_requests;
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 4}, {2, 4}, {3, 2}});
  run.stats = h.sched.stats();
  run.results = h.results;
  h.drain_and_expect_all_blocks_free();
  run.num_blocks_cached = h.ledger.pool().num_blocks_cached();
  return run;
}

TEST(scheduler_prefix_test, a_later_request_computes_only_what_the_cache_lacks) {
  const later_hit_run on = run_later_hit(true);
  EXPECT_EQ(on.computed_after_a, 23 + 3);
  ASSERT_EQ(on.b_first.size(), 1u);
  EXPECT_EQ(on.b_first[0].id, 2u);
  EXPECT_EQ(on.b_first[0].num_computed_tokens, 20);  // all 5 shared blocks
  EXPECT_EQ(on.b_first[0].num_scheduled_tokens, 2);  // only the suffix
  EXPECT_EQ(on.computed_after_b_step - on.computed_after_a, 2);
  EXPECT_EQ(on.computed_after_b - on.computed_after_a, 2 + 3);
  // A prompt of exactly two blocks: its last token must be computed, so
  // only the first block is a hit.
  ASSERT_EQ(on.c_first.size(), 1u);
  EXPECT_EQ(on.c_first[0].num_computed_tokens, 4);
  EXPECT_EQ(on.c_first[0].num_scheduled_tokens, 4);
  EXPECT_EQ(on.stats.prefix_cache_queries, 23 + 22 + 8);
  EXPECT_EQ(on.stats.prefix_cache_hits, 20 + 4);
  EXPECT_GT(on.num_blocks_cached, 0);  // finished requests' blocks stay cached

  const later_hit_run off = run_later_hit(false);
  ASSERT_EQ(off.b_first.size(), 1u);
  EXPECT_EQ(off.b_first[0].num_computed_tokens, 0);
  EXPECT_EQ(off.computed_after_b - off.computed_after_a, 22 + 3);
  EXPECT_EQ(off.stats.prefix_cache_queries, 0);
  EXPECT_EQ(off.stats.prefix_cache_hits, 0);
  EXPECT_EQ(off.num_blocks_cached, 0);
  for (request_id id : {1, 2, 3}) {
    EXPECT_EQ(on.results.at(id).tokens, off.results.at(id).tokens) << "request " << id;
  }
}

TEST(scheduler_prefix_test, a_running_request_shares_its_prefix_blocks) {
  harness h(prefix_limits());  // budget 16
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 20);
  ASSERT_EQ(h.add_prompt(1, concat(shared, {900, 901, 902}), tokens(6)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 16}}));  // 4 blocks computed
  ASSERT_EQ(h.add_prompt(2, concat(shared, {910, 911}), tokens(5)), "");
  // Admitted in the step that computes A's fifth block: A's grow registers
  // it before B's lookup, and the model writes every KV of a layer before
  // any attention reads, so B may use it at once.
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 7}, {2, 2}}));
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 20);
  const std::vector<int32_t> a = *h.ledger.blocks_of(1);
  const std::vector<int32_t> b = *h.ledger.blocks_of(2);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i], b[i]) << "block " << i;
    EXPECT_EQ(h.ledger.pool().ref_count(a[i]), 2) << "block " << i;
  }
  EXPECT_NE(a[5], b[5]);
  EXPECT_EQ(h.ledger.pool().num_blocks_used(), 7);
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 6}, {2, 5}});
  EXPECT_EQ(h.sched.stats().num_computed_tokens, (23 + 5) + (2 + 4));
  h.drain_and_expect_all_blocks_free();
}

// B shares A's two prefix blocks. When A and C both cross a block boundary
// with no block free, B (the newest) is preempted: that frees one block, not
// three, as B's other two stay A's. The scheduler counts three (its free
// count is an estimate once blocks are shared), so C's grow does not fit:
// the block manager must refuse it (grow_ok), never abort, C and the later
// requests sit the step out, and every output is still exact.
TEST(scheduler_prefix_test, preempting_a_request_that_shares_blocks) {
  scheduler_limits l = prefix_limits();
  l.max_num_batched_tokens = 64;
  l.num_blocks_usable = 14;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 8);
  ASSERT_EQ(h.add_prompt(1, concat(shared, {900}), tokens(10)), "");  // A: 3 blocks
  ASSERT_EQ(h.add_prompt(2, seq(600, 9), tokens(10)), "");            // C: 3 blocks
  ASSERT_EQ(h.add_prompt(3, seq(700, 7), tokens(10)), "");            // D: crosses in step 3
  ASSERT_EQ(h.add_prompt(4, seq(800, 10), tokens(10)), "");           // E: crosses in step 4
  h.step();
  EXPECT_EQ(h.ledger.pool().num_blocks_free(), 3);
  ASSERT_EQ(h.add_prompt(5, concat(shared, {910}), tokens(10)), "");  // B
  h.step();
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 8);
  EXPECT_EQ(h.ledger.pool().ref_count((*h.ledger.blocks_of(1))[0]), 2);
  h.step();
  h.step();
  EXPECT_EQ(h.ledger.pool().num_blocks_free(), 0);
  EXPECT_EQ(h.sched.stats().num_preemptions, 0);
  const std::map<request_id, int64_t> fifth = h.step();
  EXPECT_EQ(fifth.count(1), 1u);      // A grows into B's own block
  EXPECT_EQ(fifth.count(5), 0u);      // B was preempted
  EXPECT_GE(h.sched.stats().num_preemptions, 1);
  EXPECT_EQ(h.ledger.blocks_of(5), nullptr);
  EXPECT_EQ(h.ledger.pool().ref_count((*h.ledger.blocks_of(1))[0]), 1);
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 10}, {2, 10}, {3, 10}, {4, 10}, {5, 10}});
  h.drain_and_expect_all_blocks_free();
}

// A prefill aborted after its first chunk leaves only the blocks that chunk
// filled in the cache; the next request with that prompt computes the rest.
TEST(scheduler_prefix_test, an_aborted_chunked_prefill_caches_only_its_full_blocks) {
  scheduler_limits l = prefix_limits();
  l.max_num_batched_tokens = 6;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> prompt = seq(500, 13);
  ASSERT_EQ(h.add_prompt(1, prompt, tokens(3)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 6}}));  // 1.5 blocks
  h.sched.abort_request(1);
  h.collect();
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  ASSERT_EQ(h.add_prompt(2, prompt, tokens(3)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{2, 6}}));
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 4);
  h.run_to_completion();
  expect_reference_outputs(h, {{2, 3}});
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_prefix_test, prompt_logprobs_requests_compute_every_prompt_token) {
  harness h(prefix_limits());
  h.worker.sample_from_context = true;
  const std::vector<int32_t> prompt = seq(500, 13);
  ASSERT_EQ(h.add_prompt(1, prompt, tokens(2)), "");
  h.run_to_completion();
  sampling_params p = tokens(2);
  p.prompt_logprobs = 0;
  ASSERT_EQ(h.add_prompt(2, prompt, p), "");
  h.step();
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 0);
  ASSERT_EQ(h.add_prompt(3, prompt, tokens(2)), "");  // an ordinary one still hits
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 2}, {2, 2}, {3, 2}});
  EXPECT_EQ(h.sched.stats().prefix_cache_hits, 12);
  EXPECT_EQ(h.worker.num_tokens_found_computed, 12);
  h.drain_and_expect_all_blocks_free();
}

// Requests over two shared prefixes in a cache that holds about two of them:
// preemption and prefix hits interleave; every output is still exact.
void run_shared_prefixes_under_pressure(bool caching, std::map<request_id, result>& out,
                                        engine_stats& stats) {
  scheduler_limits l = prefix_limits();
  l.enable_prefix_caching = caching;
  l.max_num_batched_tokens = 8;
  l.num_blocks_usable = 12;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> p1 = seq(500, 12), p2 = seq(600, 9);
  std::map<request_id, int32_t> max_tokens;
  for (request_id id = 1; id <= 8; ++id) {
    const std::vector<int32_t>& prefix = id % 2 ? p1 : p2;
    const int32_t n = 6 + int32_t(id % 4) * 3;
    ASSERT_EQ(h.add_prompt(id, concat(prefix, seq(1000 + int32_t(id) * 10, id % 3)), tokens(n)),
              "");
    max_tokens[id] = n;
  }
  for (int i = 0; i < 2000 && h.sched.has_unfinished(); ++i) h.step();
  ASSERT_FALSE(h.sched.has_unfinished());
  expect_reference_outputs(h, max_tokens);
  stats = h.sched.stats();
  out = h.results;
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_prefix_test, preemption_with_prefix_caching_keeps_every_output_exact) {
  std::map<request_id, result> on, off;
  engine_stats on_stats, off_stats;
  run_shared_prefixes_under_pressure(true, on, on_stats);
  run_shared_prefixes_under_pressure(false, off, off_stats);
  EXPECT_GT(on_stats.num_preemptions, 0);
  EXPECT_GT(on_stats.prefix_cache_hits, 0);
  EXPECT_LT(on_stats.num_computed_tokens, off_stats.num_computed_tokens);
  EXPECT_EQ(off_stats.prefix_cache_hits, 0);
  for (const auto& [id, r] : off) EXPECT_EQ(on.at(id).tokens, r.tokens) << "request " << id;
}

// Random arrivals, prompts over a few shared prefixes, random aborts, a
// cache too small for everyone: the fake worker checks every KV read and
// write, outputs are checked against the reference.
TEST(scheduler_prefix_test, random_traffic_over_shared_prefixes) {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    scheduler_limits l = prefix_limits();
    l.max_num_batched_tokens = pick(4, 24);
    l.max_num_seqs = pick(2, 6);
    l.max_model_len = 48;
    l.num_blocks_usable = pick(12, 24);
    harness h(l);
    h.worker.sample_from_context = true;
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) prefixes.push_back(seq(2000 + 100 * i, pick(1, 20)));
    std::map<request_id, int32_t> max_tokens;
    std::vector<request_id> aborted;
    request_id next_id = 1;
    for (int i = 0; i < 400 && (next_id <= 40 || h.sched.has_unfinished()); ++i) {
      while (next_id <= 40 && pick(0, 2) == 0) {
        std::vector<int32_t> prompt = prefixes[static_cast<size_t>(pick(0, 2))];
        for (int64_t k = pick(0, 6); k > 0; --k) prompt.push_back(int32_t(pick(3000, 3003)));
        const int32_t n = int32_t(pick(1, 12));
        ASSERT_EQ(h.add_prompt(next_id, prompt, tokens(n)), "");
        max_tokens[next_id++] = n;
      }
      if (pick(0, 30) == 0 && next_id > 1) {
        const request_id victim = request_id(pick(1, int64_t(next_id) - 1));
        if (h.results[victim].num_finishes == 0) aborted.push_back(victim);
        h.sched.abort_request(victim);
        h.collect();
      }
      h.step();
    }
    ASSERT_FALSE(h.sched.has_unfinished());
    EXPECT_GT(h.sched.stats().prefix_cache_hits, 0);
    for (request_id id : aborted) {
      const std::vector<int32_t> want = reference_generation(h.prompts.at(id), max_tokens.at(id));
      const std::vector<int32_t>& got = h.results[id].tokens;
      EXPECT_TRUE(got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin()))
          << "aborted request " << id;
      EXPECT_EQ(h.results[id].finish, finish_reason::abort);
      max_tokens.erase(id);
    }
    expect_reference_outputs(h, max_tokens);
    h.drain_and_expect_all_blocks_free();
    if (HasFailure()) return;
  }
}


}  // namespace
}  // namespace troupe
