#include "model/llama_model.h"

#include <cmath>
#include <optional>

#include "model/fp8_linear.h"
#include "model/rope.h"

namespace troupe {

namespace {

// One checkpoint tensor and where this rank's part of it goes: runs of
// its rows (or columns) into `dst`, a tensor of its own or rows of a
// stacked one (q/k/v, gate/up). dst's other rows (columns) are padding and
// stay zeros (ops::alloc).
struct weight_load {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's, [rows] or [rows, cols]
  tensor dst;
  bool by_cols = false;  // runs of columns (row-parallel products)
  std::vector<shard_run> runs;

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() == 2 ? shape[1] : 1; }
  // Whether dst is the whole tensor.
  bool whole() const {
    return runs.size() == 1 && runs[0].src == 0 && runs[0].dst == 0 &&
           runs[0].count == (by_cols ? cols() : rows()) && dst.numel() == rows() * cols();
  }
};

std::string layer_name(int64_t i, const char* suffix) {
  return "model.layers." + std::to_string(i) + "." + suffix;
}

// Dummy weights are made where they live (on the GPU with cuda), each run
// of a rank's part from its place in the whole tensor, so every T gives
// the same logical weights; norms get 1 + noise to keep activations at a
// sane scale.
void fill_dummy_part(ops& backend, const weight_load& load, int64_t seed) {
  const uint64_t key = dummy_key(seed, load.name);
  const float offset = load.name.find("norm") != std::string::npos ? 1.0f : 0.0f;
  constexpr float scale = 1e-3f;
  const tensor& dst = load.dst;
  if (load.whole()) {
    backend.fill_dummy(dst, key, scale, offset);
    return;
  }
  for (const shard_run& run : load.runs) {
    if (!load.by_cols) {
      backend.fill_dummy(dst.row_slice(run.dst, run.count),
                         dummy_key_at(key, run.src * load.cols()), scale, offset);
      continue;
    }
    const size_t element = dtype_size(dst.type);
    for (int64_t i = 0; i < dst.rows; ++i) {  // a run of columns: a view a row
      const tensor part{static_cast<char*>(dst.data) + (i * dst.cols + run.dst) * element,
                        dst.type, 1, run.count};
      backend.fill_dummy(part, dummy_key_at(key, i * load.cols() + run.src), scale, offset);
    }
  }
}

// Uploads a rank's runs of the whole tensor `host`.
void upload_part(ops& backend, const weight_load& load, const std::vector<float>& host,
                 std::vector<float>& staging) {
  if (load.whole()) {
    backend.upload(host.data(), load.dst);
    return;
  }
  for (const shard_run& run : load.runs) {
    if (!load.by_cols) {
      backend.upload(host.data() + run.src * load.cols(), load.dst.row_slice(run.dst, run.count));
      continue;
    }
    staging.resize(static_cast<size_t>(load.rows() * run.count));
    for (int64_t i = 0; i < load.rows(); ++i) {
      std::copy_n(host.data() + i * load.cols() + run.src, run.count,
                  staging.data() + i * run.count);
    }
    backend.upload_cols(staging.data(), load.dst, run.dst, run.count);
  }
}

// The MoE kernels' sizes for steps of up to `tokens` tokens on a rank.
moe_shape moe_shape_of(const model_config& config, const tp_layout& layout, int64_t tokens) {
  return {tokens, config.moe.num_experts, config.moe.top_k, layout.expert_intermediate, config.hidden_size};
}

}  // namespace

llama_model::llama_model(const model_config& config, ops& backend, int64_t max_num_tokens,
                         dtype type, tp_layout layout, const model_parallel& parallel)
    : config_(config),
      ops_(backend),
      layout_(std::move(layout)),
      comm_(parallel.tp),
      pp_(parallel.pp),
      stage_(pipeline_stage_layers(config.num_hidden_layers, pp_ ? pp_->size() : 1,
                                   pp_ ? pp_->rank() : 0)),
      max_num_tokens_(max_num_tokens),
      type_(type) {}

