// token_budget_scheduler under random operations: requests of random groups
// with parallel samples (n up to 12, more than the slots), aborts of whole
// API requests at any point of a step, preemptions by recompute and by swap
// (a small cache, with and without swap space), with and without prefix
// caching and chunked prefill. After every step the scheduler's invariants
// hold (running slots and group shares, the step's tokens and sequences,
// block holders and free counts: check_invariants), the fake worker finds
// every token's KV where it belongs, and at the end every request that was
// not aborted generated exactly what a model reading its KV would, and every
// block is free again. A quarter of the cases speculate (random drafts, right
// and wrong): rejected drafts' slots are rolled back, no stale KV is read.
#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <random>
#include <set>

#include "scheduler_harness.h"

namespace troupe {
namespace {

using namespace sched_testing;

struct random_case {
  uint64_t seed = 0;
  bool prefix_caching = false;
  bool chunked = true;
  int64_t swap_blocks = 0;
  bool spec = false;  // speculative decoding: random drafts, right and wrong
  int64_t depth = 1;  // pipeline micro-batches: steps in flight at once
};

// One API request: n samples of one prompt (forks of the first), or several
// prompts in one group (a completions request with a list).
struct api_request {
  std::vector<request_id> ids;
};

class random_driver {
 public:
  random_driver(const random_case& c, scheduler_limits l) : rng_(c.seed), h_(l) {
    h_.worker.sample_from_context = true;
    h_.worker.pipelined = c.depth > 1;
    if (c.spec) {
      // Drafts that continue the history as the model would, corrupted at a
      // random position half the time: accepted, partly accepted, rejected.
      h_.draft_fn = [this](request_id id, int32_t limit) {
        std::vector<int32_t> d;
        auto it = h_.worker.requests.find(id);
        if (it == h_.worker.requests.end()) return d;
        context ctx = it->second.token_ids;
        const int k = pick(1, limit);
        const int wrong = pick(0, 1) == 0 ? pick(0, k - 1) : k;
        for (int j = 0; j < k; ++j) {
          d.push_back(j == wrong ? 999 : next_of_context(ctx));
          ctx.push_back(d.back());
        }
        return d;
      };
    }
  }

  void add_api_request() {
    api_request a;
    const int num_prompts = pick(1, 3) == 3 ? pick(2, 3) : 1;
    const int n = pick(1, 4) == 4 ? pick(2, 12) : 1;
    const request_id group = next_id_;
    for (int p = 0; p < num_prompts; ++p) {
      std::vector<int32_t> prompt;
      const int len = pick(1, 30);
      // Shared beginnings make prefix-cache hits.
      const int32_t base = pick(1, 3) == 1 ? 500 : 300 + 50 * static_cast<int32_t>(next_id_ % 7);
      for (int i = 0; i < len; ++i) prompt.push_back(base + (i * 13 + p) % 47);
      sampling_params sp;
      sp.max_tokens = pick(1, 24);
      const request_id leader = next_id_;
      for (int j = 0; j < n; ++j) {
        const request_id id = next_id_++;
        const std::string err = h_.add_prompt(id, prompt, sp, j == 0 ? 0 : leader, group);
        EXPECT_EQ(err, "") << "request " << id;
        max_tokens_[id] = sp.max_tokens;
        a.ids.push_back(id);
      }
    }
    live_.push_back(std::move(a));
  }

  void abort_one() {
    if (live_.empty()) return;
    const size_t k = static_cast<size_t>(pick(0, static_cast<int>(live_.size()) - 1));
    for (request_id id : live_[k].ids) aborted_.insert(id);
    h_.sched.abort_requests(live_[k].ids);
    live_.erase(live_.begin() + static_cast<long>(k));
  }

  void check(const char* where) {
    const std::string broken = h_.sched.check_invariants();
    EXPECT_EQ(broken, "") << where << ", step " << h_.num_steps;
    ++num_checks_;
  }

  void run(int num_steps) {
    for (int i = 0; i < num_steps; ++i) {
      if (pick(1, 3) == 1) add_api_request();
      if (pick(1, 12) == 1) abort_one();
      hooks k;
      // Aborts while a step is out: with the transaction open, or with the
      // step run and not yet applied.
      if (pick(1, 10) == 1) k.after_schedule = [this] { abort_one(); };
      if (pick(1, 10) == 1) k.after_execute = [this] { abort_one(); check("after execute"); };
      one_step(k);
      check("after update");
      if (::testing::Test::HasFailure()) return;
    }
    for (int i = 0; i < 20000 && (h_.sched.has_unfinished() || !in_flight_.empty()); ++i) {
      one_step({});
      check("draining");
      if (::testing::Test::HasFailure()) return;
    }
    ASSERT_FALSE(h_.sched.has_unfinished());
    ASSERT_TRUE(in_flight_.empty());
    h_.drain_and_expect_all_blocks_free();
    check("at the end");
  }

