// llama_model: the one definition of the Llama family (Llama, Mistral, Qwen2,
// Qwen3, and the mixture-of-experts Qwen2-MoE, Qwen3-MoE and Mixtral),
// written against the ops interface so every backend runs the same code.
// Qwen2 adds q/k/v biases, Qwen3 adds per-head q/k RMSNorm, the MoE models
// route each token of a sparse layer to its top-k experts (ops::moe_mlp,
// on a backend that supports_moe()), Qwen2-MoE adds a shared expert behind
// a sigmoid gate; the rest is configuration.
//
// Owns its weights and activation workspace (in the backend's memory, sized
// for `max_num_tokens` tokens a step) and the RoPE tables. Runs on the
// worker's thread only. The KV cache is owned by the caller (the worker).
//
// Tensor parallelism: as rank r of a communicator's T ranks, the model
// holds rank r's part of every weight (model/tp_layout.h) and sums the
// row-parallel products (o_proj, down_proj) and a vocabulary-parallel
// embedding across the ranks, and gathers vocabulary-parallel logits, so
// each rank's forward and compute_logits give what one rank holding
// everything would (float sums in rank order). Every rank must run the
// same forwards and compute_logits in the same order.
//
// Pipeline parallelism: as stage s of P, the model holds the layers
// pipeline_stage_layers gives it (the first stage the embedding, the last
// the final norm and LM head); a forward of a stage after the first
// receives the previous stage's hidden states and residual, and a stage
// before the last sends its own on. Only the last stage computes logits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "kernels/ops.h"
#include "model/expert_counts.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"
#include "model/tp_layout.h"
#include "model/weight_offload.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace troupe {

// Where weights come from: a checkpoint, or dummy values from a seed; and
// how many bytes of them stay in host memory.
struct weight_source {
  const checkpoint* ckpt = nullptr;  // null: dummy weights
  int64_t dummy_seed = 0;
  dtype compute_type = dtype::f32;  // weights, activations and KV cache
  // cpu_offload_gb, in bytes: whole decoder layers from the stage's first
  // keep their weights in pinned host memory, copied to a device staging
  // buffer before each runs (model/weight_offload.h); 0: none.
  int64_t cpu_offload_bytes = 0;
};

// Where this model sits in a tensor- and pipeline-parallel layout (one
// rank of one stage by default). The groups outlive the model.
struct model_parallel {
  communicator* tp = nullptr;  // its tensor-parallel group (null: one rank)
  // Its pipeline: stage s of P is rank s of this group (null: one stage).
  communicator* pp = nullptr;
  // compute_logits' largest n when the logits are gathered across ranks
  // (a workspace for the rank's columns).
  int64_t max_logits_rows = 0;
};

// One step's inputs, in backend memory (see ops.h).
struct forward_inputs {
  int64_t num_tokens = 0;
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* slot_mapping = nullptr;  // [num_tokens], -1 = do not cache
  attention_metadata attention;
  // With LoRA enabled: the tokens' adapter slots (-1: the base model),
  // required then, ignored otherwise.
  lora_batch lora;
  // Whether any token has an adapter (host). False: the forward leaves
  // the LoRA kernels out (they would add nothing). A forward captured into
  // a graph that later steps replay with adapters must keep it true.
  bool any_lora = true;
};

class llama_model {
 public:
  // Loads (or generates) every weight, this rank's part of each under
  // tensor parallelism, reporting progress through `progress` (tensors
  // done, tensors total). Errors name the tensor and file.
  static result<std::unique_ptr<llama_model>> create(
      const model_config& config, ops& backend, const weight_source& source,
      int64_t max_num_tokens, int64_t max_position, const model_parallel& parallel = {},
      const std::function<void(int64_t, int64_t)>& progress = {});

  // What create allocates for a rank of pipeline stage `stage` of
  // `stages` (LoRA slots aside), in bytes: the memory plan without a
  // backend (`troupe serve --dry-run`).
  struct footprint {
    int64_t weights = 0;    // on the device (with cpu_offload_bytes: the staging buffer, not the offloaded layers)
    int64_t workspace = 0;  // activations, the logits' gather part, the RoPE tables
    int64_t host_weights = 0;  // the offloaded layers' arenas in host memory
  };
  // `packed`: the dense products' weights packed (packs()).
  static footprint memory_footprint(const model_config& config, const tp_layout& layout,
                                    int stage, int stages, dtype type, int64_t max_num_tokens,
                                    int64_t max_position, int64_t max_logits_rows,
                                    int64_t cpu_offload_bytes = 0, bool packed = false);
  // Whether a model of `config` on a rank of `layout` keeps its GPTQ / AWQ
  // weights packed (model/llama_model_packed.cpp): on a backend that packs
  // them (ops::packs_weights), one tensor-parallel rank, no offload, and
  // inputs the packed layout takes; otherwise `why` says which is missing
  // and the weights are dequantized to floats at load.
  static bool packs(const model_config& config, const tp_layout& layout, int64_t cpu_offload_bytes,
                    bool backend_packs, std::string* why = nullptr);
  // Whether this model's dense products read packed weights.
  bool packed() const { return packed_; }
  // The weight elements of decoder layer `layer` (global index) on a rank
  // of `layout`.
  static int64_t layer_weight_elements(const model_config& config, const tp_layout& layout, int64_t layer);
  // The bytes of each of `layers`' weights on a rank of `layout`.
  static std::vector<int64_t> layer_weight_bytes(const model_config& config, const tp_layout& layout,
                                                 const stage_layers& layers, dtype type, bool packed = false);
  // Which of this stage's layers are offloaded (cpu_offload_bytes).
  const offload_plan& offload() const { return offload_; }

