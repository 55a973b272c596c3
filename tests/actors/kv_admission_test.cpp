// kv_admission (actors/scheduler/kv_admission.h): its rule on hand-computed
// cases, and token_budget_scheduler with it (reserve_kv) against vLLM's
// rule (admit when the next chunk fits) on synthetic traces under a small
// KV cache: long generations that cannot stop early, mixed lengths, and
// requests that end at EOS well before max_tokens. On every trace the
// reserve rule throws away fewer computed tokens to preemption, the outputs
// are the same tokens, and every block comes back.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "actors/scheduler/kv_admission.h"
#include "tests/actors/scheduler_harness.h"

namespace troupe::sched_testing {
namespace {

TEST(kv_admission, expected_blocks_the_learned_ratio_and_the_bump_after_preemption) {
  kv_admission_config c;
  c.enabled = true;
  c.block_size = 4;
  c.num_blocks = 1000;
  kv_admission a(c);
  EXPECT_DOUBLE_EQ(a.ratio(), 0.7);             // before anything finished
  EXPECT_EQ(a.expected_tokens(20, true), 20);
  EXPECT_EQ(a.expected_tokens(20, false), 14);  // 0.7 x 20
  EXPECT_EQ(a.expected_tokens(-3, false), 0);
  EXPECT_EQ(a.expected_tokens(100000, false), 2868);  // 0.7 x the 4096 clip
  EXPECT_EQ(a.expected_tokens(100000, true), 100000);
  EXPECT_EQ(a.capacity_blocks(), 990);          // less the 1% watermark
  // Demands (tokens, remaining): (40, 8) ends first, holding 48 tokens
  // beside (10, 20) at 18 and (0, 20) at 8: 74 tokens, 18 blocks + 3; after
  // it, the two others peak at 30 + 20 = 50 tokens: 12 + 2 blocks.
  EXPECT_EQ(a.peak_blocks({{40, 8}, {10, 20}, {0, 20}}), 21);
  // A young request beside an old one near its end: the old one's blocks
  // are free before the young one needs its last. Peak just before the old
  // one ends: 400 + 8 tokens, 102 blocks + 2; not both finals at once (804
  // tokens).
  EXPECT_EQ(a.peak_blocks({{396, 4}, {4, 400}}), 104);
  EXPECT_EQ(a.peak_blocks({}), 0);
  for (int i = 0; i < 100; ++i) a.on_finished(2, 20);  // each used 10% of its allowance
  EXPECT_NEAR(a.ratio(), 0.2, 1e-3);                   // plus the 0.1 margin
  a.on_step(true);                                     // a step preempted: +0.2
  EXPECT_NEAR(a.ratio(), 0.4, 1e-3);
  for (int i = 0; i < 1000; ++i) a.on_step(false);     // decays back
  EXPECT_NEAR(a.ratio(), 0.2, 1e-3);
  for (int i = 0; i < 500; ++i) a.on_finished(20, 20);
  EXPECT_DOUBLE_EQ(a.ratio(), 1.0);                    // capped
  c.min_ratio = 0.3;
  kv_admission floor(c);
  for (int i = 0; i < 500; ++i) floor.on_finished(0, 20);
  EXPECT_DOUBLE_EQ(floor.ratio(), 0.3);
}

struct trace_request {
  int64_t prompt = 0;
  int32_t max_tokens = 0;
  bool ignore_eos = false;
  int64_t eos_at = -1;  // output index at which the model samples EOS (-1: never)
};

struct trace_result {
  int64_t recomputed = 0, preemptions = 0, steps = 0;
};

constexpr int32_t eos = 2;

trace_result run_trace(const std::vector<trace_request>& reqs, bool reserve, const char* label) {
  scheduler_limits l = small_limits();  // block size 4
  l.max_num_batched_tokens = 64;
  l.max_num_seqs = 16;
  l.max_model_len = 512;
  l.num_blocks_usable = 150;  // 600 tokens
  l.eos_token_ids = {eos};
  l.reserve_kv = reserve;
  harness h(l);
  h.worker.next_token = [&reqs](request_id id, int64_t i) {
    const trace_request& r = reqs[static_cast<size_t>(id - 1)];
    return i == r.eos_at ? eos : 100 + int32_t((id * 13 + i * 7) % 50);
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    sampling_params p = tokens(reqs[i].max_tokens);
    p.ignore_eos = reqs[i].ignore_eos;
    EXPECT_EQ(h.add(static_cast<request_id>(i + 1), reqs[i].prompt, p), "");
  }
  h.run_to_completion();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const request_id id = static_cast<request_id>(i + 1);
    std::vector<int32_t> want;
    for (int32_t k = 0; k < reqs[i].max_tokens; ++k) {
      want.push_back(h.worker.next_token(id, k));
      if (want.back() == eos && !reqs[i].ignore_eos) break;
    }
    EXPECT_EQ(h.results[id].tokens, want) << label << " request " << id;
  }
  h.drain_and_expect_all_blocks_free();
  const engine_stats s = h.sched.stats();
  std::printf("%-14s %-7s: %4lld preemptions, %6lld tokens recomputed, %5lld steps\n", label,
              reserve ? "reserve" : "chunk", static_cast<long long>(s.num_preemptions),
              static_cast<long long>(s.num_recomputed_tokens), static_cast<long long>(s.num_steps));
  return {s.num_recomputed_tokens, s.num_preemptions, s.num_steps};
}

void expect_fewer_recomputed(const std::vector<trace_request>& reqs, const char* label) {
  const trace_result chunk = run_trace(reqs, false, label);
  const trace_result reserve = run_trace(reqs, true, label);
  EXPECT_GT(chunk.recomputed, 0) << label << ": the trace puts the cache under pressure";
  EXPECT_LT(reserve.recomputed, chunk.recomputed) << label;
  // Not by running one request at a time: fewer than half the steps of
  // the requests' decodes one after another.
  int64_t serial = 0;
  for (const trace_request& r : reqs) serial += r.eos_at >= 0 ? r.eos_at + 1 : r.max_tokens;
  EXPECT_LT(reserve.steps, serial / 2) << label;
}

TEST(kv_admission_traces, long_generations_that_cannot_stop_early) {
  std::vector<trace_request> reqs;
  for (int i = 0; i < 24; ++i) reqs.push_back({8 + (i * 5) % 24, 200, true, -1});
  expect_fewer_recomputed(reqs, "long");
}

TEST(kv_admission_traces, mixed_lengths) {
  std::vector<trace_request> reqs;
  for (int i = 0; i < 40; ++i) {
    const int32_t max_tokens = (i % 3 == 0) ? 240 : (i % 3 == 1) ? 60 : 8;
    reqs.push_back({4 + (i * 7) % 40, max_tokens, i % 2 == 0, -1});
  }
  expect_fewer_recomputed(reqs, "mixed");
}

TEST(kv_admission_traces, requests_ending_at_eos_long_before_max_tokens) {
  std::vector<trace_request> reqs;
  for (int i = 0; i < 48; ++i) reqs.push_back({6 + (i * 3) % 20, 400, false, 20 + (i * 37) % 160});
  expect_fewer_recomputed(reqs, "eos");
}

}  // namespace
}  // namespace troupe::sched_testing
