// model_runner, CUDA graphs: capture of the decode shapes, the bucket a step
// runs in, the padding to the captured shape, and verify steps (speculative
// decoding) seen as decodes of their tokens.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "actors/worker/model_runner.h"

namespace troupe {

namespace {

constexpr int64_t max_graph_batch = 512;  // the largest decode batch captured

}  // namespace

int64_t model_runner::capture_graphs() {
  const char* pad = std::getenv("TROUPE_DEBUG_PAD_DECODE");
  const bool debug_pad = pad != nullptr && std::strcmp(pad, "1") == 0;
  if (!ops_->supports_graphs() && !debug_pad) return 0;
  // Buckets up to 512 sequences (vLLM's largest capture size); larger
  // decode batches run eagerly.
  const int64_t largest =
      std::min({limits_.max_num_seqs, limits_.max_num_batched_tokens, max_graph_batch});
  std::vector<int64_t> sizes;
  for (int64_t s : {1, 2, 4}) {
    if (s <= largest) sizes.push_back(s);
  }
  for (int64_t s = 8; s <= largest; s += 8) sizes.push_back(s);
  if (sizes.empty() || sizes.back() != largest) sizes.push_back(largest);
  graphs_replay_ = ops_->supports_graphs();
  if (graphs_replay_) {
    // Largest first; each is run once eagerly (kernel loading, cuBLAS
    // heuristics, the backend's timing of its product kernels for this
    // batch size) and then captured.
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      host_batch batch;
      pad_for_graph(batch, *it);
      forward_inputs in = upload(batch);
      in.any_lora = true;  // the graph serves steps with adapters too (its padding has none)
      ops_->allow_tuning(true);
      model_->forward(in, kv_cache_);
      ops_->allow_tuning(false);
      ops_->begin_capture();
      model_->forward(in, kv_cache_);
      ops_->end_capture(*it);
    }
    // The logits' product (the lm_head, float32 out) runs outside the
    // graphs, with one row per sequence: let the backend time it for each
    // small batch too (the hidden rows are whatever the warm-ups left).
    std::vector<int32_t> rows(tuned_logits_rows);
    std::iota(rows.begin(), rows.end(), 0);
    ops_->allow_tuning(true);
    for (int64_t n = 1; n <= std::min<int64_t>(tuned_logits_rows, largest) && model_->is_last_stage();
         ++n) {
      ops_->upload_ints(rows.data(), logit_rows_dev_, n);
      model_->compute_logits(logit_rows_dev_, n, logits_);
    }
    ops_->allow_tuning(false);
    ops_->synchronize();
  }
  graph_sizes_ = sizes;
  return graphs_replay_ ? static_cast<int64_t>(sizes.size()) : 0;
}

bool model_runner::is_verify_step(const std::vector<request_id>& order) const {
  bool drafts = false;
  for (request_id id : order) {
    const request_state& r = requests_.at(id);
    const auto k = static_cast<int64_t>(r.drafts.size());
    const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
    // Every sequence a decode: its last token (or a placeholder) and its drafts.
    if (r.num_scheduled_tokens != 1 + k ||
        end != static_cast<int64_t>(r.token_ids.size()) + r.pending_tokens + k ||
        r.params.prompt_logprobs >= 0) {
      return false;
    }
    drafts = drafts || k > 0;
  }
  return drafts;
}

void model_runner::attend_per_token(host_batch& batch) {
  // Token i of a sequence at position p sees keys 0..p: as a decode of a
  // sequence of p + 1 tokens over the same block table.
  std::vector<int32_t> starts = {0}, lens, tables;
  const auto num_seqs = static_cast<int64_t>(batch.seq_lens.size());
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = batch.query_start_loc[static_cast<size_t>(s)];
         t < batch.query_start_loc[static_cast<size_t>(s) + 1]; ++t) {
      starts.push_back(t + 1);
      lens.push_back(batch.positions[static_cast<size_t>(t)] + 1);
      tables.insert(tables.end(), batch.block_tables.begin() + s * batch.max_blocks,
                    batch.block_tables.begin() + (s + 1) * batch.max_blocks);
    }
  }
  batch.query_start_loc = std::move(starts);
  batch.seq_lens = std::move(lens);
  batch.block_tables = std::move(tables);
  batch.max_query_len = 1;
}

int64_t model_runner::graph_size_for(const host_batch& batch) const {
  if (graph_sizes_.empty() || batch.max_query_len != 1) return 0;
  const auto n = static_cast<int64_t>(batch.seq_lens.size());
  const auto it = std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), n);
  return it == graph_sizes_.end() ? 0 : *it;
}

void model_runner::pad_for_graph(host_batch& batch, int64_t size) const {
  const auto n = static_cast<int64_t>(batch.seq_lens.size());
  const int64_t stride = (limits_.max_model_len + limits_.block_size - 1) / limits_.block_size;
  // Block tables at the full stride.
  std::vector<int32_t> tables(static_cast<size_t>(size * stride), 0);
  for (int64_t s = 0; s < n; ++s) {
    std::copy_n(batch.block_tables.begin() + s * batch.max_blocks, batch.max_blocks,
                tables.begin() + s * stride);
  }
  batch.block_tables = std::move(tables);
  if (batch.query_start_loc.empty()) batch.query_start_loc.push_back(0);
  for (int64_t s = n; s < size; ++s) {
    batch.token_ids.push_back(0);
    batch.positions.push_back(0);
    batch.slot_mapping.push_back(-1);
    batch.lora_slots.push_back(-1);
    batch.query_start_loc.push_back(batch.query_start_loc.back() + 1);
    batch.seq_lens.push_back(1);
  }
  batch.max_blocks = stride;
  batch.max_query_len = 1;
  batch.max_seq_len = limits_.max_model_len;
}

}  // namespace troupe