result<std::unique_ptr<llama_model>> llama_model::create(
    const model_config& config, ops& backend, const weight_source& source,
    int64_t max_num_tokens, int64_t max_position, const model_parallel& parallel,
    const std::function<void(int64_t, int64_t)>& progress) {
  const communicator* tp = parallel.tp;
  auto layout = make_tp_layout(config, tp ? tp->size() : 1, tp ? tp->rank() : 0);
  if (!layout) return std::move(layout).take_error();
  if (parallel.pp != nullptr && parallel.pp->size() > config.num_hidden_layers) {
    return make_error("pipeline_parallel_size " + std::to_string(parallel.pp->size()) +
                      " is more than the model's " + std::to_string(config.num_hidden_layers) +
                      " layers");
  }
  if (config.moe.num_experts > 0) {
    if (!backend.supports_moe()) {
      return make_error(config.architecture + " (mixture of experts) needs a backend with MoE kernels "
                        "(cpu or cuda)");
    }
    if (config.moe.num_experts > moe_max_experts || config.moe.top_k > moe_max_top_k) {
      return make_error(config.architecture + " has " + std::to_string(config.moe.num_experts) +
                        " experts, top " + std::to_string(config.moe.top_k) + ": at most " +
                        std::to_string(moe_max_experts) + " experts and a top " +
                        std::to_string(moe_max_top_k) + " are supported");
    }
  }
  std::unique_ptr<llama_model> model(new llama_model(
      config, backend, max_num_tokens, source.compute_type, std::move(layout.value()), parallel));
  model->packed_ = packs(config, model->layout_, source.cpu_offload_bytes,
                         backend.packs_weights(config.quantization, source.compute_type));
  if (status s = model->load_weights(source, progress); !s.ok()) return std::move(s).take_error();
  if (status s = model->read_kv_scales(source.ckpt); !s.ok()) return std::move(s).take_error();
  model->allocate_workspace();
  if (model->is_last_stage()) model->allocate_logits_workspace(parallel.max_logits_rows);
  model->build_rope(max_position);
  return model;
}

status llama_model::read_kv_scales(const checkpoint* ckpt) {
  kv_scales_.assign(layers_.size(), {1.0f, 1.0f});
  if (ckpt == nullptr) return {};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int64_t layer = stage_.begin + static_cast<int64_t>(i);
    float* scale = &kv_scales_[i].first;
    for (const char* name : {"self_attn.k_scale", "self_attn.v_scale"}) {
      const std::string full = layer_name(layer, name);
      if (const tensor_info* t = ckpt->find(full)) {
        int64_t n = 1;
        for (int64_t d : t->shape) n *= d;
        if (n != 1) return make_error("tensor '" + full + "' in " + t->file + " should hold one scale");
        if (status s = ckpt->read_f32(full, t->shape, scale); !s.ok()) return s;
        if (!(*scale > 0.0f) || !std::isfinite(*scale)) {
          return make_error("tensor '" + full + "' in " + t->file + " is not a positive scale");
        }
      }
      scale = &kv_scales_[i].second;
    }
  }
  return {};
}

