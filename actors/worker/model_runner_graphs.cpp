// model_runner, CUDA graphs: capture of the decode and verify shapes, the
// bucket a step runs in, and the padding to the captured shape.
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
  // Verify steps (speculative decoding): the buckets whose K + 1 tokens a
  // sequence fit the token budget, up to max_verify_graph_batch.
  const int64_t q = 1 + limits_.num_speculative_tokens;
  std::vector<int64_t> verify_sizes;
  if (limits_.num_speculative_tokens > 0 && q <= limits_.max_model_len) {
    for (int64_t s : sizes) {
      if (s <= max_verify_graph_batch && s * q <= limits_.max_num_batched_tokens) verify_sizes.push_back(s);
    }
  }
  graphs_replay_ = ops_->supports_graphs();
  if (graphs_replay_) {
    // Largest first; each is run once eagerly (kernel loading, cuBLAS
    // heuristics, the backend's timing of its product kernels for this
    // batch size) and then captured.
    auto capture = [&](int64_t size, int64_t query_len) {
      host_batch batch;
      pad_for_graph(batch, size, query_len);
      const forward_inputs in = upload(batch);
      ops_->allow_tuning(true);
      model_->forward(in, kv_cache_);
      ops_->allow_tuning(false);
      ops_->begin_capture();
      model_->forward(in, kv_cache_);
      ops_->end_capture(graph_key(size, query_len));
    };
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) capture(*it, 1);
    for (auto it = verify_sizes.rbegin(); it != verify_sizes.rend(); ++it) capture(*it, q);
    // The logits' product (the lm_head, float32 out) runs outside the
    // graphs, with one row per sequence: let the backend time it for each
    // small batch too (the hidden rows are whatever the warm-ups left).
    std::vector<int32_t> rows(tuned_logits_rows);
    std::iota(rows.begin(), rows.end(), 0);
    ops_->allow_tuning(true);
    for (int64_t n = 1; n <= std::min<int64_t>(tuned_logits_rows, largest); ++n) {
      ops_->upload_ints(rows.data(), logit_rows_dev_, n);
      model_->compute_logits(logit_rows_dev_, n, logits_);
    }
    ops_->allow_tuning(false);
    ops_->synchronize();
  }
  graph_sizes_ = sizes;
  verify_graph_sizes_ = verify_sizes;
  return graphs_replay_ ? static_cast<int64_t>(sizes.size() + verify_sizes.size()) : 0;
}

int64_t model_runner::verify_query_len(const std::vector<request_id>& order) const {
  if (verify_graph_sizes_.empty() || static_cast<int64_t>(order.size()) > verify_graph_sizes_.back()) {
    return 0;
  }
  const int64_t q = 1 + limits_.num_speculative_tokens;
  bool drafts = false;
  for (request_id id : order) {
    const request_state& r = requests_.at(id);
    const auto k = static_cast<int64_t>(r.drafts.size());
    const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
    // Every sequence a decode (its last token and its drafts), whose padded
    // positions stay within max_model_len.
    if (r.num_scheduled_tokens != 1 + k ||
        end != static_cast<int64_t>(r.token_ids.size()) + r.pending_tokens + k ||
        r.num_computed_tokens + q > limits_.max_model_len || r.params.prompt_logprobs >= 0) {
      return 0;
    }
    drafts = drafts || k > 0;
  }
  return drafts ? q : 0;
}

int64_t model_runner::graph_size_for(const host_batch& batch) const {
  const bool verify = batch.pad_query_to > 0 && batch.max_query_len == batch.pad_query_to;
  if (batch.max_query_len != 1 && !verify) return 0;
  const std::vector<int64_t>& sizes = verify ? verify_graph_sizes_ : graph_sizes_;
  const auto n = static_cast<int64_t>(batch.seq_lens.size());
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? 0 : *it;
}

void model_runner::pad_for_graph(host_batch& batch, int64_t size, int64_t query_len) const {
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
    for (int64_t j = 0; j < query_len; ++j) {
      batch.token_ids.push_back(0);
      batch.positions.push_back(static_cast<int32_t>(j));
      batch.slot_mapping.push_back(-1);
    }
    batch.query_start_loc.push_back(batch.query_start_loc.back() + static_cast<int32_t>(query_len));
    batch.seq_lens.push_back(static_cast<int32_t>(query_len));
  }
  batch.max_blocks = stride;
  batch.max_query_len = query_len;
  batch.max_seq_len = limits_.max_model_len;
}

}  // namespace troupe
