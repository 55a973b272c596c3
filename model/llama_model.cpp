#include "model/llama_model.h"

#include <cmath>
#include <optional>

#include "model/rope.h"

namespace troupe {

namespace {

// Collects (name, shape, destination) loads so progress can count them.
struct weight_load {
  std::string name;
  std::vector<int64_t> shape;
  tensor dst;
  int64_t row_offset = 0;  // for stacked weights (gate_up)
};

std::string layer_name(int64_t i, const char* suffix) {
  return "model.layers." + std::to_string(i) + "." + suffix;
}

}  // namespace

llama_model::llama_model(const model_config& config, ops& backend, int64_t max_num_tokens,
                         dtype type)
    : config_(config), ops_(backend), max_num_tokens_(max_num_tokens), type_(type) {}

result<std::unique_ptr<llama_model>> llama_model::create(
    const model_config& config, ops& backend, const weight_source& source,
    int64_t max_num_tokens, int64_t max_position,
    const std::function<void(int64_t, int64_t)>& progress) {
  std::unique_ptr<llama_model> model(
      new llama_model(config, backend, max_num_tokens, source.compute_type));
  if (status s = model->load_weights(source, progress); !s.ok()) return std::move(s).take_error();
  model->allocate_workspace();
  model->build_rope(max_position);
  return model;
}

status llama_model::load_weights(const weight_source& source,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t h = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t q_cols = config_.num_attention_heads * d;
  const int64_t kv_cols = config_.num_key_value_heads * d;
  const int64_t inter = config_.intermediate_size;
  std::vector<weight_load> loads;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, tensor& dst) {
    dst = ops_.alloc(type_, rows, cols);
    loads.push_back({name, cols == 1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols}, dst, 0});
  };
  add("model.embed_tokens.weight", config_.vocab_size, h, embed_tokens_);
  add("model.norm.weight", h, 1, final_norm_);
  if (config_.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    add("lm_head.weight", config_.vocab_size, h, lm_head_);
  }
  layers_.resize(static_cast<size_t>(config_.num_hidden_layers));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    layer_weights& w = layers_[static_cast<size_t>(i)];
    add(layer_name(i, "input_layernorm.weight"), h, 1, w.input_norm);
    add(layer_name(i, "post_attention_layernorm.weight"), h, 1, w.post_attention_norm);
    w.qkv_proj = ops_.alloc(type_, q_cols + 2 * kv_cols, h);
    loads.push_back({layer_name(i, "self_attn.q_proj.weight"), {q_cols, h}, w.qkv_proj, 0});
    loads.push_back({layer_name(i, "self_attn.k_proj.weight"), {kv_cols, h}, w.qkv_proj, q_cols});
    loads.push_back({layer_name(i, "self_attn.v_proj.weight"), {kv_cols, h}, w.qkv_proj,
                     q_cols + kv_cols});
    add(layer_name(i, "self_attn.o_proj.weight"), h, q_cols, w.o_proj);
    if (config_.attention_bias) {
      w.qkv_bias = ops_.alloc(type_, q_cols + 2 * kv_cols, 1);
      loads.push_back({layer_name(i, "self_attn.q_proj.bias"), {q_cols}, w.qkv_bias, 0});
      loads.push_back({layer_name(i, "self_attn.k_proj.bias"), {kv_cols}, w.qkv_bias, q_cols});
      loads.push_back({layer_name(i, "self_attn.v_proj.bias"), {kv_cols}, w.qkv_bias,
                       q_cols + kv_cols});
    }
    if (config_.qk_norm) {
      add(layer_name(i, "self_attn.q_norm.weight"), d, 1, w.q_norm);
      add(layer_name(i, "self_attn.k_norm.weight"), d, 1, w.k_norm);
    }
    w.gate_up_proj = ops_.alloc(type_, 2 * inter, h);
    loads.push_back({layer_name(i, "mlp.gate_proj.weight"), {inter, h}, w.gate_up_proj, 0});
    loads.push_back({layer_name(i, "mlp.up_proj.weight"), {inter, h}, w.gate_up_proj, inter});
    add(layer_name(i, "mlp.down_proj.weight"), h, inter, w.down_proj);
  }
  std::vector<float> host;
  const int64_t total = static_cast<int64_t>(loads.size());
  for (int64_t n = 0; n < total; ++n) {
    const weight_load& load = loads[static_cast<size_t>(n)];
    const tensor dst = load.dst.row_slice(load.row_offset, load.shape[0]);
    if (source.ckpt == nullptr) {
      // Dummy weights are made where they live (on the GPU with cuda); norms
      // get 1 + noise to keep activations at a sane scale.
      const bool is_norm = load.name.find("norm") != std::string::npos;
      ops_.fill_dummy(dst, dummy_key(source.dummy_seed, load.name), 1e-3f, is_norm ? 1.0f : 0.0f);
      if (progress) progress(n + 1, total);
      continue;
    }
    int64_t count = 1;
    for (int64_t dim : load.shape) count *= dim;
    host.resize(static_cast<size_t>(count));
    if (status s = source.ckpt->read_f32(load.name, load.shape, host.data()); !s.ok()) return s;
    ops_.upload(host.data(), dst);
    if (progress) progress(n + 1, total);
  }
  return {};
}