status llama_model::load_weights(const weight_source& source,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  const tp_layout& l = layout_;
  const int64_t h = config_.hidden_size, d = config_.head_dim;
  const int64_t q_rows = l.q_heads * d, kv_rows = l.kv_heads * d;
  const int64_t q_all = config_.num_attention_heads * d, kv_all = config_.num_key_value_heads * d;
  const int64_t inter = config_.intermediate_size;
  const std::vector<shard_run> q_runs = tp_layout::head_runs(l.q_head_of, d);
  const std::vector<shard_run> kv_runs = tp_layout::head_runs(l.kv_head_of, d);
  const std::vector<shard_run> inter_runs = l.intermediate_runs(inter);
  std::vector<weight_load> loads;
  // A tensor of its own: `rows` x `cols` here, taking `runs` of the whole's.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int64_t rows, int64_t cols,
                 tensor& dst, bool by_cols, std::vector<shard_run> runs) {
    dst = alloc_weight(rows, cols);
    loads.push_back({name, std::move(shape), dst, by_cols, std::move(runs)});
  };
  auto replicated = [&](const std::string& name, int64_t rows, tensor& dst) {
    add(name, {rows}, rows, 1, dst, false, {{0, 0, rows}});
  };
  // Rows [first, first + rows) of a stacked tensor.
  auto stacked = [&](const std::string& name, std::vector<int64_t> shape, const tensor& dst,
                     int64_t first, int64_t rows, std::vector<shard_run> runs) {
    loads.push_back({name, std::move(shape), dst.row_slice(first, rows), false, std::move(runs)});
  };
  // The first stage embeds, the last holds the final norm and LM head
  // (tied: the embedding's rows, loaded again where the stages differ).
  const std::vector<shard_run> vocab_runs = {{0, l.vocab_begin, l.vocab}};
  const std::vector<int64_t> vocab_shape = {config_.vocab_size, h};
  const bool first_stage = stage_.begin == 0;
  if (first_stage) {
    add("model.embed_tokens.weight", vocab_shape, l.vocab, h, embed_tokens_, false, vocab_runs);
  }
  if (is_last_stage()) {
    replicated("model.norm.weight", h, final_norm_);
    if (config_.tie_word_embeddings && first_stage) {
      lm_head_ = embed_tokens_;
    } else {
      add(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
          vocab_shape, l.vocab, h, lm_head_, false, vocab_runs);
    }
  }
  layers_.resize(static_cast<size_t>(stage_.end - stage_.begin));
  plan_layer_offload(source.cpu_offload_bytes);
  for (int64_t i = stage_.begin; i < stage_.end; ++i) {
    begin_layer(static_cast<size_t>(i - stage_.begin));
    layer_weights& w = layers_[static_cast<size_t>(i - stage_.begin)];
    replicated(layer_name(i, "input_layernorm.weight"), h, w.input_norm);
    replicated(layer_name(i, "post_attention_layernorm.weight"), h, w.post_attention_norm);
    w.qkv_proj = alloc_linear({q_rows, kv_rows, kv_rows}, h);
    stacked(layer_name(i, "self_attn.q_proj.weight"), {q_all, h}, w.qkv_proj, 0, q_rows, q_runs);
    stacked(layer_name(i, "self_attn.k_proj.weight"), {kv_all, h}, w.qkv_proj, q_rows, kv_rows,
            kv_runs);
    stacked(layer_name(i, "self_attn.v_proj.weight"), {kv_all, h}, w.qkv_proj, q_rows + kv_rows,
            kv_rows, kv_runs);
    w.o_proj = alloc_linear({h}, q_rows);
    loads.push_back({layer_name(i, "self_attn.o_proj.weight"), {h, q_all}, w.o_proj, true, q_runs});
    if (config_.attention_bias) {
      w.qkv_bias = alloc_weight(q_rows + 2 * kv_rows, 1);
      stacked(layer_name(i, "self_attn.q_proj.bias"), {q_all}, w.qkv_bias, 0, q_rows, q_runs);
      stacked(layer_name(i, "self_attn.k_proj.bias"), {kv_all}, w.qkv_bias, q_rows, kv_rows,
              kv_runs);
      stacked(layer_name(i, "self_attn.v_proj.bias"), {kv_all}, w.qkv_bias, q_rows + kv_rows,
              kv_rows, kv_runs);
    }
    if (config_.qk_norm) {
      replicated(layer_name(i, "self_attn.q_norm.weight"), d, w.q_norm);
      replicated(layer_name(i, "self_attn.k_norm.weight"), d, w.k_norm);
    }
    if (is_moe_layer(config_, i)) {
      const moe_config& m = config_.moe;
      // Every expert's slice of rows (gate, up) and columns (down) on
      // each rank (tp_layout); the router replicated.
      const int64_t experts = m.num_experts, ei = m.intermediate, local = l.expert_intermediate;
      const std::vector<shard_run> runs = l.expert_intermediate_runs(ei);
      const std::string moe = m.mixtral_names ? "block_sparse_moe." : "mlp.";
      w.moe = true;
      add(layer_name(i, (moe + "gate.weight").c_str()), {experts, h}, experts, h, w.router, false,
          {{0, 0, experts}});
      w.experts_gate_up = alloc_weight(experts * 2 * local, h);
      w.experts_down = alloc_weight(experts * h, local);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string expert = moe + "experts." + std::to_string(e) + ".";
        const auto name = [&](const char* mixtral, const char* qwen) {
          return layer_name(i, (expert + (m.mixtral_names ? mixtral : qwen) + ".weight").c_str());
        };
        stacked(name("w1", "gate_proj"), {ei, h}, w.experts_gate_up, e * 2 * local, local, runs);
        stacked(name("w3", "up_proj"), {ei, h}, w.experts_gate_up, e * 2 * local + local, local, runs);
        loads.push_back({name("w2", "down_proj"), {h, ei}, w.experts_down.row_slice(e * h, h), true, runs});
      }
      if (const int64_t si = m.shared_intermediate; si > 0) {  // Qwen2-MoE
        const int64_t ls = l.shared_intermediate;
        const std::vector<shard_run> shared_runs = l.shared_intermediate_runs(si);
        w.shared_gate_up = alloc_weight(2 * ls, h);
        stacked(layer_name(i, "mlp.shared_expert.gate_proj.weight"), {si, h}, w.shared_gate_up, 0, ls,
                shared_runs);
        stacked(layer_name(i, "mlp.shared_expert.up_proj.weight"), {si, h}, w.shared_gate_up, ls, ls,
                shared_runs);
        add(layer_name(i, "mlp.shared_expert.down_proj.weight"), {h, si}, h, ls, w.shared_down, true,
            shared_runs);
        add(layer_name(i, "mlp.shared_expert_gate.weight"), {1, h}, 1, h, w.shared_gate, false,
            {{0, 0, 1}});
      }
      continue;
    }
    w.gate_up_proj = alloc_linear({l.intermediate, l.intermediate}, h);
    stacked(layer_name(i, "mlp.gate_proj.weight"), {inter, h}, w.gate_up_proj, 0, l.intermediate,
            inter_runs);
    stacked(layer_name(i, "mlp.up_proj.weight"), {inter, h}, w.gate_up_proj, l.intermediate,
            l.intermediate, inter_runs);
    w.down_proj = alloc_linear({h}, l.intermediate);
    loads.push_back({layer_name(i, "mlp.down_proj.weight"), {h, inter}, w.down_proj, true, inter_runs});
  }
  std::vector<float> host, staging;
  const bool fp8 = config_.quantization.kind == quant_config::method::fp8;
  std::map<const int32_t*, std::vector<std::vector<int32_t>>> perms;  // act-order's parts, by tensor
  const int64_t total = static_cast<int64_t>(loads.size());
  for (int64_t n = 0; n < total; ++n) {
    const weight_load& load = loads[static_cast<size_t>(n)];
    if (load.dst.is_packed()) {  // one rank (packs()): every part is whole
      TROUPE_CHECK(load.whole());
      if (status s = load_packed(source.ckpt, load.name, load.dst, source.dummy_seed, perms); !s.ok()) return s;
    } else if (source.ckpt == nullptr && fp8 && fp8_quantizes(load.name)) {
      // Dummy FP8 computed in floats (a backend or layout that does not
      // pack): the whole tensor's dummy values through FP8 and back, as
      // checkpoint::read_f32 gives an FP8 (or online FP8) checkpoint's.
      host.resize(static_cast<size_t>(load.rows() * load.cols()));
      fill_dummy_f32(dummy_key(source.dummy_seed, load.name), host.data(), host.size(), 1e-3f, 0.0f);
      fp8_round_trip(host.data(), load.rows(), load.cols(), config_.quantization);
      upload_part(ops_, load, host, staging);
    } else if (source.ckpt == nullptr) {
      fill_dummy_part(ops_, load, source.dummy_seed);
    } else {
      host.resize(static_cast<size_t>(load.rows() * load.cols()));
      if (status s = source.ckpt->read_f32(load.name, load.shape, host.data()); !s.ok()) return s;
      upload_part(ops_, load, host, staging);
    }
    if (progress) progress(n + 1, total);
  }
  finish_offload();
  if (packed_) settle_packed_parts(perms);
  return {};
}

