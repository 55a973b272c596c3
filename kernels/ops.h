// ops: the operator interface a model definition is written against. The CPU
// backend (kernels/cpu) implements it now; the CUDA backend implements the
// same interface with device memory and a stream.
//
// Memory: every tensor and index buffer passed in lives in the backend's own
// memory (host memory for cpu, device memory for cuda), allocated through
// alloc()/alloc_ints() and owned by the backend until it is destroyed. No op
// allocates or synchronises with the host: a forward pass is a fixed sequence
// of launches (CUDA-graph capturable).
//
// Layout: tensors are row-major 2-D [rows, cols]. Attention heads are packed
// in the columns: q is [num_tokens, num_heads * head_dim].
#pragma once

#include <algorithm>
#include <cstdint>

#include <string>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/sampler.h"  // sampler_row, sample_result
#include "model/weights.h"  // dtype

namespace troupe {

// A GPTQ / AWQ / FP8 linear's weight kept packed in backend memory (where
// ops::packs_weights says so). GPTQ / AWQ in model/quant_pack.h's layout: row o's
// 4- or 8-bit codes, a float16 scale and a uint8 zero per group of
// group_size packed columns, and act-order's input permutation.
struct packed_parts {
  int bits = 0;  // 0: the tensor is not packed
  int64_t group_size = 0;
  uint32_t* words = nullptr;      // [rows, cols * bits / 32]
  uint16_t* scales = nullptr;     // float16 [rows, groups]
  uint8_t* zeros = nullptr;       // [rows, groups]
  // Act-order: packed column j of a row in part p is input perm[p * cols +
  // j] (null: j). Products stacked in one weight (q/k/v, gate/up) whose
  // checkpoints permute their inputs differently are parts: part p holds
  // rows [part_end[p - 1], part_end[p]) (part_end[-1] = 0); one part: all.
  const int32_t* perm = nullptr;
  int parts = 1;
  int64_t part_end[3] = {};
  bool mma = false;  // words in quant_pack.h's tensor-core layout
  // FP8 (model/fp8_linear.h; bits 8): `words` holds the e4m3 codes row by
  // row ([rows, cols] bytes), fp8_scales one float32 a block of block_out
  // x block_in weights, [ceil(rows / block_out), scale_stride]; no
  // scales, zeros or perm.
  bool fp8 = false;
  float* fp8_scales = nullptr;
  int64_t block_out = 0, block_in = 0, scale_stride = 0;
  int64_t groups(int64_t cols) const { return (cols + group_size - 1) / group_size; }
  int64_t words_per_row(int64_t cols) const { return cols * bits / 32; }
};

struct tensor {
  void* data = nullptr;
  dtype type = dtype::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  // A packed weight (data null): [rows, cols] is the logical weight, of
  // `type` once dequantized.
  packed_parts packed{};

  bool is_packed() const { return packed.bits != 0; }
  int64_t numel() const { return rows * cols; }
  float* f32() const { return static_cast<float*>(data); }
  // A view of rows [begin, begin + count).
  tensor row_slice(int64_t begin, int64_t count) const {
    TROUPE_CHECK(begin >= 0 && begin + count <= rows);
    tensor t = *this;
    t.rows = count;
    if (is_packed() && packed.fp8) {  // (parts begin on a block of scales)
      TROUPE_CHECK(begin % packed.block_out == 0);
      t.packed.words += begin * packed.words_per_row(cols);
      t.packed.fp8_scales += begin / packed.block_out * packed.scale_stride;
      return t;
    }
    if (is_packed()) {  // (the act-order parts stay the whole tensor's: loading only)
      t.packed.words += begin * packed.words_per_row(cols);
      t.packed.scales += begin * packed.groups(cols);
      t.packed.zeros += begin * packed.groups(cols);
      return t;
    }
    t.data = static_cast<char*>(data) + begin * cols * static_cast<int64_t>(dtype_size(type));
    return t;
  }
};

// Paged KV cache of one layer: K and V are each [num_blocks * block_size,
// num_kv_heads * head_dim]; slot s = block_id * block_size + offset. Of the
// compute type, or fp8_e4m3 (kv_cache_dtype fp8: a value x is stored as
// f32_to_e4m3(x / scale) and read as e4m3_to_f32(code) * scale, with the
// layer's per-tensor k_scale / v_scale).
struct kv_cache_layer {
  tensor k;
  tensor v;
  float k_scale = 1.0f, v_scale = 1.0f;
  bool fp8() const { return k.type == dtype::fp8_e4m3; }
};

// Where each sequence of a batch is, for attention. All pointers are backend
// memory; the scalars are host values.
struct attention_metadata {
  int64_t num_seqs = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] offsets into tokens
  const int32_t* seq_lens = nullptr;  // [num_seqs] context length incl. this step
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  int64_t max_query_len = 0;
  int64_t max_seq_len = 0;
};

