// cuda_ops: the ops interface on one CUDA device. Device memory from
// cudaMalloc (owned, freed with the object), one stream, cuBLAS for the dense
// GEMMs (float32 compute; strict float32 without TF32 for float32 tensors),
// troupe's kernels for the rest. Used from one thread (the worker's); no op
// allocates or synchronises: a forward pass is a fixed launch sequence.
//
// Compiled by g++ (not nvcc): it only calls the kernels' host launchers.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace troupe {

namespace cuda {
struct gemv_lora;  // kernels/cuda/gemm/gemv.h
}

class cuda_ops final : public ops {
 public:
  // REQUIRES: device < number of visible devices.
  explicit cuda_ops(int device, int64_t max_num_tokens);
  void bind_thread() override;
  // The stream every op is enqueued on (a NCCL group's collectives join it).
  cudaStream_t stream() const;
  // Reserves the split-KV decode attention's workspace for batches of up to
  // max_num_seqs sequences with num_heads query heads of head_dim (called
  // once at start-up, before any forward pass or graph capture; growing it
  // later frees the old buffer after a device synchronisation). Without it,
  // decodes run unsplit: correct, slower for small batches.
  void reserve_attention_workspace(int64_t max_num_seqs, int64_t num_heads, int64_t head_dim);
  // Sizes device sampling's buffers for up to rows_per_call rows a
  // sample_async call and rows_per_step rows a step (and the gather of as
  // many sampled tokens), so that they need not grow, which waits for the
  // stream, while serving. Larger steps (many prompt-logprob rows) and
  // long penalty id lists still grow them. Called once at start-up.
  void reserve_sampling(int64_t rows_per_call, int64_t rows_per_step, int64_t vocab);
  // Sizes each step slot's pinned input staging (see upload_ints) to
  // `bytes`, so that it need not grow (a page-locked allocation, which
  // synchronises) while serving. Called once at start-up.
  void reserve_staging(size_t bytes);
  // The heads of a fused q/k/v product (qkv_linear_rope_cache), whose
  // decode shapes are tuned with the RoPE epilogue.
  struct rope_heads {
    int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  };
  // Which kernel computes this product now ("cuBLAS" or a GEMV variant;
  // with `gated`, gated_linear's: "cuBLAS" (then silu_and_mul) or a
  // GEMV-GLU variant; with `rope`, qkv_linear_rope_cache's: "cuBLAS" (then
  // the separate kernels) or a GEMV-GLU table variant with the RoPE
  // epilogue), without tuning (for tests and logs).
  std::string product_kernel(const tensor& x, const tensor& w, const tensor& out,
                             bool gated = false, const rope_heads* rope = nullptr);
  ~cuda_ops() override;
  cuda_ops(const cuda_ops&) = delete;
  cuda_ops& operator=(const cuda_ops&) = delete;

  backend_kind kind() const override { return backend_kind::cuda; }

  tensor alloc(dtype type, int64_t rows, int64_t cols) override;
  tensor alloc_host(dtype type, int64_t rows, int64_t cols) override;
  int32_t* alloc_ints(int64_t n) override;
  void upload(const float* host, const tensor& dst) override;
  void upload_cols(const float* host, const tensor& dst, int64_t col0, int64_t cols) override;
  void upload_ints(const int32_t* host, int32_t* dst, int64_t n) override;
  void download_ints(const int32_t* src, int32_t* host, int64_t n) override;
  bool packs_weights(const quant_config& q, dtype type) const override;
  bool packs_for_tensor_cores() const override;
  void upload_bytes(const void* host, void* dst, size_t bytes) override;
  void fill_dummy_packed(const tensor& dst, uint64_t key, float scale) override;
  void reserve_packed(int64_t max_elements, int64_t max_cols, dtype type) override;
  void reserve_fp8(int64_t max_rows, int64_t max_cols) override;
  void download(const tensor& src, float* host) override;
  void fill_dummy(const tensor& dst, uint64_t key, float scale, float offset) override;
  void synchronize() override;