llama_model::footprint llama_model::memory_footprint(const model_config& config,
                                                     const tp_layout& l, int stage, int stages,
                                                     dtype type, int64_t max_num_tokens,
                                                     int64_t max_position,
                                                     int64_t max_logits_rows,
                                                     int64_t cpu_offload_bytes, bool packed) {
  // As load_weights, allocate_workspace, allocate_logits_workspace and
  // build_rope allocate (tensor_parallel_test checks them against the
  // backend's count).
  const int64_t h = config.hidden_size, d = config.head_dim;
  const int64_t q_rows = l.q_heads * d, qkv_rows = q_rows + 2 * l.kv_heads * d;
  const stage_layers layers = pipeline_stage_layers(config.num_hidden_layers, stages, stage);
  const bool first = layers.begin == 0, last = stage == stages - 1;
  const int64_t vocab_rows = l.vocab * h;
  const moe_config& m = config.moe;
  const int64_t element = static_cast<int64_t>(dtype_size(type));
  int64_t weights = first ? vocab_rows : 0;
  const std::vector<int64_t> layer_bytes = layer_weight_bytes(config, l, layers, type, packed);
  if (last) weights += h + (config.tie_word_embeddings && first ? 0 : vocab_rows);
  const int64_t t = max_num_tokens;
  const int64_t activations =
      t * (4 * h + qkv_rows + 2 * q_rows + (has_dense_mlp(config) ? 3 * l.intermediate : 0) + m.num_experts +
           (m.shared_intermediate > 0 ? 3 * l.shared_intermediate + h + 1 : 0));
  footprint f;
  f.weights = weights * element;
  for (int64_t b : layer_bytes) f.weights += b;
  // Offloaded layers: in host memory, a staging buffer on the device.
  const offload_plan offload = plan_offload(layer_bytes, cpu_offload_bytes);
  for (size_t i = 0; i < layer_bytes.size(); ++i) {
    if (offload.offloaded[i]) f.weights -= layer_bytes[i];
  }
  f.weights += offload.staging_bytes;
  f.host_weights = offload.host_bytes;
  f.workspace = activations * element + 2 * max_position * (d / 2) * 4;
  // The MoE kernels' scratch (ops::reserve_moe: cuda_ops's; the cpu
  // backend reserves none, so its plan is that much over).
  if (m.num_experts > 0) f.workspace += moe_scratch_bytes(moe_shape_of(config, l, t), type);
  if (packed) {
    const auto [elements, cols] = packed_scratch_shape(config, l);
    f.workspace += config.quantization.kind == quant_config::method::fp8 ? fp8_scratch_bytes(t, cols)
                                                                         : packed_scratch_bytes(elements, cols, type);
  }
  if (last && l.vocab_parallel) f.workspace += max_logits_rows * l.vocab * 4;
  return f;
}

