// spec_control against synthetic steps: a cost model t(n, d) and a fixed
// acceptance per request stand in for the GPU, and the control, fed what it
// chose, must end up speculating where that raises tokens per second and
// not where it lowers them.
#include <gtest/gtest.h>

#include <random>

#include "actors/scheduler/spec_control.h"

namespace troupe {
namespace {

struct world {
  double c0, c1, c2;  // seconds: t = c0 + c1 n + c2 [drafts]
  double alpha;       // every request's acceptance per position
  int64_t batch;
  int64_t max_drafts;
};

// Runs `steps` steps; returns tokens per second over the last half and the
// share of those steps that verified drafts.
std::pair<double, double> run(const world& w, int64_t steps, spec_control& c) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  double tokens = 0, seconds = 0, spec_steps = 0;
  for (int64_t s = 0; s < steps; ++s) {
    c.begin_step();
    std::vector<spec_candidate> cand;
    for (int64_t r = 0; r < w.batch; ++r) {
      if (c.worth_drafting(static_cast<request_id>(r))) cand.push_back({static_cast<request_id>(r), w.max_drafts});
    }
    const std::vector<int64_t> k = c.choose(cand, w.batch, w.batch);
    int64_t n = w.batch, emitted = w.batch, drafts = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
      int64_t a = 0;
      while (a < k[i] && u(rng) < w.alpha) ++a;
      c.observe_verification(cand[i].id, k[i], a);
      n += k[i];
      emitted += a;
      drafts += k[i];
    }
    const double t = w.c0 + w.c1 * static_cast<double>(n) + (drafts > 0 ? w.c2 : 0.0);
    c.observe_step(n, drafts > 0, t);
    if (s >= steps / 2) {
      tokens += static_cast<double>(emitted);
      seconds += t;
      spec_steps += drafts > 0 ? 1 : 0;
    }
  }
  return {tokens / seconds, spec_steps / static_cast<double>(steps - steps / 2)};
}

TEST(spec_control, speculates_at_batch_one_when_drafts_are_accepted) {
  // Memory-bound: 5.4 ms a step whatever its few tokens; 80% acceptance.
  const world w{5.4e-3, 2e-6, 0.3e-3, 0.8, 1, 4};
  spec_control c;
  const auto [tps, share] = run(w, 400, c);
  const double plain = 1.0 / (w.c0 + w.c1);
  EXPECT_GT(share, 0.9);
  EXPECT_GT(tps, 2.0 * plain);
}

TEST(spec_control, stays_off_when_drafts_are_rejected_in_a_large_batch) {
  // Batch 64, nothing accepted: each draft costs compute and a verify step
  // loses its graph.
  const world w{12e-3, 20e-6, 3e-3, 0.0, 64, 4};
  spec_control c;
  const auto [tps, share] = run(w, 640, c);
  const double plain = 64.0 / (w.c0 + w.c1 * 64);
  EXPECT_LT(share, 0.05);        // exploration only
  EXPECT_GT(tps, 0.97 * plain);  // within the 3%
}

TEST(spec_control, follows_a_change_in_acceptance) {
  spec_control c;
  world w{5.4e-3, 2e-6, 0.3e-3, 0.0, 8, 4};
  run(w, 640, c);  // useless drafts: off
  w.alpha = 0.9;   // the outputs start copying their prompts
  const auto [tps, share] = run(w, 1280, c);
  EXPECT_GT(share, 0.5);
}

}  // namespace
}  // namespace troupe
