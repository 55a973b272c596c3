// cuda_ops' LoRA deltas (ops::lora_add, linear_lora), by the step's
// tokens (docs/lora.md): decode products of up to cuda::gemv_max_rows
// tokens that run as a GEMV take the deltas inside it (the shrink, then
// the GEMV adds each token's expand before its epilogue: lora_gemv);
// above cuda::lora_few_tokens tokens where slots x rank is at most
// cuda::lora_dense_max_cols, dense cuBLAS products (lora_add_dense), the
// deltas written first where the base product is cuBLAS too; otherwise
// the segmented kernels (kernels/cuda/lora/sgmv.cu).
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/lora/sgmv.h"

namespace troupe {

namespace {

// The kernels' arguments for `count` stacks like w over x, u in scratch
// (out and col0 are the caller's); every shape checked.
cuda::lora_args lora_args_of(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                             const tensor& scratch, int64_t scratch_cols) {
  TROUPE_CHECK(count >= 1 && count <= cuda::lora_max_modules);
  cuda::lora_args p;
  p.type = element_of(x.type);
  p.x = x.data;
  p.n = x.rows;
  p.in = x.cols;
  p.slots = w[0].slots;
  p.rank = w[0].rank;
  p.count = count;
  TROUPE_CHECK(p.slots > 0 && p.rank > 0 && p.rank <= cuda::lora_max_rank);
  for (int m = 0; m < count; ++m) {
    TROUPE_CHECK(w[m].slots == p.slots && w[m].rank == p.rank);
    TROUPE_CHECK(x.type == w[m].a.type && x.type == w[m].b.type);
    TROUPE_CHECK(x.cols == w[m].a.cols && w[m].a.rows == p.slots * p.rank);
    TROUPE_CHECK(w[m].b.cols == p.slots * p.rank);
    p.modules[m] = {w[m].a.data, w[m].b.data, w[m].b.rows};
  }
  TROUPE_CHECK(scratch.type == dtype::f32 && scratch.rows >= x.rows && scratch.cols >= scratch_cols);
  TROUPE_CHECK(batch.token_slots != nullptr && batch.sorted_tokens != nullptr &&
               batch.slot_starts != nullptr);
  p.sorted_tokens = batch.sorted_tokens;
  p.slot_starts = batch.slot_starts;
  p.u = scratch.f32();
  p.u_stride = scratch.cols;
  return p;
}

}  // namespace

bool cuda_ops::lora_in_gemv(const tensor& x, const tensor& w, const lora_delta& lora) const {
  static const bool on = cuda::env_switch("TROUPE_LORA_GEMV");
  if (!on || w.is_packed() || x.rows < 1 || x.rows > cuda::gemv_max_rows || x.type == dtype::f32 ||
      lora.count < 1 || lora.count > cuda::gemv_lora_max_modules) {
    return false;
  }
  int64_t rows = 0;
  for (int m = 0; m < lora.count; ++m) rows += lora.stacks[m].b.rows;
  return rows == w.rows;  // the modules side by side are the weight's rows
}

void cuda_ops::lora_gemv(const tensor& x, const lora_delta& lora, cuda::gemv_lora& tail) {
  const cuda::lora_args p =
      lora_args_of(x, lora.stacks, lora.count, lora.batch, lora.scratch, lora.count * lora.stacks[0].rank);
  {
    op_scope scope(*impl_, "lora shrink (<= 8 tokens; the expand in the GEMV)", 0);
    cuda::lora_shrink(p, impl_->stream);
  }
  tail = {};
  tail.count = lora.count;
  for (int m = 0; m < lora.count; ++m) {
    tail.b[m] = lora.stacks[m].b.data;
    tail.rows[m] = lora.stacks[m].b.rows;
  }
  tail.b_stride = p.slots * p.rank;
  tail.rank = p.rank;
  tail.u = p.u;
  tail.u_stride = p.u_stride;
  tail.token_slots = lora.batch.token_slots;
}

int64_t cuda_ops::lora_scratch_cols(int count, int64_t slots, int64_t rank) const {
  // Where a module may run dense: u in float32 and u of the compute type
  // (every slot's columns).
  return slots * rank <= cuda::lora_dense_max_cols ? 2 * count * slots * rank : count * rank;
}

bool cuda_ops::lora_runs_dense(int64_t n, const lora_stack& w) const {
  static const bool dense = cuda::env_switch("TROUPE_LORA_DENSE");
  return dense && n > cuda::lora_few_tokens && w.slots * w.rank <= cuda::lora_dense_max_cols;
}

void cuda_ops::linear_lora(const tensor& x, const tensor& w, const tensor* bias,
                           const lora_delta& lora, const tensor& out) {
  TROUPE_CHECK(x.cols == w.cols && out.cols == w.rows && out.rows >= x.rows && x.type == w.type);
  if (x.rows == 0) return;
  // A decode product the tuning gave a GEMV: the deltas inside it.
  if (lora_in_gemv(x, w, lora)) {
    const int choice = gemm_choice(x, w, out);
    if (choice >= 0) {
      cuda::gemv_lora tail;
      lora_gemv(x, lora, tail);
      {
        op_scope scope(*impl_, "linear (+ LoRA deltas)", x, w, w.rows);
        cuda::gemv(element_of(w.type), out.type == dtype::f32, choice, x.data, x.rows, w.data, w.rows,
                   w.cols, out.data, impl_->stream, &tail);
      }
      if (bias != nullptr) {
        TROUPE_CHECK(bias->type == out.type);
        cuda::add_bias(element_of(out.type), out.data, bias->data, x.rows, out.cols, impl_->stream);
      }
      return;
    }
  }
  // The deltas first where both run as cuBLAS products (the dense LoRA path
  // and a base product cuBLAS computes, prefill chunks): the expand writes
  // every column (beta 0), the product accumulates onto it (beta 1), so out
  // is written, read and written once instead of also read and written
  // again by a separate expand.
  static const bool first = cuda::env_switch("TROUPE_LORA_DELTA_FIRST");
  if (first && !w.is_packed() && lora_runs_dense(x.rows, lora.stacks[0]) && gemm_choice(x, w, out) < 0) {
    lora_apply(x, lora.stacks, lora.count, lora.batch, lora.scratch, out, 0, /*accumulate=*/false);
    {
      op_scope scope(*impl_, "linear (onto the LoRA deltas)", x, w, w.rows);
      gemm_cublas(x.type, out.type, x.data, x.cols, w.data, w.cols, out.data, out.cols, x.rows, w.rows,
                  x.cols, 1.0f);
    }
    if (bias != nullptr) {
      TROUPE_CHECK(bias->type == out.type);
      cuda::add_bias(element_of(out.type), out.data, bias->data, x.rows, out.cols, impl_->stream);
    }
    return;
  }
  linear(x, w, bias, out);
  lora_apply(x, lora.stacks, lora.count, lora.batch, lora.scratch, out, 0, true);
}

void cuda_ops::lora_add(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                        const tensor& scratch, const tensor& out, int64_t col0) {
  lora_apply(x, w, count, batch, scratch, out, col0, true);
}

void cuda_ops::lora_apply(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                          const tensor& scratch, const tensor& out, int64_t col0, bool accumulate) {
  cuda::lora_args p = lora_args_of(x, w, count, batch, scratch, lora_scratch_cols(count, w[0].slots, w[0].rank));
  int64_t cols = 0;
  double bytes = static_cast<double>(x.numel());
  for (int m = 0; m < count; ++m) {
    cols += p.modules[m].out_cols;
    bytes += static_cast<double>(w[m].a.numel() + w[m].b.numel());
  }
  TROUPE_CHECK(x.type == out.type);
  TROUPE_CHECK(out.rows >= x.rows && col0 >= 0 && col0 + cols <= out.cols);
  TROUPE_CHECK(accumulate || (col0 == 0 && cols == out.cols));  // every column written
  if (x.rows == 0) return;
  // Bytes (the profiler's): x, every slot's A and B at most, out's columns
  // read and written.
  bytes = (bytes + 2.0 * static_cast<double>(x.rows * cols)) * dtype_size(x.type);
  if (lora_runs_dense(x.rows, w[0])) {
    lora_add_dense(x, w, count, batch, scratch, out, col0, accumulate ? 1.0f : 0.0f);
    return;
  }
  TROUPE_CHECK(accumulate);  // (writing the deltas alone: the dense path only)
  p.out = out.data;
  p.out_stride = out.cols;
  p.col0 = col0;
  // Named by the kernels' regime (sgmv.h), for the profiler.
  static_assert(cuda::lora_few_tokens == 16 && cuda::lora_mma_min_tokens == 1024, "the names below");
  const char* name = x.rows <= cuda::lora_few_tokens       ? "lora_add (<= 16 tokens)"
                     : x.rows < cuda::lora_mma_min_tokens ? "lora_add (17-1023 tokens)"
                                                          : "lora_add (>= 1024 tokens)";
  op_scope scope(*impl_, name, bytes);
  cuda::lora_add(p, impl_->stream);
}

void cuda_ops::lora_add_dense(const tensor& x, const lora_stack* w, int count,
                              const lora_batch& batch, const tensor& scratch, const tensor& out,
                              int64_t col0, float beta) {
  // Every slot's shrink for every token in float32 (one product when the
  // modules' A stacks lie back to back, as llama_model allocates them);
  // then u [n, count * slots * rank] of the compute type gets each token's
  // own slot's sums and zeros elsewhere; then per module out = u_m b_m^T +
  // beta out over all slots' columns (a token's own slot alone is nonzero).
  // (Measured slower end to end, docs/lora.md: the shrink's k split into
  // parts for steps of few tokens; the shrink and the mask in one segmented
  // kernel for decode batches.)
  const int64_t n = x.rows, k = x.cols, sr = w[0].slots * w[0].rank, ucols = count * sr;
  const size_t esize = dtype_size(x.type);
  float* u32 = scratch.f32();
  char* u = reinterpret_cast<char*>(u32 + n * ucols);  // (scratch: 2 x ucols floats a row)
  bool joined = true;
  for (int m = 1; m < count; ++m) {
    joined = joined && w[m].a.data == static_cast<const char*>(w[0].a.data) + m * sr * k * esize;
  }
  // Profiled by stage and regime (decode batches; prefill chunks).
  const char* regime = n <= 256 ? "17-256 tokens" : n < 1024 ? "257-1023 tokens" : ">= 1024 tokens";
  auto named = [regime](const char* stage) {
    return [regime, stage] { return std::string("lora dense ") + stage + " (" + regime + ")"; };
  };
  {
    op_scope scope(*impl_, named("shrink"), 0);
    for (int m = 0; m < (joined ? 1 : count); ++m) {
      gemm_cublas(x.type, dtype::f32, x.data, k, w[m].a.data, k, u32 + m * sr, ucols, n,
                  joined ? ucols : sr, k, 0.0f);
    }
  }
  {
    op_scope scope(*impl_, named("mask"), 0);
    cuda::lora_mask_slots(element_of(x.type), u32, u, n, count, w[0].slots, w[0].rank,
                          batch.token_slots, impl_->stream);
  }
  op_scope scope(*impl_, named("expand"), 0);
  int64_t col = col0;
  for (int m = 0; m < count; ++m) {
    gemm_cublas(x.type, x.type, u + m * sr * esize, ucols, w[m].b.data, sr,
                static_cast<char*>(out.data) + col * esize, out.cols, n, w[m].b.rows, sr, beta);
    col += w[m].b.rows;
  }
}

}  // namespace troupe
