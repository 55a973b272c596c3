// llama_model's packed weights (GPTQ / AWQ kept as the checkpoint's codes,
// model/quant_pack.h; FP8 codes and block scales, model/fp8_linear.h):
// which models pack, the bytes they take, and the packed linears'
// allocation and loading. A backend that packs
// (ops::packs_weights: cuda) holds the dense layers' seven projections
// packed; everything else (embeddings, norms, the LM head, the routers and
// experts of mixture-of-experts layers) is dequantized to floats at load.
#include "model/llama_model.h"

#include <algorithm>
#include <map>

#include "common/check.h"

namespace troupe {

bool llama_model::packs(const model_config& config, const tp_layout& layout, int64_t cpu_offload_bytes,
                        bool backend_packs, std::string* why) {
  const quant_config& q = config.quantization;
  auto no = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (!q.integer_codes() && q.kind != quant_config::method::fp8) return no("not GPTQ, AWQ or FP8");
  if (!backend_packs) return no("the backend has no packed products");
  if (layout.size > 1) return no("tensor_parallel_size > 1 (packed shards are not built yet)");
  if (cpu_offload_bytes > 0) return no("cpu_offload_gb is set");
  const int64_t h = config.hidden_size, d = config.head_dim;
  // Each product's parts (outputs, inputs): q, k and v; o; gate and up;
  // down.
  std::vector<std::pair<int64_t, int64_t>> parts = {
      {layout.q_heads * d, h}, {layout.kv_heads * d, h}, {h, layout.q_heads * d}};
  if (has_dense_mlp(config)) {
    parts.push_back({layout.intermediate, h});
    parts.push_back({h, layout.intermediate});
  }
  for (const auto& [rows, cols] : parts) {
    if (std::string reason; !packable(q, rows, cols, &reason)) return no(reason);
  }
  return true;
}

int64_t llama_model::packed_linear_bytes(const model_config& config, const tp_layout& l, int64_t layer,
                                         dtype type) {
  // The float bytes of the dense products that packing replaces, less
  // their packed bytes (negative: the saving).
  const int64_t h = config.hidden_size, d = config.head_dim;
  const int64_t q_rows = l.q_heads * d, qkv_rows = q_rows + 2 * l.kv_heads * d;
  const quant_config& q = config.quantization;
  const int64_t element = static_cast<int64_t>(dtype_size(type));
  int64_t delta = packed_bytes(q, qkv_rows, h) + packed_bytes(q, h, q_rows) -
                  (qkv_rows * h + h * q_rows) * element;
  if (!is_moe_layer(config, layer)) {
    delta += packed_bytes(q, 2 * l.intermediate, h) + packed_bytes(q, h, l.intermediate) -
             3 * l.intermediate * h * element;
  }
  return delta;
}

std::pair<int64_t, int64_t> llama_model::packed_scratch_shape(const model_config& config, const tp_layout& l) {
  const int64_t h = config.hidden_size, q_rows = l.q_heads * config.head_dim;
  const int64_t qkv_rows = q_rows + 2 * l.kv_heads * config.head_dim;
  const int64_t inter = has_dense_mlp(config) ? l.intermediate : 0;
  return {std::max({qkv_rows * h, h * q_rows, 2 * inter * h}), std::max({h, q_rows, inter})};
}

tensor llama_model::alloc_linear(const std::vector<int64_t>& part_rows, int64_t cols) {
  int64_t rows = 0;
  for (int64_t r : part_rows) rows += r;
  if (!packed_) return alloc_weight(rows, cols);
  const quant_config& q = config_.quantization;
  tensor t{nullptr, type_, rows, cols};
  packed_parts& p = t.packed;
  if (q.kind == quant_config::method::fp8) {
    p.bits = 8;
    p.fp8 = true;
    p.block_out = q.block_out;
    p.block_in = q.fp8_block_in(cols);
    p.group_size = p.block_in;
    p.scale_stride = fp8_scale_stride(q, cols);
    p.words = reinterpret_cast<uint32_t*>(ops_.alloc_ints((rows * cols + 3) / 4));
    p.fp8_scales = reinterpret_cast<float*>(ops_.alloc_ints((rows + p.block_out - 1) / p.block_out * p.scale_stride));
    return t;
  }
  p.bits = q.bits;
  p.group_size = packed_group_size(q, cols);
  const int64_t groups = p.groups(cols);
  p.words = reinterpret_cast<uint32_t*>(ops_.alloc_ints(rows * p.words_per_row(cols)));
  p.scales = reinterpret_cast<uint16_t*>(ops_.alloc_ints((rows * groups + 1) / 2));
  p.zeros = reinterpret_cast<uint8_t*>(ops_.alloc_ints((rows * groups + 3) / 4));
  p.mma = ops_.packs_for_tensor_cores() &&
          std::all_of(part_rows.begin(), part_rows.end(),
                      [&](int64_t r) { return mma_layout_fits(p.bits, r, cols, p.group_size); });
  if (q.desc_act) {
    TROUPE_CHECK(part_rows.size() <= 3);
    p.parts = static_cast<int>(part_rows.size());
    int64_t end = 0;
    for (size_t i = 0; i < part_rows.size(); ++i) p.part_end[i] = end += part_rows[i];
    p.perm = ops_.alloc_ints(p.parts * cols);
  }
  return t;
}

status llama_model::load_packed(const checkpoint* ckpt, const std::string& name, const tensor& dst,
                                int64_t seed, packed_perms& perms) {
  // Act-order: this part's permutation (the next of its tensor's parts).
  auto put_perm = [&](std::vector<int32_t> perm) {
    std::vector<std::vector<int32_t>>& parts = perms[dst.packed.perm];
    if (perm.empty()) {  // the identity
      perm.resize(static_cast<size_t>(dst.cols));
      for (int64_t i = 0; i < dst.cols; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    }
    const int64_t part = static_cast<int64_t>(parts.size());
    TROUPE_CHECK(part < dst.packed.parts);
    ops_.upload_bytes(perm.data(), const_cast<int32_t*>(dst.packed.perm) + part * dst.cols, perm.size() * 4);
    parts.push_back(std::move(perm));
  };
  if (dst.packed.fp8) return load_fp8(ckpt, name, dst, seed);
  if (ckpt == nullptr) {
    // Dummy: the float dummy values of the tensor (fill_dummy_part's
    // scale), quantized to nearest; no act-order permutation.
    if (dst.packed.perm != nullptr) put_perm({});
    ops_.fill_dummy_packed(dst, dummy_key(seed, name), 1e-3f);
    return {};
  }
  auto p = ckpt->read_packed_linear(name, dst.rows, dst.cols);
  if (!p) return std::move(p).take_error();
  const packed_parts& d = dst.packed;
  TROUPE_CHECK(p->bits == d.bits && p->group_size == d.group_size);
  if (d.mma) p.value() = to_mma_layout(std::move(p.value()));
  ops_.upload_bytes(p->words.data(), d.words, p->words.size() * 4);
  ops_.upload_bytes(p->scales.data(), d.scales, p->scales.size() * 2);
  ops_.upload_bytes(p->zeros.data(), d.zeros, p->zeros.size());
  if (d.perm != nullptr) {
    put_perm(std::move(p->perm));
  } else if (!p->perm.empty()) {
    return make_error("'" + name + "': g_idx permutes the inputs, but quantization_config says desc_act false");
  }
  return {};
}

status llama_model::load_fp8(const checkpoint* ckpt, const std::string& name, const tensor& dst, int64_t seed) {
  const packed_parts& d = dst.packed;
  if (ckpt == nullptr) {  // dummy: the float dummy values quantized a block at a time
    ops_.fill_dummy_packed(dst, dummy_key(seed, name), 1e-3f);
    return {};
  }
  auto f = ckpt->read_fp8_linear(name, dst.rows, dst.cols);
  if (!f) return std::move(f).take_error();
  ops_.upload_bytes(f->codes.data(), d.words, f->codes.size());
  // The scales' rows at their stride (padded for cuBLASLt).
  const std::vector<float> scales =
      fp8_padded_scales(f->scales, (dst.rows + d.block_out - 1) / d.block_out,
                        (dst.cols + d.block_in - 1) / d.block_in, d.scale_stride);
  ops_.upload_bytes(scales.data(), d.fp8_scales, scales.size() * 4);
  return {};
}

void llama_model::settle_packed_parts(const packed_perms& perms) {
  for (layer_weights& w : layers_) {
    for (tensor* t : {&w.qkv_proj, &w.o_proj, &w.gate_up_proj, &w.down_proj}) {
      packed_parts& p = t->packed;
      if (p.perm == nullptr) continue;
      const auto it = perms.find(p.perm);
      TROUPE_CHECK(it != perms.end() && static_cast<int>(it->second.size()) == p.parts);
      const auto& parts = it->second;
      // Parts that agree (q, k and v quantized from the same inputs'
      // statistics order them alike) run as one product.
      if (std::all_of(parts.begin(), parts.end(), [&](const auto& q) { return q == parts[0]; })) p.parts = 1;
    }
  }
}

}  // namespace troupe