void llama_model::allocate_logits_workspace(int64_t max_logits_rows) {
  if (layout_.vocab_parallel) {
    TROUPE_CHECK_MSG(max_logits_rows > 0, "vocabulary-parallel logits need max_logits_rows");
    logits_part_ = ops_.alloc(dtype::f32, max_logits_rows, layout_.vocab);  // as the logits
  }
}

void llama_model::allocate_workspace() {
  const int64_t t = max_num_tokens_;
  const int64_t h = config_.hidden_size;
  const int64_t q_cols = layout_.q_heads * config_.head_dim;
  ws_.hidden = ops_.alloc(type_, t, h);
  ws_.residual = ops_.alloc(type_, t, h);
  ws_.normed = ops_.alloc(type_, t, h);
  ws_.qkv = ops_.alloc(type_, t, q_cols + 2 * kv_cols());
  ws_.q = ops_.alloc(type_, t, q_cols);
  ws_.attn = ops_.alloc(type_, t, q_cols);
  if (has_dense_mlp(config_)) {  // a model whose every layer is sparse needs neither
    ws_.gate_up = ops_.alloc(type_, t, 2 * layout_.intermediate);
    ws_.act = ops_.alloc(type_, t, layout_.intermediate);
  }
  ws_.selected = ops_.alloc(type_, t, h);
  if (packed_) {
    const auto [elements, cols] = packed_scratch_shape(config_, layout_);
    if (config_.quantization.kind == quant_config::method::fp8) {
      ops_.reserve_fp8(t, cols);
    } else {
      ops_.reserve_packed(elements, cols, type_);
    }
  }
  if (config_.moe.num_experts > 0) {
    ws_.router_logits = ops_.alloc(type_, t, config_.moe.num_experts);
    ops_.reserve_moe(moe_shape_of(config_, layout_, t), type_);
  }
  if (config_.moe.shared_intermediate > 0) {
    ws_.shared_gate_up = ops_.alloc(type_, t, 2 * layout_.shared_intermediate);
    ws_.shared_act = ops_.alloc(type_, t, layout_.shared_intermediate);
    ws_.shared_out = ops_.alloc(type_, t, h);
    ws_.shared_gate = ops_.alloc(type_, t, 1);
  }
}