  void expect_outputs() const {
    for (request_id id : h_.ids) {
      auto it = h_.results.find(id);
      ASSERT_NE(it, h_.results.end()) << "request " << id << " never finished";
      const result& r = it->second;
      EXPECT_EQ(r.num_finishes, 1) << "request " << id;
      const std::vector<int32_t> want = reference_generation(h_.prompts.at(id), max_tokens_.at(id));
      if (aborted_.count(id) != 0) {
        EXPECT_TRUE(r.finish == finish_reason::abort || r.finish == finish_reason::length);
        EXPECT_LE(r.tokens.size(), want.size());
        EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), want.begin()))
            << "request " << id << " (aborted) generated other tokens";
      } else {
        EXPECT_EQ(r.finish, finish_reason::length) << "request " << id;
        EXPECT_EQ(r.tokens, want) << "request " << id;
      }
    }
  }

  // One step in lockstep; with micro-batches, as many steps planned as the
  // scheduler allows (steps stay in flight across calls), then the oldest
  // run and its output applied.
  void one_step(const hooks& k) {
    if (h_.limits.pipeline_depth <= 1) {
      h_.step(k);
      return;
    }
    if (in_flight_.empty()) {
      const step_plan plan = h_.commit_step(k);
      if (plan.step_id != 0) in_flight_.push_back(plan);
    }
    while (!in_flight_.empty() &&
           static_cast<int>(in_flight_.size()) < h_.sched.max_steps_in_flight() &&
           h_.sched.can_schedule_ahead()) {
      const step_plan plan = h_.commit_step({});
      if (plan.step_id == 0) break;
      in_flight_.push_back(plan);
      ++num_ahead_;
    }
    check("after commits");
    if (in_flight_.empty()) return;
    std::map<request_id, int64_t> scheduled;
    h_.execute_step(in_flight_.front(), scheduled, k);
    in_flight_.pop_front();
  }

  const harness& h() const { return h_; }
  int64_t num_ahead() const { return num_ahead_; }
  int64_t num_checks() const { return num_checks_; }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::mt19937_64 rng_;
  harness h_;
  request_id next_id_ = 1;
  std::vector<api_request> live_;
  std::set<request_id> aborted_;
  std::map<request_id, int32_t> max_tokens_;
  int64_t num_checks_ = 0;
  std::deque<step_plan> in_flight_;  // micro-batches committed, not yet run
  int64_t num_ahead_ = 0;
};

scheduler_limits random_limits(const random_case& c, std::mt19937_64& rng) {
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  scheduler_limits l;
  l.block_size = 4;
  l.max_model_len = 64;
  l.max_num_seqs = pick(2, 8);
  l.max_num_batched_tokens = c.chunked ? pick(8, 32) : 64;
  l.max_num_seqs_per_request = pick(1, 3) == 1 ? l.max_num_seqs : 0;  // shares off, or default
  l.num_blocks_usable = pick(20, 48);  // 80..192 tokens: preemptions are common
  l.enable_chunked_prefill = c.chunked;
  l.enable_prefix_caching = c.prefix_caching;
  l.num_cpu_blocks = c.swap_blocks;
  l.pipeline_depth = c.depth;
  return l;
}

TEST(scheduler_random_test, forks_aborts_preemptions_and_swaps_keep_every_invariant) {
  int64_t preemptions = 0, swaps = 0, checks = 0, drafts = 0, accepted = 0;
  // SCHED_RANDOM_SEED=N runs that case alone (to debug it);
  // SCHED_RANDOM_CASES=N runs N cases instead of 48 (a longer search).
  const char* only = std::getenv("SCHED_RANDOM_SEED");
  const char* cases = std::getenv("SCHED_RANDOM_CASES");
  const uint64_t num_cases = cases != nullptr ? std::strtoull(cases, nullptr, 10) : 48;
  for (uint64_t seed = 1; seed <= num_cases; ++seed) {
    if (only != nullptr && std::strtoull(only, nullptr, 10) != seed) continue;
    random_case c;
    c.seed = seed;
    c.prefix_caching = seed % 2 == 0;
    c.chunked = seed % 5 != 0;
    c.swap_blocks = seed % 3 == 0 ? 24 : 0;
    c.spec = seed % 4 == 1;
    std::mt19937_64 rng(seed * 7919);
    scheduler_limits l = random_limits(c, rng);
    if (c.spec) {
      l.num_speculative_tokens = 3;
      l.spec_adaptive = false;  // every proposed draft verified
    }
    SCOPED_TRACE("seed " + std::to_string(seed) + ", max_num_seqs " +
                 std::to_string(l.max_num_seqs) + ", budget " +
                 std::to_string(l.max_num_batched_tokens) + ", blocks " +
                 std::to_string(l.num_blocks_usable));
    random_driver d(c, l);
    d.run(150);
    if (::testing::Test::HasFailure()) return;
    d.expect_outputs();
    const engine_stats s = d.h().sched.stats();
    preemptions += s.num_preemptions;
    swaps += s.num_swap_outs;
    checks += d.num_checks();
    drafts += s.spec_num_draft_tokens;
    accepted += s.spec_num_accepted_tokens;
  }
  // The cases must reach what they claim to test.
  if (only != nullptr) return;
  EXPECT_GT(preemptions, 50);
  EXPECT_GT(swaps, 10);
  EXPECT_GT(accepted, 100);             // drafts kept,
  EXPECT_GT(drafts - accepted, 100);    // and rolled back
  EXPECT_GT(checks, static_cast<int64_t>(num_cases) * 150);
}

