// spec_control: how many of its draft tokens each request verifies in a
// step, chosen for goodput (tokens emitted per second), so that speculation
// runs where it pays and is off where it would cost throughput.
//
// The model (docs/speculative_decoding.md):
// - Acceptance. A request's drafts are accepted position by position with
//   probability alpha_r (the chance that draft j is kept given that every
//   draft before it was). Verifying k drafts emits E_r(k) = 1 + alpha_r +
//   ... + alpha_r^k tokens on average. alpha_r is counted per request (kept
//   over tested positions, exponentially forgotten) with the engine-wide
//   rate as its prior.
// - Step cost. t(n, d) = c0 + c1 * n + c2 * d seconds for a step of n tokens,
//   d = 1 when it verifies any draft (such a step runs eagerly rather than
//   as a replayed decode graph, and cannot be planned ahead of the previous
//   step's result). Fitted by exponentially weighted least squares on the
//   measured steps.
//   Only steps of decodes (each request its last token and its drafts) are
//   measured: the regime the choice is about.
// - Choice. Step goodput is (tokens emitted) / t. With speculation on, the
//   best assignment adds draft positions in order of decreasing marginal
//   gain alpha_r^(j+1) while that gain exceeds c1 times the goodput so far
//   (optimal for a ratio of a concave sum over a linear cost); it is taken
//   when its goodput beats the step without drafts. Until both kinds of step
//   have been measured, and then one step in `explore_every`, the other
//   choice is tried (with one draft a request when it explores speculation),
//   so the model keeps learning at a bounded cost.
// - Who drafts. A request asks the drafter for proposals (and, with async
//   scheduling, waits for its tokens instead of being planned ahead) only
//   while the last choice was on and its acceptance clears that choice's
//   cut-off, or while the control measures or explores.
//
// Plain class, no CAF: the scheduler's thread only.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace troupe {

using request_id = uint64_t;

struct spec_candidate {
  request_id id = 0;
  int64_t max_drafts = 0;  // proposal length (already limited by the budget)
};

class spec_control {
 public:
  static constexpr int64_t explore_every = 64;

  // Draft counts for the candidates (parallel), 0 included. base_tokens:
  // the step's tokens without drafts; base_emitted: the tokens it emits
  // without drafts (one per sampling request).
  std::vector<int64_t> choose(const std::vector<spec_candidate>& candidates, int64_t base_tokens,
                              int64_t base_emitted);
  // Once per scheduled step, before choose.
  void begin_step() { ++steps_seen_; }
  // Whether the request should draft for the next step (see above).
  bool worth_drafting(request_id id) const;
  // A step ran: n tokens, with or without drafts, taking this long.
  void observe_step(int64_t num_tokens, bool with_drafts, double seconds);
  // A verification of num_drafts drafts kept the first num_accepted.
  void observe_verification(request_id id, int64_t num_drafts, int64_t num_accepted);
  void forget(request_id id) { requests_.erase(id); }

  double acceptance(request_id id) const;  // alpha_r (the prior when unknown)
  double global_acceptance() const;
  // The fitted step cost of n tokens (with drafts or not); 0 until measured.
  double step_seconds(int64_t num_tokens, bool with_drafts) const;

 private:
  struct counts {
    double kept = 0, tested = 0;
  };
  static constexpr double forget_ = 0.95;      // per verification of a request
  static constexpr double forget_step_ = 0.98;  // per step (cost fit)
  static constexpr double prior_weight_ = 2.0;  // tested positions the prior counts as
  void fit();

  std::unordered_map<request_id, counts> requests_;
  counts global_;
  // Weighted sums for the least squares of seconds on (1, n, d).
  double xx_[3][3] = {}, xy_[3] = {};
  double coef_[3] = {};  // c0, c1, c2
  int64_t steps_[2] = {0, 0};  // steps measured without / with drafts
  bool warm_[2] = {false, false};  // the first step of each kind was seen (not measured)
  int64_t steps_seen_ = 0;
  bool last_on_ = true;
  double last_cutoff_ = 0;  // the smallest gain the last choice took
  bool trusted() const;
  bool exploring(int64_t step) const { return step % explore_every == 0; }
};

}  // namespace troupe
