// llama_model's LoRA slots (llama_model.h): per layer and target module, a
// lora_stack of every slot's lora_A rows [slots * rank, in] and lora_B
// columns [out, slots * rank] (scaling folded in), ranks below the maximum
// zero-padded, modules an adapter leaves alone all zeros. The A stacks of
// the modules that read the same input (q/k/v, gate/up) lie back to back,
// so a backend can shrink them in one product. A forward adds each token's
// delta in the products (ops::lora_delta: linear_lora,
// qkv_linear_rope_cache and gated_linear), one lora_delta for the modules
// that read the same input (q/k/v, gate/up; o; down), tokens of the base
// at slot -1, before the products' epilogues (RoPE and the KV write;
// SiLU-and-mul). All
// seven modules are always run, so that one captured graph serves every
// mix of adapters.
#include <algorithm>

#include "model/llama_model.h"

namespace troupe {

namespace {

// The modules lora_add runs together, in target order: first and count.
constexpr struct {
  lora_target first;
  int count;
} lora_groups[] = {{lora_target::q_proj, 3}, {lora_target::o_proj, 1},
                   {lora_target::gate_proj, 2}, {lora_target::down_proj, 1}};

}  // namespace

void llama_model::enable_lora(int64_t max_loras, int64_t max_rank) {
  TROUPE_CHECK(lora_slots_ == 0 && max_loras > 0 && max_rank > 0);
  TROUPE_CHECK_MSG(layout_.size == 1 && pp_ == nullptr, "LoRA with tensor or pipeline parallelism");
  lora_slots_ = max_loras;
  lora_rank_ = max_rank;
  lora_.resize(layers_.size() * num_lora_targets);
  const int64_t rows = max_loras * max_rank;
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (const auto& g : lora_groups) {
      const int first = static_cast<int>(g.first);
      // A mixture-of-experts layer has no dense MLP: its MLP modules get no
      // stacks (adapters for them are refused at load: lora_adapter.cpp).
      if (g.first >= lora_target::gate_proj && layers_[l].moe) continue;
      // Zero-filled (ops::alloc): a slot never loaded adds nothing.
      const tensor a = ops_.alloc(type_, g.count * rows, lora_target_in(config_, g.first));
      for (int m = 0; m < g.count; ++m) {
        const auto target = static_cast<lora_target>(first + m);
        lora_stack& s = lora_[l * num_lora_targets + static_cast<size_t>(first + m)];
        s.slots = max_loras;
        s.rank = max_rank;
        s.a = a.row_slice(m * rows, rows);
        s.b = ops_.alloc(type_, lora_target_out(config_, target), rows);
      }
    }
  }
  ws_.lora_u = ops_.alloc(dtype::f32, max_num_tokens_, ops_.lora_scratch_cols(3, max_loras, max_rank));
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
      if (s.slots == 0) continue;  // none for this module (a MoE layer's MLP)
      const int64_t in = s.a.cols, out = s.b.rows;
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
      ops_.upload_cols(b.data(), s.b, slot * lora_rank_, lora_rank_);
    }
  }
}

lora_delta llama_model::lora_of(size_t layer, lora_target first, int count,
                                const forward_inputs& in) const {
  return {&lora_[layer * num_lora_targets + static_cast<size_t>(first)], count, in.lora,
          ws_.lora_u.row_slice(0, in.num_tokens)};
}

}  // namespace troupe