void llama_model::allocate_workspace() {
  const int64_t t = max_num_tokens_;
  const int64_t h = config_.hidden_size;
  const int64_t q_cols = config_.num_attention_heads * config_.head_dim;
  ws_.hidden = ops_.alloc(type_, t, h);
  ws_.residual = ops_.alloc(type_, t, h);
  ws_.normed = ops_.alloc(type_, t, h);
  ws_.qkv = ops_.alloc(type_, t, q_cols + 2 * kv_cols());
  ws_.q = ops_.alloc(type_, t, q_cols);
  ws_.attn = ops_.alloc(type_, t, q_cols);
  ws_.gate_up = ops_.alloc(type_, t, 2 * config_.intermediate_size);
  ws_.act = ops_.alloc(type_, t, config_.intermediate_size);
  ws_.selected = ops_.alloc(type_, t, h);
}

void llama_model::build_rope(int64_t max_position) {
  std::vector<float> cos_host, sin_host;
  rope_cos_sin(config_.rope, config_.head_dim, max_position, cos_host, sin_host);
  rope_.cos = ops_.alloc(dtype::f32, max_position, config_.head_dim / 2);
  rope_.sin = ops_.alloc(dtype::f32, max_position, config_.head_dim / 2);
  ops_.upload(cos_host.data(), rope_.cos);
  ops_.upload(sin_host.data(), rope_.sin);
}

void llama_model::run_layer(size_t layer, const forward_inputs& in, const kv_cache_layer& cache) {
  const layer_weights& w = layers_[layer];
  const bool first = layer == 0, lora = lora_enabled();
  const int64_t n = in.num_tokens;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const tensor hidden = ws_.hidden.row_slice(0, n);
  const tensor residual = ws_.residual.row_slice(0, n);
  const tensor normed = ws_.normed.row_slice(0, n);
  const tensor qkv = ws_.qkv.row_slice(0, n), q = ws_.q.row_slice(0, n);
  // `hidden` holds the previous block's output; before the first block the
  // embedding is in `residual` already (forward writes it there: no copy).
  if (first) {
    ops_.rms_norm(residual, w.input_norm, eps, normed);
  } else {
    ops_.add_rms_norm(residual, hidden, w.input_norm, eps, normed);
  }
  const tensor* qkv_bias = config_.attention_bias ? &w.qkv_bias : nullptr;
  const tensor* q_norm = config_.qk_norm ? &w.q_norm : nullptr;
  const tensor* k_norm = config_.qk_norm ? &w.k_norm : nullptr;
  // With LoRA, each product takes its modules' deltas before its epilogue.
  std::optional<lora_delta> delta;
  auto lora_for = [&](lora_target target, int count) {
    return lora ? &delta.emplace(lora_of(layer, target, count, in)) : nullptr;
  };
  ops_.qkv_linear_rope_cache(normed, w.qkv_proj, qkv_bias, qkv, config_.num_attention_heads,
                             config_.num_key_value_heads, config_.head_dim, q_norm, k_norm, eps,
                             in.positions, rope_, in.slot_mapping, cache, q,
                             lora_for(lora_target::q_proj, 3));
  const tensor attn = ws_.attn.row_slice(0, n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  ops_.paged_attention(q, cache, in.attention, config_.num_attention_heads,
                       config_.num_key_value_heads, config_.head_dim, scale, attn);
  linear(attn, w.o_proj, hidden, lora_for(lora_target::o_proj, 1));
  ops_.add_rms_norm(residual, hidden, w.post_attention_norm, eps, normed);
  const tensor gate_up = ws_.gate_up.row_slice(0, n);
  const tensor act = ws_.act.row_slice(0, n);
  ops_.gated_linear(normed, w.gate_up_proj, gate_up, act, lora_for(lora_target::gate_proj, 2));
  linear(act, w.down_proj, hidden, lora_for(lora_target::down_proj, 1));
}

void llama_model::linear(const tensor& x, const tensor& w, const tensor& out,
                         const lora_delta* lora) {
  if (lora != nullptr) {
    ops_.linear_lora(x, w, nullptr, *lora, out);
  } else {
    ops_.linear(x, w, nullptr, out);
  }
}

void llama_model::forward(const forward_inputs& in, const std::vector<kv_cache_layer>& cache) {
  TROUPE_CHECK(in.num_tokens > 0 && in.num_tokens <= max_num_tokens_);
  TROUPE_CHECK(cache.size() == layers_.size());
  const int64_t n = in.num_tokens;
  const tensor hidden = ws_.hidden.row_slice(0, n);
  const tensor residual = ws_.residual.row_slice(0, n);
  ops_.embedding(in.token_ids, n, embed_tokens_, residual);  // the first block's input
  TROUPE_CHECK(!lora_enabled() || in.lora.token_slots != nullptr);
  for (size_t i = 0; i < layers_.size(); ++i) run_layer(i, in, cache[i]);
  ops_.add_rms_norm(residual, hidden, final_norm_, static_cast<float>(config_.rms_norm_eps),
                    ws_.normed.row_slice(0, n));
  last_num_tokens_ = n;
}

void llama_model::compute_logits(const int32_t* row_indices, int64_t n, const tensor& out) {
  TROUPE_CHECK(n > 0 && n <= max_num_tokens_ && out.rows >= n);
  if (row_indices == nullptr) {
    TROUPE_CHECK(n <= last_num_tokens_);
    ops_.linear(ws_.normed.row_slice(0, n), lm_head_, nullptr, out.row_slice(0, n));
    return;
  }
  ops_.gather_rows(ws_.normed.row_slice(0, last_num_tokens_), row_indices, n,
                   ws_.selected.row_slice(0, n));
  ops_.linear(ws_.selected.row_slice(0, n), lm_head_, nullptr, out.row_slice(0, n));
}

}  // namespace troupe