// One LoRA target module's weights for every adapter slot (ops::lora_add):
// a is [slots * rank, in] (slot s: rows s * rank ..), b is [out, slots *
// rank] (slot s: columns s * rank ..), both of the compute type. So b is
// one matrix over every slot's rank dimensions, and a backend may expand
// all slots in one dense product (a token's other slots' u set to zero).
struct lora_stack {
  tensor a, b;
  int64_t slots = 0;
  int64_t rank = 0;
};

// A step's tokens by LoRA adapter slot (ops::lora_add), backend memory,
// built by the caller for the step's n tokens and `slots` slots.
struct lora_batch {
  const int32_t* token_slots = nullptr;    // [n]: each token's slot, -1: none
  // [n]: token indices grouped by slot (slot 0's in order, then slot 1's,
  // ...), the tokens without a slot last.
  const int32_t* sorted_tokens = nullptr;
  // [slots + 1]: slot s's tokens are sorted_tokens[slot_starts[s] ..
  // slot_starts[s + 1]).
  const int32_t* slot_starts = nullptr;
};

// The LoRA deltas of a product (ops::linear_lora, gated_linear,
// qkv_linear_rope_cache): lora_add's arguments for `count` modules that
// read the product's x and write its output side by side from column 0
// (stacks[m]: module m; their widths sum to the product's rows).
struct lora_delta {
  const lora_stack* stacks = nullptr;
  int count = 0;
  lora_batch batch;
  tensor scratch;  // lora_add's
};

// A lora_batch's host side: `sorted` gets the token indices grouped by slot
// (a stable counting sort; -1 tokens last), `starts` the slots + 1 offsets.
inline void sort_tokens_by_slot(const std::vector<int32_t>& token_slots, int32_t slots,
                                std::vector<int32_t>& sorted, std::vector<int32_t>& starts) {
  // Counts shifted by two, summed: starts[s + 1] is slot s's first place;
  // placing advances it, leaving starts[s] = slot s's first at the end.
  auto bucket = [slots](int32_t s) { return static_cast<size_t>(s < 0 ? slots : s); };
  starts.assign(static_cast<size_t>(slots) + 3, 0);
  for (int32_t s : token_slots) ++starts[bucket(s) + 2];
  for (size_t s = 1; s < starts.size(); ++s) starts[s] += starts[s - 1];
  sorted.resize(token_slots.size());
  for (size_t t = 0; t < token_slots.size(); ++t) {
    sorted[static_cast<size_t>(starts[bucket(token_slots[t]) + 1]++)] = static_cast<int32_t>(t);
  }
  starts.resize(static_cast<size_t>(slots) + 1);
}

// Where moe_mlp counts its routing (both pointers into alloc_ints memory):
// unless `counts` is null, every token t with token_slots[t] >= 0 (every
// token when token_slots is null) adds one to counts[e] for each expert e
// it is routed to. The counters are uint32 in int32 storage and wrap;
// readers take differences modulo 2^32 (the stats line's per-interval
// counts). token_slots is the forward pass's slot mapping, whose -1 rows
// are a CUDA graph's padding, not tokens.
struct moe_counts {
  int32_t* counts = nullptr;
  const int32_t* token_slots = nullptr;
};

