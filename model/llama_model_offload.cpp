// llama_model's weight offloading (cpu_offload_gb; model/weight_offload.h
// has the rule): an offloaded layer's tensors are carved out of one
// pinned host arena (ops::alloc_host) as they are allocated, so its
// weights are one contiguous run of bytes; once every weight is loaded
// each offloaded layer gets a twin whose tensors point at the same offsets
// in one device staging buffer, and before the layer runs its arena is
// copied there (ops::copy, on the compute stream: in order with the
// kernels, and captured into the CUDA graphs as a copy).
#include "model/llama_model.h"

#include "common/check.h"

namespace troupe {

int64_t llama_model::layer_weight_elements(const model_config& config, const tp_layout& l, int64_t i) {
  // As load_weights allocates a layer.
  const int64_t h = config.hidden_size, d = config.head_dim;
  const int64_t q_rows = l.q_heads * d, qkv_rows = q_rows + 2 * l.kv_heads * d;
  int64_t n = 2 * h + qkv_rows * h + h * q_rows;
  if (config.attention_bias) n += qkv_rows;
  if (config.qk_norm) n += 2 * d;
  const moe_config& m = config.moe;
  if (!is_moe_layer(config, i)) return n + 3 * l.intermediate * h;
  n += m.num_experts * (h + 3 * l.expert_intermediate * h);
  if (m.shared_intermediate > 0) n += 3 * l.shared_intermediate * h + h;
  return n;
}

std::vector<int64_t> llama_model::layer_weight_bytes(const model_config& config, const tp_layout& layout,
                                                    const stage_layers& layers, dtype type, bool packed) {
  std::vector<int64_t> bytes;
  for (int64_t i = layers.begin; i < layers.end; ++i) {
    bytes.push_back(layer_weight_elements(config, layout, i) * static_cast<int64_t>(dtype_size(type)) +
                    (packed ? packed_linear_bytes(config, layout, i, type) : 0));
  }
  return bytes;
}

void llama_model::plan_layer_offload(int64_t cpu_offload_bytes) {
  offload_ = plan_offload(layer_weight_bytes(config_, layout_, stage_, type_), cpu_offload_bytes);
  offload_arenas_.assign(layers_.size(), tensor{});
  staged_.assign(layers_.size(), layer_weights{});
}

void llama_model::begin_layer(size_t layer) {
  arena_next_ = arena_end_ = nullptr;
  if (!offload_.offloaded[layer]) return;
  const int64_t element = static_cast<int64_t>(dtype_size(type_));
  const int64_t bytes =
      offload_arena_bytes(layer_weight_elements(config_, layout_, stage_.begin + static_cast<int64_t>(layer)) *
                          element);
  tensor& arena = offload_arenas_[layer];
  arena = ops_.alloc_host(type_, 1, (bytes + element - 1) / element);
  arena_next_ = static_cast<char*>(arena.data);
  arena_end_ = arena_next_ + arena.numel() * element;
}

tensor llama_model::alloc_weight(int64_t rows, int64_t cols) {
  if (arena_next_ == nullptr) return ops_.alloc(type_, rows, cols);
  const int64_t bytes = rows * cols * static_cast<int64_t>(dtype_size(type_));
  TROUPE_CHECK_MSG(arena_next_ + bytes <= arena_end_, "an offloaded layer outgrew its arena");
  tensor t{arena_next_, type_, rows, cols};
  arena_next_ += (bytes + offload_alignment - 1) / offload_alignment * offload_alignment;
  return t;
}

namespace {

// Every weight tensor of a layer (those it does not hold are empty).
template <class Layer, class F>
void for_each_weight(Layer& w, F&& f) {
  for (tensor* t : {&w.input_norm, &w.post_attention_norm, &w.qkv_proj, &w.o_proj, &w.qkv_bias, &w.q_norm,
                    &w.k_norm, &w.gate_up_proj, &w.down_proj, &w.router, &w.experts_gate_up, &w.experts_down,
                    &w.shared_gate_up, &w.shared_down, &w.shared_gate}) {
    f(*t);
  }
}

}  // namespace

void llama_model::finish_offload() {
  arena_next_ = arena_end_ = nullptr;
  if (offload_.num_offloaded == 0) return;
  const int64_t element = static_cast<int64_t>(dtype_size(type_));
  staging_ = ops_.alloc(type_, 1, offload_.staging_bytes / element);  // arenas are whole elements
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!offload_.offloaded[i]) continue;
    const char* base = static_cast<const char*>(offload_arenas_[i].data);
    const int64_t size = offload_arenas_[i].numel() * element;
    layer_weights twin = layers_[i];
    for_each_weight(twin, [&](tensor& t) {
      if (t.data == nullptr) return;
      const char* p = static_cast<const char*>(t.data);
      TROUPE_CHECK_MSG(p >= base && p < base + size, "an offloaded layer's weight outside its arena");
      t.data = static_cast<char*>(staging_.data) + (p - base);
    });
    staged_[i] = twin;
  }
}

const llama_model::layer_weights& llama_model::weights_for_run(size_t layer) {
  if (offload_.offloaded.empty() || !offload_.offloaded[layer]) return layers_[layer];
  const tensor& arena = offload_arenas_[layer];
  ops_.copy(arena, tensor{staging_.data, staging_.type, 1, arena.cols});
  return staged_[layer];
}

}  // namespace troupe
