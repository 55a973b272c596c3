// cpu_ops: the float32 reference backend. Host memory, OpenBLAS for the dense
// GEMMs, OpenMP over rows / heads elsewhere. Owns every buffer it hands out
// (freed with the object). Used from one thread at a time (the worker's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace troupe {

// "OpenBLAS: <its build config>; OpenMP: N threads" (troupe version).
std::string cpu_backend_description();

class cpu_ops final : public ops {
 public:
  cpu_ops();
  backend_kind kind() const override { return backend_kind::cpu; }

  tensor alloc(dtype type, int64_t rows, int64_t cols) override;
  int32_t* alloc_ints(int64_t n) override;
  void upload(const float* host, const tensor& dst) override;
  void upload_cols(const float* host, const tensor& dst, int64_t col0, int64_t cols) override;
  void upload_ints(const int32_t* host, int32_t* dst, int64_t n) override;
  void download_ints(const int32_t* src, int32_t* host, int64_t n) override;
  void download(const tensor& src, float* host) override;
  void fill_dummy(const tensor& dst, uint64_t key, float scale, float offset) override;
  void synchronize() override {}

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
  bool supports_moe() const override { return true; }
  void moe_mlp(const tensor& x, const tensor& router_logits, const tensor& gate_up, const tensor& down,
               int64_t num_experts, int64_t top_k, bool renormalize, const tensor& out,
               const moe_counts& counts = {}) override;
  void gather_rows(const tensor& x, const int32_t* indices, int64_t n,
                   const tensor& out) override;
  void lora_add(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                const tensor& scratch, const tensor& out, int64_t col0) override;
  void copy_kv_blocks(const kv_cache_layer& src, const kv_cache_layer& dst,
                      const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                      int64_t block_size) override;

  // Sampling runs at once (the logits are host memory): results are kept
  // per step (the last three) and token ids for gather_sampled.
  bool samples_async() const override { return true; }
  bool sample_async(const tensor& logits, const std::vector<sample_job>& jobs, int64_t step,
                    int64_t first) override;
  void sample_results(int64_t step, int64_t first, int64_t n,
                      std::vector<sample_result>& out) override;
  void gather_sampled(int32_t* dst, const int32_t* rows, const int32_t* src, int64_t n) override;
  // Bytes allocated so far (tensors and index arrays; for memory-plan tests).
  int64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  static constexpr int64_t result_slots = 3;  // steps whose results are kept
  std::vector<sample_result> results_[result_slots];
  std::vector<int32_t> sampled_ids_;
  struct free_deleter {
    void operator()(void* p) const;
  };
  void* allocate_bytes(size_t bytes);
  std::vector<std::unique_ptr<void, free_deleter>> buffers_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace troupe