// A mixture-of-experts MLP's sizes (ops::reserve_moe).
struct moe_shape {
  int64_t max_tokens = 0, num_experts = 0, top_k = 0, inter = 0, hidden = 0;
};

// The scratch a backend with MoE kernels reserves for it (the memory plan
// counts it): per slot (token x routed expert) the act and y rows in the
// model's type, an id, a weight and a sorted entry, plus the per-expert
// offsets and the tiles of moe_tile_slots slots a grouped product runs.
constexpr int64_t moe_tile_slots = 64;
// The most experts and the largest top-k a model may have (the CUDA
// router's limits; the model refuses more at load).
constexpr int64_t moe_max_experts = 512, moe_max_top_k = 32;
inline int64_t moe_scratch_bytes(const moe_shape& s, dtype type) {
  const int64_t slots = s.max_tokens * s.top_k;
  const int64_t tiles = (slots + moe_tile_slots - 1) / moe_tile_slots + std::min(s.num_experts, slots);
  const int64_t ints = slots /* ids */ + (s.num_experts + 1) + slots + 2 * tiles + 1;
  constexpr int64_t alignment = 4 * 256;  // each of the four parts starts 256-byte aligned
  return slots * (s.inter + s.hidden) * static_cast<int64_t>(dtype_size(type)) + slots * 4 /* weights */ +
         ints * 4 + alignment;
}

// The scratch a backend with packed products reserves (ops::reserve_packed;
// the memory plan counts it): a weight dequantized to `type` for products
// of more rows than the packed kernels take, and act-order's permuted
// inputs for up to packed_kernel_rows rows.
constexpr int64_t packed_kernel_rows = 16;
inline int64_t packed_scratch_bytes(int64_t max_elements, int64_t max_cols, dtype type) {
  return (max_elements + packed_kernel_rows * max_cols) * static_cast<int64_t>(dtype_size(type)) + 256;
}
// FP8 products' scratch (ops::reserve_fp8): activations quantized for up
// to max_rows rows of max_cols inputs, their codes and a float32 scale
// each 128 inputs (at most).
inline int64_t fp8_scratch_bytes(int64_t max_rows, int64_t max_cols) {
  return max_rows * max_cols + max_rows * ((max_cols + 127) / 128) * 4 + 512;
}

// RoPE tables, [max_position, head_dim / 2] each, built on the host by the
// model (which knows the scaling rule) and uploaded once.
struct rope_tables {
  tensor cos;
  tensor sin;
};

enum class backend_kind { cpu, cuda };

class ops {
 public:
  virtual ~ops() = default;
  virtual backend_kind kind() const = 0;
  // Makes the calling thread use this backend's device (cuda: its
  // cudaSetDevice): a worker calls it before its steps, on its own thread.
  virtual void bind_thread() {}