  // The whole model's configuration (logits are [n, vocab_size] on every rank).
  const model_config& config() const { return config_; }
  const tp_layout& layout() const { return layout_; }
  int64_t max_num_tokens() const { return max_num_tokens_; }

  // KV cache geometry: columns of one K (or V) row (this rank's KV heads).
  int64_t kv_cols() const { return layout_.kv_heads * config_.head_dim; }
  // The layers this stage holds (forward takes one cache entry each).
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  const stage_layers& stage() const { return stage_; }
  bool is_last_stage() const { return pp_ == nullptr || pp_->rank() == pp_->size() - 1; }
  int num_stages() const { return pp_ == nullptr ? 1 : pp_->size(); }
  // The element type of weights, activations and (kv_cache_dtype auto) the KV cache.
  dtype compute_type() const { return type_; }
  // Layer `layer` (of this stage)'s per-tensor K and V scales for an FP8
  // KV cache: the checkpoint's `model.layers.L.self_attn.k_scale` and
  // `v_scale` (vLLM's names) where it has them, else 1.0.
  std::pair<float, float> kv_scales(int64_t layer) const { return kv_scales_[static_cast<size_t>(layer)]; }

  // Runs every layer for the step's tokens, writing their K/V into `cache`
  // (one entry per layer). Leaves the final normed hidden states inside.
  // REQUIRES: inputs.num_tokens <= max_num_tokens().
  void forward(const forward_inputs& inputs, const std::vector<kv_cache_layer>& cache);
  // A captured forward of `num_tokens` tokens was replayed (backend graphs):
  // compute_logits reads its hidden states.
  void replayed(int64_t num_tokens) { last_num_tokens_ = num_tokens; }

  // LoRA (model/llama_model_lora.cpp; one rank only): device slots for up to `max_loras`
  // adapters of rank <= max_rank on all seven projections of every layer
  // (zeros where an adapter leaves a module alone). Once, before forward;
  // every forward then adds each token's adapter delta (inputs.lora_slots)
  // before the fused epilogues (RoPE and the KV write, SiLU-and-mul),
  // running the products unfused.
  void enable_lora(int64_t max_loras, int64_t max_rank);
  bool lora_enabled() const { return lora_slots_ > 0; }
  int64_t max_loras() const { return lora_slots_; }
  // Copies `adapter` (rank <= max_rank) into slot `slot`. The caller makes
  // sure no step in flight reads the slot.
  void load_lora(int64_t slot, const lora_adapter& adapter);
  void clear_lora(int64_t slot);  // zeros: the slot adds nothing

  // Per-expert routing counts (ops::moe_counts): once, before any forward
  // pass is captured into a graph; every forward then tallies, per sparse
  // layer this stage holds, the experts its tokens (not a graph's padding:
  // slot -1) are routed to. Nothing on a model without experts.
  void enable_expert_counts();
  bool expert_counts_enabled() const { return expert_counts_ != nullptr; }
  // The tallies so far (waits for the queued kernels); empty when not enabled.
  expert_counts read_expert_counts();

  // Logits of hidden rows `row_indices` (backend memory) of the last
  // forward, or of rows 0 .. n - 1 when row_indices is null (no gather):
  // out is [n, vocab]. REQUIRES: n <= the last forward's num_tokens; the
  // last pipeline stage.
  void compute_logits(const int32_t* row_indices, int64_t n, const tensor& out);

 private:
  void fill_lora(int64_t slot, const lora_adapter* adapter);  // null: zeros
  status read_kv_scales(const checkpoint* ckpt);
  struct layer_weights {
    tensor input_norm, post_attention_norm;
    // q, k and v stacked: [(heads + 2 kv_heads) * head_dim, hidden], one GEMM.
    tensor qkv_proj, o_proj;
    tensor qkv_bias;                // Qwen2 only, stacked the same way
    tensor q_norm, k_norm;          // Qwen3 only
    tensor gate_up_proj, down_proj;  // gate and up stacked: [2 * intermediate, hidden]
    // A mixture-of-experts layer (is_moe_layer) instead: the router [E,
    // hidden], every expert's gate and up rows stacked [E * 2I, hidden]
    // and its down rows [E * hidden, I] (ops::moe_mlp).
    bool moe = false;
    tensor router, experts_gate_up, experts_down;
    // Qwen2-MoE's shared expert beside them: gate and up rows stacked
    // [2 * shared, hidden], down [hidden, shared], and its gate [1, hidden].
    tensor shared_gate_up, shared_down, shared_gate;
  };
  struct workspace {
    tensor hidden, residual, normed, qkv, q, attn, gate_up, act, selected;
    tensor router_logits;  // [tokens, experts], mixture-of-experts models only
    // The shared expert's products (Qwen2-MoE only): [tokens, 2 * shared],
    // [tokens, shared], [tokens, hidden] and its gate's logit [tokens, 1].
    tensor shared_gate_up, shared_act, shared_out, shared_gate;
    tensor lora_u;  // float32 [tokens, ops::lora_scratch_cols(3, ..)]: lora_add's scratch
  };

