// Drives an engine's model_runners (lockstep) for `troupe eval kl` with
// plans built here, as the scheduler would build them for batches that fit:
// sequences go in groups (at most max_num_seqs, their blocks within the KV
// cache: every block a sequence will need is given at admission), each
// group's prefill chunked to max_num_batched_tokens, then its decode steps;
// a group's requests are finished in the next plan. The runners keep their
// CUDA graphs (decode steps replay them) and chunked prefill; there is no
// prefix caching (every token is computed). With several ranks (tensor and
// pipeline parallelism in this process) every rank runs each plan at once,
// on a thread of its own, as the worker group has them do: the last
// stage's first rank answers, the earlier stages take its tokens
// (apply_stage_results), and a rank that throws aborts the others' groups
// (no rank is left waiting in a collective) and its exception comes out.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "actors/engine.h"
#include "actors/worker/model_runner.h"
#include "common/result.h"

namespace troupe::eval {

class runner_driver {
 public:
  // ranks: stage-major (stage s's tensor-parallel rank t at s * T + t) of
  // `stages` pipeline stages.
  runner_driver(std::vector<model_runner*> ranks, int stages, const engine_limits& limits);

  // Each prompt's greedy continuation of max_tokens tokens (end-of-sequence
  // tokens do not stop it). Errors: a prompt with its continuation longer
  // than max_model_len or than the KV cache holds.
  result<std::vector<std::vector<int32_t>>> greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                   int64_t max_tokens);

  // Teacher forcing: for each sequence i and each target t in [first[i],
  // size), on_logits(i, t, logits) with the float32 logits [vocab] that
  // predict sequences[i][t] from the tokens before it. REQUIRES first[i] >= 1.
  using logits_sink = std::function<void(size_t sequence, int64_t target, const float* logits)>;
  status score(const std::vector<std::vector<int32_t>>& sequences, const std::vector<int64_t>& first,
               const logits_sink& on_logits);

 private:
  // Runs every sequence (prefill, then `decodes` decode steps), appending
  // each step's sampled tokens to sampled[i] when given.
  status run(const std::vector<std::vector<int32_t>>& sequences, const std::vector<int64_t>& logprobs_start,
             int64_t decodes, const sampling_params& params, std::vector<std::vector<int32_t>>* sampled);

  // Every rank runs the plan; the answering rank's output.
  step_output execute(const step_plan& plan);

  std::vector<model_runner*> ranks_;
  size_t answering_ = 0;  // the last stage's first rank
  engine_limits limits_;
  int64_t next_step_ = 1;
  request_id next_id_ = 1;
};

}  // namespace troupe::eval