  // Memory (owned by the backend), zero-filled.
  virtual tensor alloc(dtype type, int64_t rows, int64_t cols) = 0;
  // Host memory the device copies to and from quickly (pinned with CUDA,
  // and addressable by the device: upload, fill_dummy and copy take it):
  // the swap space, offloaded weights.
  virtual tensor alloc_host(dtype type, int64_t rows, int64_t cols) { return alloc(type, rows, cols); }
  virtual int32_t* alloc_ints(int64_t n) = 0;
  virtual void upload(const float* host, const tensor& dst) = 0;  // converts to dst.type
  // dst[:, col0 .. col0 + cols) = host [dst.rows, cols] (converted).
  virtual void upload_cols(const float* host, const tensor& dst, int64_t col0, int64_t cols) = 0;
  virtual void upload_ints(const int32_t* host, int32_t* dst, int64_t n) = 0;
  // host = src [n] (memory from alloc_ints), once the kernels queued
  // before it have run (synchronises).
  virtual void download_ints(const int32_t* src, int32_t* host, int64_t n) = 0;
  // Packed weights (GPTQ / AWQ, model/quant_pack.h; FP8,
  // model/fp8_linear.h): whether this backend computes products with
  // weights packed as `q` describes in a model of `type` (cuda: 4 or 8
  // bits, FP8 W8A8; the cpu backend dequantizes at load and answers false).
  virtual bool packs_weights(const quant_config& /*q*/, dtype /*type*/) const { return false; }
  // Whether 4-bit weights that fit it (model/quant_pack.h
  // mma_layout_fits) are packed in the tensor-core layout.
  virtual bool packs_for_tensor_cores() const { return false; }
  // Copies `bytes` raw bytes from the host into backend memory (a packed
  // weight's parts), synchronously.
  virtual void upload_bytes(const void* host, void* dst, size_t bytes) {
    (void)host, (void)dst, (void)bytes;
    TROUPE_CHECK_MSG(false, "upload_bytes on a backend without packed weights");
  }
  // dst (packed, no perm) = the round-to-nearest quantization
  // (model/quant_pack.h rtn_quantize; FP8: model/fp8_linear.h
  // fp8_quantize_blocks) of fill_dummy(key, scale, 0)'s values of its
  // [rows, cols]: dummy weights of a quantized model.
  virtual void fill_dummy_packed(const tensor& dst, uint64_t key, float scale) {
    (void)dst, (void)key, (void)scale;
    TROUPE_CHECK_MSG(false, "fill_dummy_packed on a backend without packed weights");
  }
  // Sizes the packed products' scratch for weights of up to
  // `max_elements` elements and `max_cols` inputs in a model of `type`
  // (called once by the model at load, before any forward pass or graph
  // capture; packed_scratch_bytes says how much).
  virtual void reserve_packed(int64_t /*max_elements*/, int64_t /*max_cols*/, dtype /*type*/) {}
  // The same for FP8 weights: products of up to `max_rows` rows and
  // `max_cols` inputs (fp8_scratch_bytes).
  virtual void reserve_fp8(int64_t /*max_rows*/, int64_t /*max_cols*/) {}
  virtual void download(const tensor& src, float* host) = 0;  // converts to f32
  // dst = the dummy weights of `key` (model/weights.h fill_dummy_f32),
  // computed where dst lives, converted to dst.type.
  virtual void fill_dummy(const tensor& dst, uint64_t key, float scale, float offset) = 0;
  virtual void synchronize() = 0;

