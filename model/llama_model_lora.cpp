// llama_model's LoRA slots (llama_model.h): per layer and target module, a
// lora_stack of every slot's lora_A rows [slots * rank, in] and lora_B rows
// [slots * out, rank] (scaling folded in), ranks below the maximum
// zero-padded, modules an adapter leaves alone all zeros. A forward adds
// each token's delta with ops::lora_add, one call for the modules that read
// the same input (q/k/v, gate/up; o; down), tokens of the base at slot -1.
// All seven modules are always run, so that one captured graph serves every
// mix of adapters.
#include <algorithm>

#include "model/llama_model.h"

namespace troupe {

void llama_model::enable_lora(int64_t max_loras, int64_t max_rank) {
  TROUPE_CHECK(lora_slots_ == 0 && max_loras > 0 && max_rank > 0);
  lora_slots_ = max_loras;
  lora_rank_ = max_rank;
  lora_.resize(layers_.size() * num_lora_targets);
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (int t = 0; t < num_lora_targets; ++t) {
      const auto target = static_cast<lora_target>(t);
      lora_stack& s = lora_[l * num_lora_targets + static_cast<size_t>(t)];
      s.slots = max_loras;
      s.rank = max_rank;
      // Zero-filled (ops::alloc): a slot never loaded adds nothing.
      s.a = ops_.alloc(type_, max_loras * max_rank, lora_target_in(config_, target));
      s.b = ops_.alloc(type_, max_loras * lora_target_out(config_, target), max_rank);
    }
  }
  ws_.lora_u = ops_.alloc(dtype::f32, max_num_tokens_, 3 * max_rank);
}

void llama_model::load_lora(int64_t slot, const lora_adapter& adapter) { fill_lora(slot, &adapter); }

void llama_model::clear_lora(int64_t slot) { fill_lora(slot, nullptr); }

void llama_model::fill_lora(int64_t slot, const lora_adapter* adapter) {
  TROUPE_CHECK(slot >= 0 && slot < lora_slots_);
  TROUPE_CHECK_MSG(adapter == nullptr || adapter->rank <= lora_rank_,
                   "a LoRA adapter above max_lora_rank");
  std::vector<float> a, b;
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (int t = 0; t < num_lora_targets; ++t) {
      const lora_stack& s = lora_[l * num_lora_targets + static_cast<size_t>(t)];
      const int64_t in = s.a.cols, out = s.b.rows / s.slots;
      // [max rank, in] and [out, max rank], the adapter's rows and columns
      // first, zeros after.
      a.assign(static_cast<size_t>(lora_rank_ * in), 0.0f);
      b.assign(static_cast<size_t>(out * lora_rank_), 0.0f);
      if (adapter != nullptr) {
        const lora_weights& w = adapter->at(static_cast<int64_t>(l), static_cast<lora_target>(t));
        const int64_t r = w.rank;
        std::copy(w.a.begin(), w.a.end(), a.begin());
        for (int64_t j = 0; j < out && r > 0; ++j) {
          std::copy_n(w.b.begin() + j * r, r, b.begin() + j * lora_rank_);
        }
      }
      ops_.upload(a.data(), s.a.row_slice(slot * lora_rank_, lora_rank_));
      ops_.upload(b.data(), s.b.row_slice(slot * out, out));
    }
  }
}

void llama_model::add_lora(size_t layer, lora_target first, int count, const tensor& x,
                           const forward_inputs& in, const tensor& out) {
  const tensor scratch = ws_.lora_u.row_slice(0, in.num_tokens);
  ops_.lora_add(x, &lora_[layer * num_lora_targets + static_cast<size_t>(first)], count, in.lora,
                scratch, out, 0);
}

}  // namespace troupe