// The same with pipeline micro-batches (2 to 4 steps in flight): aborts
// land while several steps are out, preemptions and swaps happen only when
// none is, and no request is ever in two steps at once (check_invariants).
TEST(scheduler_random_test, micro_batches_keep_every_invariant) {
  int64_t preemptions = 0, ahead = 0, accepted = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    random_case c;
    c.seed = 1000 + seed;
    c.prefix_caching = seed % 2 == 0;
    c.chunked = seed % 5 != 0;
    c.swap_blocks = seed % 3 == 0 ? 24 : 0;
    c.spec = seed % 4 == 1;
    c.depth = 2 + static_cast<int64_t>(seed % 3);
    std::mt19937_64 rng(seed * 104729);
    scheduler_limits l = random_limits(c, rng);
    if (c.spec) {
      l.num_speculative_tokens = 3;
      l.spec_adaptive = false;
    }
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ", depth " + std::to_string(c.depth));
    random_driver d(c, l);
    d.run(150);
    if (::testing::Test::HasFailure()) return;
    d.expect_outputs();
    preemptions += d.h().sched.stats().num_preemptions;
    accepted += d.h().sched.stats().spec_num_accepted_tokens;
    ahead += d.num_ahead();
  }
  EXPECT_GT(preemptions, 20);
  EXPECT_GT(ahead, 500);
  EXPECT_GT(accepted, 20);
}

// The crash of issue 19: more parallel samples than max_num_seqs. The
// samples that fit fork from the leader; the rest run as requests of their
// own; no step ever holds more than max_num_seqs sequences.
TEST(scheduler_random_test, more_samples_than_slots_run_within_max_num_seqs) {
  scheduler_limits l = small_limits();  // 8 sequences
  l.max_num_batched_tokens = 64;
  l.num_blocks_usable = 400;
  harness h(l);
  h.worker.sample_from_context = true;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 10; ++i) prompt.push_back(400 + i);
  const int n = 65;
  for (int j = 0; j < n; ++j) {
    ASSERT_EQ(h.add_prompt(j + 1, prompt, tokens(3), j == 0 ? 0 : 1, 1), "");
  }
  int64_t most = 0;
  for (int i = 0; i < 1000 && h.sched.has_unfinished(); ++i) {
    h.step();
    ASSERT_EQ(h.sched.check_invariants(), "");
    most = std::max<int64_t>(
        most, h.last_plan.new_requests.size() + h.last_plan.cached_requests.size());
  }
  ASSERT_FALSE(h.sched.has_unfinished());
  EXPECT_LE(most, 4);  // the group's share: half of max_num_seqs
  const std::vector<int32_t> want = reference_generation(prompt, 3);
  for (int j = 0; j < n; ++j) EXPECT_EQ(h.results[j + 1].tokens, want) << "sample " << j;
  h.drain_and_expect_all_blocks_free();
}

// A small request that arrives while a huge one holds its share of slots and
// wants every token: it is admitted in the next step and gets what the huge
// one's token share leaves of the budget.
TEST(scheduler_random_test, a_small_request_starts_at_once_beside_a_huge_one) {
  scheduler_limits l = small_limits();  // 8 sequences, 16 tokens a step
  l.num_blocks_usable = 400;
  harness h(l);
  for (int j = 0; j < 200; ++j) {  // one API request: 20 prompts x 10 samples
    std::vector<int32_t> prompt(40, 300 + j / 10);
    ASSERT_EQ(h.add_prompt(j + 1, prompt, tokens(20), j % 10 == 0 ? 0 : j / 10 * 10 + 1, 1), "");
  }
  for (int i = 0; i < 5; ++i) h.step();
  ASSERT_EQ(h.add(1000, 10, tokens(2)), "");
  const auto first = h.step();
  ASSERT_EQ(first.count(1000), 1u) << "the small request waited behind the huge one";
  // The budget (16) less the huge request's decode tokens (at most its 4
  // slots) and its token share (16 * 4 / 8 = 8).
  EXPECT_GE(first.at(1000), 4);
  int64_t computed = first.at(1000);
  for (int i = 0; i < 2 && computed < 10; ++i) computed += h.step()[1000];
  EXPECT_EQ(computed, 10) << "its prompt was not computed within three steps";
  ASSERT_EQ(h.sched.check_invariants(), "");
  // Aborting the huge request releases all its sequences at once.
  std::vector<request_id> big;
  for (int j = 0; j < 200; ++j) big.push_back(j + 1);
  h.sched.abort_requests(big);
  h.collect();
  EXPECT_EQ(h.sched.stats().num_waiting, 0);
  EXPECT_LE(h.sched.stats().num_running, 1);
  h.run_to_completion();
  h.drain_and_expect_all_blocks_free();
}

}  // namespace
}  // namespace troupe