  llama_model(const model_config& config, ops& backend, int64_t max_num_tokens, dtype type,
              tp_layout layout, const model_parallel& parallel);
  status load_weights(const weight_source& source,
                      const std::function<void(int64_t, int64_t)>& progress);
  void allocate_logits_workspace(int64_t max_logits_rows);
  void allocate_workspace();
  void build_rope(int64_t max_position);
  void run_layer(size_t layer, const forward_inputs& in, const kv_cache_layer& cache);
  // Offloading (model/llama_model_offload.cpp): plans the stage's layers;
  // a weight tensor, in the arena of the layer being loaded when it is
  // offloaded (begin_layer), else on the device; the offloaded layers'
  // device twins once every weight is in place; the weights layer `layer`
  // runs with (an offloaded layer's copied into the staging buffer first).
  void plan_layer_offload(int64_t cpu_offload_bytes);
  void begin_layer(size_t layer);
  tensor alloc_weight(int64_t rows, int64_t cols);
  void finish_offload();
  // Packed weights (model/llama_model_packed.cpp): a dense product's
  // weight, packed when packed_; the bytes packing adds to layer `layer`
  // (negative: saves); a packed load from the checkpoint (or dummy codes
  // when ckpt is null), act-order permutations by tensor in `perms`.
  // A product of stacked parts (q/k/v: their rows) has an act-order
  // permutation per part, loaded in part order; settle_packed_parts makes
  // those whose parts agree one part.
  using packed_perms = std::map<const int32_t*, std::vector<std::vector<int32_t>>>;
  tensor alloc_linear(const std::vector<int64_t>& part_rows, int64_t cols);
  static int64_t packed_linear_bytes(const model_config& config, const tp_layout& layout, int64_t layer,
                                     dtype type);
  // The largest packed product's weight elements and inputs on a rank
  // (ops::reserve_packed).
  static std::pair<int64_t, int64_t> packed_scratch_shape(const model_config& config, const tp_layout& layout);
  status load_packed(const checkpoint* ckpt, const std::string& name, const tensor& dst, int64_t seed,
                     packed_perms& perms);
  // An FP8 linear: the checkpoint's codes and scales (or a float
  // checkpoint's quantized), or dummy ones.
  status load_fp8(const checkpoint* ckpt, const std::string& name, const tensor& dst, int64_t seed);
  void settle_packed_parts(const packed_perms& perms);
  const layer_weights& weights_for_run(size_t layer);
  // Sums x across the tensor-parallel ranks (nothing with one rank).
  void all_reduce(const tensor& x);
  // out = x w^T, plus the deltas when `lora` is given (ops::linear_lora).
  void linear(const tensor& x, const tensor& w, const tensor& out, const lora_delta* lora);
  // The layer's deltas of `count` consecutive lora_target values from
  // `first` (side by side in the product's output: ops::lora_delta).
  lora_delta lora_of(size_t layer, lora_target first, int count, const forward_inputs& in) const;

  model_config config_;
  ops& ops_;
  tp_layout layout_;
  communicator* comm_;  // tensor-parallel group, null: one rank
  communicator* pp_;    // pipeline, null: one stage
  stage_layers stage_;  // the layers held (global indices)
  tensor logits_part_;  // [max_logits_rows, layout_.vocab]: this rank's columns, to gather
  int64_t max_num_tokens_;
  dtype type_;
  bool packed_ = false;
  tensor embed_tokens_, final_norm_, lm_head_;
  std::vector<layer_weights> layers_;
  offload_plan offload_;
  std::vector<tensor> offload_arenas_;   // per layer: host arena, or empty
  std::vector<layer_weights> staged_;    // per layer: the twin in staging_ (offloaded ones)
  tensor staging_;                       // device: one offloaded layer's arena
  char* arena_next_ = nullptr;           // while an offloaded layer's weights are allocated
  char* arena_end_ = nullptr;
  rope_tables rope_;
  workspace ws_;
  int64_t last_num_tokens_ = 0;
  // LoRA: [layer * num_lora_targets + target] stacks of lora_slots_ slots.
  int64_t lora_slots_ = 0, lora_rank_ = 0;
  std::vector<lora_stack> lora_;
  // enable_expert_counts: [sparse layer * num_experts] counters, and each
  // held layer's row (-1: dense).
  std::vector<std::pair<float, float>> kv_scales_;  // per layer held: K, V
  int32_t* expert_counts_ = nullptr;
  std::vector<int64_t> expert_count_rows_;
};

}  // namespace troupe
