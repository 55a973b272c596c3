// kv_admission: how much KV the running requests will still need, so that
// the scheduler admits a waiting request only when the running set, it
// included, is expected to fit to completion (docs/scheduling.md, "KV
// pressure"). Without it (vLLM's rule) a request is admitted when its next
// chunk fits; long generations then outgrow the cache together and the
// newest are preempted and recomputed, again and again.
//
// The rule. Each request is a demand: the tokens it holds KV for (prompt
// and outputs so far, the whole prompt for one still in prefill) and the
// tokens it is expected to generate still: all of its allowance (its
// max_tokens left, capped by max_model_len) for one that cannot stop early
// (ignore_eos without stop strings or tokens, or min_tokens at max_tokens),
// ratio() of it, clipped at 4096 tokens (SGLang's clip), for any other. The ratio is learned from the requests that
// finished (a running average of the share of their allowance they used,
// plus a margin), 0.7 before any has (SGLang's initial new_token_ratio), and
// raised after a step that had to preempt (a bump that decays step by step:
// hysteresis, so that re-admitting the victims does not preempt again at
// once). Decoding, every demand grows a token a step and frees its blocks
// when it ends, so the blocks held at once peak just before some demand
// ends: peak_blocks() takes the largest of those sums. A waiting request is
// admitted when the peak with it stays within the cache less a watermark
// (1%). Requests at different points of their lives share the cache: one
// near its end holds many blocks that are free again before a young one
// needs its last. Plain class, no CAF.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct kv_admission_config {
  bool enabled = false;
  int64_t block_size = 16;
  int64_t num_blocks = 0;          // usable blocks of the cache
  double watermark = 0.01;         // share of the blocks kept free
  double initial_ratio = 0.7;      // before any request has finished
  double margin = 0.1;             // over the learned share
  double min_ratio = 0.1;
  double learn_weight = 0.1;       // of each finished request in the average
  double preempt_bump = 0.2;       // added after a step that preempted ...
  double bump_decay = 0.99;        // ... and multiplied by this each step
  int64_t clip_tokens = 4096;      // the most of an uncertain allowance counted
};

class kv_admission {
 public:
  explicit kv_admission(const kv_admission_config& config);
  bool enabled() const { return config_.enabled; }
  // The share of its remaining allowance a request that may stop early is
  // expected to generate, in [min_ratio, 1].
  double ratio() const;
  // The tokens a request with `remaining` tokens of allowance left is
  // expected to generate still: all of them when `certain`, else ratio() of
  // them, the allowance clipped at clip_tokens first (SGLang's 4096: a chat
  // request without max_tokens is allowed the whole context).
  int64_t expected_tokens(int64_t remaining, bool certain) const;
  // Blocks of the cache the demands may peak at (the capacity less the
  // watermark).
  int64_t capacity_blocks() const;
  struct demand {
    int64_t tokens = 0;     // held (or to hold) now
    int64_t remaining = 0;  // expected still (expected_tokens)
  };
  // The most blocks `demands` hold at once as they run to their ends, each
  // growing a token a step and freeing its blocks when it ends (blocks
  // counted as tokens / block_size rounded up, per demand).
  int64_t peak_blocks(std::vector<demand> demands) const;
  // A step ended; `preempted`: it preempted a request.
  void on_step(bool preempted);
  // A request that could have stopped early finished (not aborted) having
  // generated `generated` of the `allowance` tokens it was allowed.
  void on_finished(int64_t generated, int64_t allowance);

 private:
  kv_admission_config config_;
  double learned_;
  double bump_ = 0.0;
};

}  // namespace troupe