  // dst = src (same shape), in order with the kernels (src may be memory
  // from alloc_host: an offloaded layer's weights).
  virtual void copy(const tensor& src, const tensor& dst) = 0;
  // out[i] = table[token_ids[i] - first_row] where the id is one of the
  // table's rows [first_row, first_row + table.rows), else zeros (a
  // vocabulary-parallel rank's part of the embedding: the ranks' outputs
  // summed give the whole; tp_layout.h).
  virtual void embedding(const int32_t* token_ids, int64_t num_tokens, const tensor& table,
                         int64_t first_row, const tensor& out) = 0;
  // out = rms_norm(x) * w, row-wise.
  virtual void rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out) = 0;
  // residual += x; out = rms_norm(residual) * w (the fused pre-norm of a block).
  virtual void add_rms_norm(const tensor& residual, const tensor& x, const tensor& w,
                            float eps, const tensor& out) = 0;
  // In place, each head_dim-wide segment of every row: x = rms_norm(x) * w.
  virtual void head_rms_norm(const tensor& x, int64_t head_dim, const tensor& w,
                             float eps) = 0;
  // out = x * w^T (+ bias), w is [out_features, in_features] as HF stores it.
  virtual void linear(const tensor& x, const tensor& w, const tensor* bias,
                      const tensor& out) = 0;
  // Rotary embedding (rotate-half / NeoX layout) of q and k in place.
  virtual void rope(const tensor& q, const tensor& k, const int32_t* positions,
                    int64_t head_dim, const rope_tables& tables) = 0;
  // Writes k and v rows to the cache at slot_mapping (slot -1: skipped).
  virtual void write_kv_cache(const tensor& k, const tensor& v, const int32_t* slot_mapping,
                              const kv_cache_layer& cache) = 0;
  // The attention block's input side in one op (fused on cuda): qkv is the
  // fused projection's output [n, (num_heads + 2 num_kv_heads) * head_dim]
  // (q heads, then k, then v). q and k heads get a per-head RMSNorm when
  // q_norm / k_norm are given (Qwen3), then RoPE; q goes to q_out [n,
  // num_heads * head_dim], k and v to the cache at slot_mapping (slot -1:
  // skipped). Equal to head_rms_norm, rope and write_kv_cache on the split
  // columns.
  virtual void qkv_rope_cache(const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                              int64_t head_dim, const tensor* q_norm, const tensor* k_norm,
                              float eps, const int32_t* positions, const rope_tables& tables,
                              const int32_t* slot_mapping, const kv_cache_layer& cache,
                              const tensor& q_out) = 0;
  // The fused projection and qkv_rope_cache in one op: qkv = x w^T (+ bias)
  // (+ the q/k/v LoRA deltas when `lora` is given), (scratch for backends
  // that take two steps; this default: linear or linear_lora, then
  // qkv_rope_cache), then as qkv_rope_cache. cuda runs decode batches
  // without q/k norms as one kernel (the product's epilogue rotates and
  // stores; with LoRA, after a shrink, the expand in the same product).
  virtual void qkv_linear_rope_cache(const tensor& x, const tensor& w, const tensor* bias,
                                     const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                                     int64_t head_dim, const tensor* q_norm, const tensor* k_norm,
                                     float eps, const int32_t* positions,
                                     const rope_tables& tables, const int32_t* slot_mapping,
                                     const kv_cache_layer& cache, const tensor& q_out,
                                     const lora_delta* lora) {
    if (lora != nullptr) {
      linear_lora(x, w, bias, *lora, qkv);
    } else {
      linear(x, w, bias, qkv);
    }
    qkv_rope_cache(qkv, num_heads, num_kv_heads, head_dim, q_norm, k_norm, eps, positions, tables,
                   slot_mapping, cache, q_out);
  }
  // Causal attention of q over the paged cache (which already holds this
  // step's keys and values: a layer's write_kv_cache for the whole batch runs
  // before its attention, which prefix-cache hits within one step rely on). GQA: query head h reads KV head h / (H / Hkv).
  virtual void paged_attention(const tensor& q, const kv_cache_layer& cache,
                               const attention_metadata& meta, int64_t num_heads,
                               int64_t num_kv_heads, int64_t head_dim, float scale,
                               const tensor& out) = 0;
  // gate_up is [n, 2 * d]: out = silu(gate_up[:, :d]) * gate_up[:, d:].
  virtual void silu_and_mul(const tensor& gate_up, const tensor& out) = 0;
  // The MLP's gated product: out = silu(x w[:d]^T) * (x w[d:]^T) for w
  // [2d, in] (gate rows, then up rows), out [n, d], the gate/up LoRA deltas
  // added to the two products first when `lora` is given. gate_up [n, 2d]
  // is scratch for backends that take two steps (this default: linear or
  // linear_lora, then silu_and_mul; cuda fuses them for decode batches
  // where that is faster).
  virtual void gated_linear(const tensor& x, const tensor& w, const tensor& gate_up,
                            const tensor& out, const lora_delta* lora) {
    if (lora != nullptr) {
      linear_lora(x, w, nullptr, *lora, gate_up);
    } else {
      linear(x, w, nullptr, gate_up);
    }
    silu_and_mul(gate_up, out);
  }
  // Qwen2-MoE's shared expert: out[i, :] += sigmoid(gate[i, 0]) * x[i, :]
  // (x and out [n, h], gate [n, c] with c >= 1: its first column), summed
  // in float32 and rounded once to out's type. x, gate and out of one type.
  virtual void add_sigmoid_gated(const tensor& x, const tensor& gate, const tensor& out) = 0;
  // Mixture-of-experts MLP (kernels/cpu/cpu_moe.h has the rules): each
  // token's router_logits row [n, E] picks top_k experts (softmax in float32,
  // renormalised when `renormalize`); out [n, h] = their weighted
  // down_e(silu(gate_e x) * up_e x), with gate_up [E * 2I, h] (expert e's
  // gate rows, then its up rows) and down [E * h, I]; `counts` (when set)
  // tallies the routing (moe_counts). Only where supports_moe() (the cpu
  // and cuda backends; the model refuses others).
  virtual bool supports_moe() const { return false; }
  // Sizes moe_mlp's scratch for steps of up to shape.max_tokens tokens:
  // called once by the model at load, before any forward pass or graph
  // capture (moe_mlp allocates nothing). A backend that needs none keeps
  // this default; cuda_ops reserves moe_scratch_bytes(shape, type).
  virtual void reserve_moe(const moe_shape& /*shape*/, dtype /*type*/) {}
  virtual void moe_mlp(const tensor& /*x*/, const tensor& /*router_logits*/, const tensor& /*gate_up*/,
                       const tensor& /*down*/, int64_t /*num_experts*/, int64_t /*top_k*/,
                       bool /*renormalize*/, const tensor& /*out*/, const moe_counts& /*counts*/ = {}) {
    TROUPE_CHECK_MSG(false, "moe_mlp on a backend without supports_moe()");
  }
  // LoRA (multi-adapter batches; Punica's shrink, then expand) for `count`
  // target modules that read the same x and write side by side in out
  // (q, k, v; gate, up; or one module): for module m (stack w[m]) and each
  // token t whose slot s = batch.token_slots[t] is >= 0,
  //   u[t, m * rank + r] = sum_k a_m[s * rank + r, k] x[t, k]      (r < rank)
  //   out[t, c_m + j] += sum_r b_m[j, s * rank + r] u[t, m * rank + r]
  // with out_m = b_m.rows, c_0 = col0, c_{m+1} = c_m + out_m; tokens with
  // slot -1 are left alone. Every stack has the same slots and rank, lora_A
  // rows and lora_B columns (scaling folded in) zero-padded to rank.
  // `scratch` is float32 with at least x.rows rows of
  // lora_scratch_cols(count, slots, rank) columns; sums in float32, out
  // rounded once to its type (u in float32 on the reference; a backend may
  // round u to the compute type, as Punica's and vLLM's kernels do).
  // `batch` also lists the tokens by slot, so that a backend reads each
  // adapter's weights once for all of its tokens.
  virtual void lora_add(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                        const tensor& scratch, const tensor& out, int64_t col0) = 0;
  // A product with LoRA deltas: out = x w^T (+ bias), then lora_add(x,
  // lora.stacks, lora.count, lora.batch, lora.scratch, out, 0) over all of
  // out's columns (the modules' widths sum to w.rows). This default runs
  // the two in that order; cuda may write the deltas first and accumulate
  // the product onto them (no second pass over out), or add them in the
  // product's epilogue (decode).
  virtual void linear_lora(const tensor& x, const tensor& w, const tensor* bias,
                           const lora_delta& lora, const tensor& out) {
    linear(x, w, bias, out);
    lora_add(x, lora.stacks, lora.count, lora.batch, lora.scratch, out, 0);
  }
  // lora_add's scratch columns (this default: u, count * rank).
  virtual int64_t lora_scratch_cols(int count, int64_t slots, int64_t rank) const {
    (void)slots;
    return count * rank;
  }
  // Copies whole KV blocks: block src_blocks[i] of `src` to block
  // dst_blocks[i] of `dst`, K and V (swapping between device and host
  // caches, copy-on-write). The index arrays are host memory.
  virtual void copy_kv_blocks(const kv_cache_layer& src, const kv_cache_layer& dst,
                              const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                              int64_t block_size) = 0;
  // out[i] = x[indices[i]]
  virtual void gather_rows(const tensor& x, const int32_t* indices, int64_t n,
                           const tensor& out) = 0;

  // Graphs (CUDA graphs; backends without them answer false and ignore the
  // rest). Between begin_capture() and end_capture(id) the backend records
  // its launches instead of running them; launch_graph(id) replays them
  // with whatever the recorded buffers hold then.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture() {}
  virtual void end_capture(int64_t /*id*/) {}
  virtual void launch_graph(int64_t /*id*/) {}
  // While on, the backend may time its alternatives for each product shape
  // it sees (cuda: its decode GEMV variants against cuBLAS) and keep the
  // fastest; the runner turns it on for the eager warm-up run before each
  // graph capture only, so serving never stops to tune.
  virtual void allow_tuning(bool /*on*/) {}
  // What tuning chose, for the start-up log (empty: nothing tuned).
  virtual std::string tuning_report() const { return {}; }
  // While on, every row of a step is computed as it would be in any other
  // step (batch invariance): a product's row in one order of sums whatever
  // the number of rows (cuda, bf16/f16: GEMV variants without a split, at
  // most gemv_max_rows rows a launch, never cuBLAS; mixture-of-experts
  // layers: the grouped GEMMs), decode attention without key splits. The
  // runner turns it on with batch_invariant: a verify step (K + 1 rows a
  // sequence) then computes what K + 1 decode steps would, bit for bit, and
  // a request's greedy output does not depend on what else runs
  // (docs/gpu.md, "Batch invariance"). Set before the warm-up. The CPU
  // backend ignores it (tests/actors/batch_invariance_test.cpp: its outputs
  // do not change with the batch).
  virtual void keep_rows_consistent(bool /*on*/) {}

  // Steps, numbered by the caller 0, 1, 2, ...: at most two launched and
  // not yet ended (async scheduling launches step k + 1 before it ends step
  // k). step_begin(k) comes before step k's first launch; step_end(k)
  // waits until step k's work and result copies are done. The device
  // timeline, for the idle-time figure: busy is the span from a step's
  // first launch to its last result, idle the gap between one step's last
  // result and the next step's first launch (host work the GPU waited
  // for: the scheduler, messages, host sampling). Zero on backends
  // without a device.
  struct timeline {
    int64_t steps = 0;
    double busy_seconds = 0;
    double idle_seconds = 0;
  };
  virtual void step_begin(int64_t /*step*/) {}
  // After the last launch of step k (its result copies included): marks
  // where the step's work ends on the device.
  virtual void step_launched(int64_t /*step*/) {}
  virtual void step_end(int64_t /*step*/) {}
  virtual timeline device_timeline() const { return {}; }
  // With TROUPE_PROFILE_OPS=1 (cuda; eager steps only, graph replays count
  // as one op): each op's device time, summed per op and shape, as a table
  // (empty otherwise). For finding where a step's time goes.
  virtual std::string op_profile() const { return {}; }

  // Sampling where the logits are (the CPU sampler's semantics), so that
  // only the results travel: one job per row to sample (or, with
  // forced_token >= 0, to take that token's logprobs: prompt logprobs).
  struct sample_job {
    sampler_row row;         // host pointers to the ids to penalize (read during the call)
    int32_t logits_row = 0;  // row of `logits`
    int32_t forced_token = -1;
  };
  // Whether sample_async works on this backend.
  virtual bool samples_async() const { return false; }
  // Whether launches return before the work is done (a device stream), so
  // that a step can overlap the host's planning of the next one.
  virtual bool launches_async() const { return false; }
  // Samples jobs as step `step`'s jobs [first, first + jobs.size()),
  // asynchronously: read the results with sample_results after
  // step_end(step). The sampled token ids also stay on the backend at those
  // indices until the next step samples, for gather_sampled. Returns false
  // when the backend cannot (the caller then downloads the rows and
  // samples on the host).
  virtual bool sample_async(const tensor& /*logits*/, const std::vector<sample_job>& /*jobs*/,
                            int64_t /*step*/, int64_t /*first*/) {
    return false;
  }
  // Results of step `step`'s jobs [first, first + n); after step_end(step).
  virtual void sample_results(int64_t /*step*/, int64_t /*first*/, int64_t /*n*/,
                              std::vector<sample_result>& /*out*/) {}
  // dst[rows[i]] = the token id the last sampling step drew at job index
  // src[i], in stream order (so a step launched before the previous one has
  // ended gets that step's tokens as its inputs). rows and src are host
  // arrays (read during the call).
  virtual void gather_sampled(int32_t* /*dst*/, const int32_t* /*rows*/, const int32_t* /*src*/,
                              int64_t /*n*/) {}
};

}  // namespace troupe