void llama_model::build_rope(int64_t max_position) {
  std::vector<float> cos_host, sin_host;
  rope_cos_sin(config_.rope, config_.head_dim, max_position, cos_host, sin_host);
  rope_.cos = ops_.alloc(dtype::f32, max_position, config_.head_dim / 2);
  rope_.sin = ops_.alloc(dtype::f32, max_position, config_.head_dim / 2);
  ops_.upload(cos_host.data(), rope_.cos);
  ops_.upload(sin_host.data(), rope_.sin);
}

void llama_model::enable_expert_counts() {
  if (expert_counts_ != nullptr) return;
  int64_t rows = 0;
  expert_count_rows_.assign(layers_.size(), -1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].moe) expert_count_rows_[i] = rows++;
  }
  if (rows == 0) return;
  const std::vector<int32_t> zeros(static_cast<size_t>(rows * config_.moe.num_experts), 0);
  expert_counts_ = ops_.alloc_ints(static_cast<int64_t>(zeros.size()));
  ops_.upload_ints(zeros.data(), expert_counts_, static_cast<int64_t>(zeros.size()));
}

expert_counts llama_model::read_expert_counts() {
  expert_counts out;
  if (expert_counts_ == nullptr) return out;
  out.experts = config_.moe.num_experts;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (expert_count_rows_[i] >= 0) out.layers.push_back(static_cast<int32_t>(stage_.begin + static_cast<int64_t>(i)));
  }
  std::vector<int32_t> host(out.layers.size() * static_cast<size_t>(out.experts));
  ops_.download_ints(expert_counts_, host.data(), static_cast<int64_t>(host.size()));
  out.counts.assign(host.begin(), host.end());  // the counters are uint32 (ops.h moe_counts)
  return out;
}

