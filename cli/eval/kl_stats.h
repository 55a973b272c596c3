// `troupe eval kl`'s arithmetic: the next-token distributions of two
// configurations of one model compared position by position (seed 004's
// logits-consistency criterion, as ../shared/fixtures/QUANT_MOE.md applies
// it): KL(P || Q) = sum_v p_v (log p_v - log q_v), P the reference's
// distribution, Q the compared one's, both from float32 logits, summed in
// double; the argmax agreement; and over whole greedy runs the first-token
// and the sequence agreement.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::eval {

// A next-token distribution as float32 logits and their log-sum-exp (in
// double): log p_v = logits[v] - lse, computed in double when read. A
// logit that is not finite counts as -inf; a row with none finite is
// uniform (lse NaN).
struct logits_row {
  const float* logits = nullptr;
  double lse = 0;
};

// log sum_v exp(logits[v]) in double; NaN when no logit is finite.
double log_sum_exp(const float* logits, int64_t n);
inline logits_row row_of(const float* logits, int64_t n) { return {logits, log_sum_exp(logits, n)}; }
// log p_v of row r over n tokens.
double log_prob(const logits_row& r, int64_t v, int64_t n);

// KL(P || Q) = sum_v p_v (log p_v - log q_v), in double (terms with p_v =
// 0 add nothing; a q_v of 0 where p_v > 0 makes it +inf).
double kl_divergence(const logits_row& p, const logits_row& q, int64_t n);

// The entropy of P in nats, -sum_v p_v log p_v (ln n for a uniform P).
double entropy(const logits_row& p, int64_t n);

// The index of the largest value (equal ones: the lowest index).
int64_t argmax(const float* v, int64_t n);

// Per-position KL values and argmax agreement, then per-sequence greedy
// agreement.
class kl_report {
 public:
  // reference_entropy: the reference's distribution's (how peaked it is
  // tells how much an argmax agreement means: random dummy weights give
  // nearly uniform distributions whose argmax flips with any change).
  void add_position(double kl, bool argmax_agrees, double reference_entropy);
  // The reference's and the compared configuration's greedy tokens for one
  // prompt.
  void add_sequences(const std::vector<int32_t>& reference, const std::vector<int32_t>& compared);

  int64_t positions() const { return static_cast<int64_t>(kl_.size()); }
  double kl_mean() const;
  double kl_max() const;
  // The q-quantile of the KL values (nearest rank: the smallest value
  // with at least q of them at or below it); 0 with no positions.
  double kl_quantile(double q) const;
  double argmax_agreement() const;   // fraction of positions
  double mean_reference_entropy() const;
  int64_t sequences() const { return sequences_; }
  double first_token_agreement() const;  // fraction of sequences
  double sequence_agreement() const;     // fraction identical in full
  // The mean fraction of each sequence before the first difference.
  double common_prefix_fraction() const;

 private:
  std::vector<double> kl_;
  int64_t argmax_agree_ = 0;
  double entropy_sum_ = 0;
  int64_t sequences_ = 0, first_agree_ = 0, identical_ = 0;
  double prefix_sum_ = 0;
};

}  // namespace troupe::eval
