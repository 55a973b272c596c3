// tp_layout: which part of each weight a tensor-parallel rank holds
// (docs/parallelism.md has the table). vLLM's rules, plus padding where
// vLLM refuses a model:
//
//   q/k/v, gate/up     column-parallel: the rank's heads' rows, its slice
//                      of the intermediate rows
//   o, down            row-parallel: the same heads' / slice's columns; the
//                      partial products are summed across ranks
//   embedding, lm_head vocabulary-parallel when T divides the vocabulary
//                      (each rank a run of rows; the embedding's other rows
//                      read as zeros and are summed in, the logits gathered),
//                      else replicated
//   norms              replicated
//
// KV heads: K % T == 0: K / T a rank. T % K == 0: each KV head replicated
// on T / K ranks, which split its group of query heads. Otherwise KV heads
// are padded (K up to a multiple of T when K > T, else up to a divisor of
// T) with heads of zero weights that no real query head reads. A group's
// query heads are padded up to a multiple of its ranks. Padded rows and
// columns are zeros: a padded query head's output meets a zero column of
// o_proj, so it adds nothing. The intermediate size is padded up to a
// multiple of T the same way (silu(0) * 0 = 0, zero columns of down_proj),
// and so is each expert's of a mixture-of-experts model (vLLM's default:
// every rank holds every expert's slice; the router is replicated).
// Within a rank the layout is ordinary GQA: local query head j reads local
// KV head j / (q_heads / kv_heads).
//
// No dependency on the kernels: the config checks and the memory plan use
// it without a backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/model_config.h"

namespace troupe {

// A run of a rank's rows (or columns) taken from the full weight's: local
// [dst, dst + count) <- full [src, src + count). The rank's rows (columns)
// in no run are padding: zeros.
struct shard_run {
  int64_t dst = 0;
  int64_t src = 0;
  int64_t count = 0;
  bool operator==(const shard_run&) const = default;
};

struct tp_layout {
  int size = 1;
  int rank = 0;
  // Local head counts (padding included) and each local head's global head
  // (-1: padding).
  int64_t q_heads = 0, kv_heads = 0;
  std::vector<int64_t> q_head_of, kv_head_of;
  int64_t kv_replicas = 1;  // ranks holding each KV head (T % K == 0: T / K)
  // Local intermediate rows, from global row intermediate_begin (the rows
  // past the model's intermediate_size are padding).
  int64_t intermediate = 0, intermediate_begin = 0;
  // Mixture-of-experts models: each expert's local intermediate rows (its
  // gate/up rows, its down_proj's columns), from global row
  // expert_intermediate_begin, padded as the dense ones (0 for dense models).
  int64_t expert_intermediate = 0, expert_intermediate_begin = 0;
  // Qwen2-MoE's shared expert: its local intermediate rows, from global row
  // shared_intermediate_begin, padded alike (0: no shared expert).
  int64_t shared_intermediate = 0, shared_intermediate_begin = 0;
  // Local embedding / LM head rows, from global row vocab_begin.
  int64_t vocab = 0, vocab_begin = 0;
  bool vocab_parallel = false;

  // Runs of rows of a per-head projection (q, k or v rows; o columns),
  // `head_dim` rows a head, for the local heads `head_of`.
  static std::vector<shard_run> head_runs(const std::vector<int64_t>& head_of, int64_t head_dim);
  // Runs of the intermediate rows (gate, up) or down_proj's columns, of a
  // model with `intermediate_size` real rows.
  std::vector<shard_run> intermediate_runs(int64_t intermediate_size) const;
  // The same for each expert's rows (columns), of moe_intermediate_size.
  std::vector<shard_run> expert_intermediate_runs(int64_t moe_intermediate_size) const;
  // And the shared expert's, of shared_expert_intermediate_size.
  std::vector<shard_run> shared_intermediate_runs(int64_t shared_intermediate_size) const;
  // Whether some local query head, KV head or (expert) intermediate row is
  // padding.
  bool padded(const model_config& model) const;
};

// Rank `rank` of `size`. Errors name the numbers: size < 1, rank out of
// range, a model without heads.
result<tp_layout> make_tp_layout(const model_config& model, int size, int rank);

// One line for the log: "rank 1/4: 2 query heads (1 padding), 1 of 2 KV
// heads (each on 2 ranks), intermediate 64 of 256, vocabulary rows 256-511".
std::string describe(const tp_layout& layout, const model_config& model);

// The tensor-parallel sizes up to `limit` that need no padding (for the
// log when padding is used).
std::vector<int> unpadded_tp_sizes(const model_config& model, int limit);

// Pipeline parallelism: the layers [begin, end) of stage `stage` of
// `stages`, vLLM's rule (get_pp_indices): num_layers / stages each, the
// remainder one more each to the stages before the last, from the last
// but one backwards (the last stage also holds the norm and LM head).
struct stage_layers {
  int64_t begin = 0, end = 0;
};
stage_layers pipeline_stage_layers(int64_t num_layers, int stages, int stage);

}  // namespace troupe