void llama_model::run_layer(size_t layer, const forward_inputs& in, const kv_cache_layer& cache) {
  const layer_weights& w = weights_for_run(layer);
  const bool first = stage_.begin + static_cast<int64_t>(layer) == 0, lora = lora_enabled() && in.any_lora;
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
  ops_.qkv_linear_rope_cache(normed, w.qkv_proj, qkv_bias, qkv, layout_.q_heads,
                             layout_.kv_heads, config_.head_dim, q_norm, k_norm, eps,
                             in.positions, rope_, in.slot_mapping, cache, q,
                             lora_for(lora_target::q_proj, 3));
  const tensor attn = ws_.attn.row_slice(0, n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  ops_.paged_attention(q, cache, in.attention, layout_.q_heads, layout_.kv_heads,
                       config_.head_dim, scale, attn);
  linear(attn, w.o_proj, hidden, lora_for(lora_target::o_proj, 1));
  all_reduce(hidden);  // row-parallel: the ranks' partial products
  ops_.add_rms_norm(residual, hidden, w.post_attention_norm, eps, normed);
  if (w.moe) {  // every rank routes alike (replicated router) over its slice of each expert
    const tensor router = ws_.router_logits.row_slice(0, n);
    ops_.linear(normed, w.router, nullptr, router);
    moe_counts counts;
    if (expert_counts_ != nullptr) {
      counts.counts = expert_counts_ + expert_count_rows_[layer] * config_.moe.num_experts;
      counts.token_slots = in.slot_mapping;
    }
    ops_.moe_mlp(normed, router, w.experts_gate_up, w.experts_down, config_.moe.num_experts,
                 config_.moe.top_k, config_.moe.renormalize, hidden, counts);
    if (config_.moe.shared_intermediate > 0) {
      // Qwen2-MoE's shared expert, times sigmoid of its gate (replicated,
      // so each rank scales its partial sum alike before the all-reduce).
      const tensor shared = ws_.shared_out.row_slice(0, n), gate = ws_.shared_gate.row_slice(0, n);
      ops_.gated_linear(normed, w.shared_gate_up, ws_.shared_gate_up.row_slice(0, n),
                        ws_.shared_act.row_slice(0, n), nullptr);
      ops_.linear(ws_.shared_act.row_slice(0, n), w.shared_down, nullptr, shared);
      ops_.linear(normed, w.shared_gate, nullptr, gate);
      ops_.add_sigmoid_gated(shared, gate, hidden);
    }
    all_reduce(hidden);  // row-parallel down products: the ranks' partial sums
    return;
  }
  const tensor gate_up = ws_.gate_up.row_slice(0, n);
  const tensor act = ws_.act.row_slice(0, n);
  ops_.gated_linear(normed, w.gate_up_proj, gate_up, act, lora_for(lora_target::gate_proj, 2));
  linear(act, w.down_proj, hidden, lora_for(lora_target::down_proj, 1));
  all_reduce(hidden);
}

void llama_model::all_reduce(const tensor& x) {
  if (comm_ != nullptr) comm_->all_reduce_sum(x);
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
  if (stage_.begin == 0) {
    // The first block's input; vocabulary-parallel: each rank's rows, summed.
    ops_.embedding(in.token_ids, n, embed_tokens_, layout_.vocab_begin, residual);
    if (layout_.vocab_parallel) all_reduce(residual);
  } else {
    // The previous stage's last block output and residual.
    pp_->recv(hidden, pp_->rank() - 1);
    pp_->recv(residual, pp_->rank() - 1);
  }
  TROUPE_CHECK(!lora_enabled() || in.lora.token_slots != nullptr);
  for (size_t i = 0; i < layers_.size(); ++i) run_layer(i, in, cache[i]);
  last_num_tokens_ = n;
  if (!is_last_stage()) {
    pp_->send(hidden, pp_->rank() + 1);
    pp_->send(residual, pp_->rank() + 1);
    return;
  }
  ops_.add_rms_norm(residual, hidden, final_norm_, static_cast<float>(config_.rms_norm_eps),
                    ws_.normed.row_slice(0, n));
}

void llama_model::compute_logits(const int32_t* row_indices, int64_t n, const tensor& out) {
  TROUPE_CHECK(n > 0 && n <= max_num_tokens_ && out.rows >= n && out.cols == config_.vocab_size);
  TROUPE_CHECK_MSG(is_last_stage(), "logits on a pipeline stage before the last");
  tensor hidden = ws_.normed.row_slice(0, n);
  if (row_indices == nullptr) {
    TROUPE_CHECK(n <= last_num_tokens_);
  } else {
    ops_.gather_rows(ws_.normed.row_slice(0, last_num_tokens_), row_indices, n,
                     ws_.selected.row_slice(0, n));
    hidden = ws_.selected.row_slice(0, n);
  }
  if (!layout_.vocab_parallel) {
    ops_.linear(hidden, lm_head_, nullptr, out.row_slice(0, n));
    return;
  }
  // Each rank's vocabulary columns, gathered side by side on every rank.
  TROUPE_CHECK(n <= logits_part_.rows);
  ops_.linear(hidden, lm_head_, nullptr, logits_part_.row_slice(0, n));
  comm_->all_gather_cols(logits_part_.row_slice(0, n), out.row_slice(0, n));
}

}  // namespace troupe