  void copy(const tensor& src, const tensor& dst) override;
  void embedding(const int32_t* token_ids, int64_t num_tokens, const tensor& table,
                 int64_t first_row, const tensor& out) override;
  void rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out) override;
  void add_rms_norm(const tensor& residual, const tensor& x, const tensor& w, float eps,
                    const tensor& out) override;
  void head_rms_norm(const tensor& x, int64_t head_dim, const tensor& w, float eps) override;
  void linear(const tensor& x, const tensor& w, const tensor* bias, const tensor& out) override;
  void rope(const tensor& q, const tensor& k, const int32_t* positions, int64_t head_dim,
            const rope_tables& tables) override;
  void qkv_rope_cache(const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, const tensor* q_norm, const tensor* k_norm, float eps,
                      const int32_t* positions, const rope_tables& tables,
                      const int32_t* slot_mapping, const kv_cache_layer& cache,
                      const tensor& q_out) override;
  void write_kv_cache(const tensor& k, const tensor& v, const int32_t* slot_mapping,
                      const kv_cache_layer& cache) override;
  void paged_attention(const tensor& q, const kv_cache_layer& cache,
                       const attention_metadata& meta, int64_t num_heads,
                       int64_t num_kv_heads, int64_t head_dim, float scale,
                       const tensor& out) override;
  void silu_and_mul(const tensor& gate_up, const tensor& out) override;
  void add_sigmoid_gated(const tensor& x, const tensor& gate, const tensor& out) override;
  void gated_linear(const tensor& x, const tensor& w, const tensor& gate_up, const tensor& out,
                    const lora_delta* lora) override;
  bool supports_moe() const override { return true; }
  void reserve_moe(const moe_shape& shape, dtype type) override;
  void moe_mlp(const tensor& x, const tensor& router_logits, const tensor& gate_up, const tensor& down,
               int64_t num_experts, int64_t top_k, bool renormalize, const tensor& out,
               const moe_counts& counts = {}) override;
  int64_t lora_scratch_cols(int count, int64_t slots, int64_t rank) const override;
  void linear_lora(const tensor& x, const tensor& w, const tensor* bias, const lora_delta& lora,
                   const tensor& out) override;
  void lora_add(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                const tensor& scratch, const tensor& out, int64_t col0) override;
  void qkv_linear_rope_cache(const tensor& x, const tensor& w, const tensor* bias,
                             const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                             int64_t head_dim, const tensor* q_norm, const tensor* k_norm,
                             float eps, const int32_t* positions, const rope_tables& tables,
                             const int32_t* slot_mapping, const kv_cache_layer& cache,
                             const tensor& q_out, const lora_delta* lora) override;
  void gather_rows(const tensor& x, const int32_t* indices, int64_t n,
                   const tensor& out) override;
  void copy_kv_blocks(const kv_cache_layer& src, const kv_cache_layer& dst,
                      const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                      int64_t block_size) override;

  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  void end_capture(int64_t id) override;
  void launch_graph(int64_t id) override;
  void allow_tuning(bool on) override;
  std::string tuning_report() const override;
  void keep_rows_consistent(bool on) override;
  void step_begin(int64_t step) override;
  void step_launched(int64_t step) override;
  void step_end(int64_t step) override;
  timeline device_timeline() const override;
  std::string op_profile() const override;
  bool samples_async() const override { return true; }
  bool launches_async() const override { return true; }
  bool sample_async(const tensor& logits, const std::vector<sample_job>& jobs, int64_t step,
                    int64_t first) override;
  void sample_results(int64_t step, int64_t first, int64_t n,
                      std::vector<sample_result>& out) override;
  void gather_sampled(int32_t* dst, const int32_t* rows, const int32_t* src, int64_t n) override;

  struct impl;  // defined in cuda_ops.cpp (named by its helpers there)

 private:
  // A product: the tuned choice for its shape (decode GEMV or cuBLAS),
  // cuBLAS when untuned.
  void gemm(const tensor& x, const tensor& w, const tensor& out);
  void gemm_cublas(const tensor& x, const tensor& w, const tensor& out);
  // out[m, n] (row stride ldo) = x[m, k] (ldx) w[n, k]^T (ldw) + beta out.
  void gemm_cublas(dtype in_type, dtype out_type, const void* x, int64_t ldx, const void* w,
                   int64_t ldw, void* out, int64_t ldo, int64_t m, int64_t n, int64_t k, float beta);
  // lora_add, or with accumulate false (the dense path only) out's
  // modules' columns set to the deltas.
  void lora_apply(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                  const tensor& scratch, const tensor& out, int64_t col0, bool accumulate);
  // Whether a decode product x w^T takes these deltas inside its GEMV
  // (where the tuning gave the shape a GEMV): up to gemv_max_rows tokens
  // of bf16/f16, the modules' lora_B rows side by side making w's rows
  // (TROUPE_LORA_GEMV=0: never; docs/lora.md).
  bool lora_in_gemv(const tensor& x, const tensor& w, const lora_delta& lora) const;
  // The shrink (u for every token with a slot) for a GEMV that adds the
  // expand itself; `tail` gets the GEMV's LoRA argument.
  void lora_gemv(const tensor& x, const lora_delta& lora, cuda::gemv_lora& tail);
  // Whether n tokens over stacks like w run dense (kernels/cuda/lora/sgmv.h,
  // lora_dense_max_cols; TROUPE_LORA_DENSE=0: never).
  bool lora_runs_dense(int64_t n, const lora_stack& w) const;
  // lora_apply's dense path: out = deltas + beta out.
  void lora_add_dense(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                      const tensor& scratch, const tensor& out, int64_t col0, float beta);
  // The choice for this shape, tuned now when tuning is allowed and the
  // shape is new: -1 cuBLAS, else a GEMV variant. With `gated`
  // (gated_linear; out is [m, w.rows / 2]): -1 cuBLAS then silu_and_mul,
  // else a GEMV-GLU variant. With `rope` (qkv_linear_rope_cache; out is
  // the [m, w.rows] product): -1 cuBLAS then the separate kernels, else a
  // GEMV-GLU table variant run with the RoPE epilogue
  // (gemv_qkv_rope_cache), timed as that.
  int gemm_choice(const tensor& x, const tensor& w, const tensor& out, bool gated = false,
                  const rope_heads* rope = nullptr);
  // A product with a packed weight (kernels/cuda/cuda_quant.cpp): the
  // tensor-core kernel (up to cuda::packed_mma_rows rows) or the GEMV
  // (row layout, up to cuda::packed_gemv_rows) for bf16/f16 (act-order: x
  // permuted first, part by part), else the weight dequantized into the
  // scratch and a cuBLAS product; batch invariance: the kernels in
  // launches of up to their rows.
  void packed_linear(const tensor& x, const tensor& w, const tensor& out);
  // A product with an FP8 weight (kernels/cuda/cuda_fp8.cpp): x quantized
  // (per token, per 128 inputs for block scales), then the float8 mma
  // kernel for up to packed_kernel_rows rows (and always with batch
  // invariance: its sums for a row do not depend on the other rows), else
  // cuBLASLt's block-scaled FP8 GEMM (the kernel where cuBLASLt has no
  // algorithm for the shape).
  void fp8_linear(const tensor& x, const tensor& w, const tensor& out);
  // fill_dummy_packed of an FP8 weight.
  void fill_dummy_fp8(const tensor& dst, uint64_t key, float scale);
  // out = x w^T through cuBLASLt for the quantized x in the FP8 scratch;
  // false where it has no algorithm for the shape.
  bool fp8_cublaslt(const tensor& x, const tensor& w, const tensor& out);
  // Batch invariance: a product of more than gemv_max_rows rows that runs
  // as launches of gemv_max_rows rows each.
  bool runs_in_row_chunks(const tensor& x, const tensor& w) const;
  std::unique_ptr<impl> impl_;
};

// Visible CUDA devices (0 without a driver or device).
int cuda_device_count();

}  // namespace troupe
