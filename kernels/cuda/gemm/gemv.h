// Skinny products for decode: out[m, n] = sum_k x[m, k] w[n, k] for a few
// rows m (batch 1-8), bf16 or f16 x and w (row-major, K contiguous),
// float32 accumulation, output in the weights' type or float32. Memory
// bound: every weight is read once, with 16-byte streaming loads (double
// buffered, the first ones before the PDL wait), and used for all m rows.
// Several variants (rows per warp, loads in flight, warps sharing a row's
// k: "s2", "s4", whose partial sums meet in shared memory, so that a
// product of few rows still has enough warps); cuda_ops times them
// against cuBLAS per shape at start-up and keeps the fastest (docs/gpu.md,
// "Decode products"). TROUPE_PRELOAD=0 requests the weights only after
// the PDL wait (comparisons).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

constexpr int gemv_max_rows = 8;
// The most rows for which cuda_ops' tuning considers the variants that
// split a row's k over warps (not with the RoPE epilogue; docs/gpu.md,
// "Decode products").
constexpr int gemv_split_max_rows = 2;

// LoRA deltas inside a product (docs/lora.md, "Decode"): the weight's rows
// fall in up to three modules, side by side (q, k, v; gate, up; one), and
// token i with adapter slot s = token_slots[i] >= 0 adds to its output of
// weight row j, before the epilogue, sum over e < rank of
// b_m[j - first row of m][s * rank + e] * u[i * u_stride + m * rank + e]
// (u: the shrink's float32 sums of the token's own adapter, module m at
// columns m * rank: lora_shrink in kernels/cuda/lora/sgmv.h, the kernel
// ahead), m the module row j falls in. Tokens of slot -1 add nothing. b_m
// is lora_B of every slot, [rows_m, slots * rank] of the product's type.
// count 0: no deltas.
constexpr int gemv_lora_max_modules = 3;
struct gemv_lora {
  int count = 0;
  const void* b[gemv_lora_max_modules] = {};
  int64_t rows[gemv_lora_max_modules] = {};
  int64_t b_stride = 0;  // slots * rank
  int64_t rank = 0;
  const float* u = nullptr;
  int64_t u_stride = 0;
  const int32_t* token_slots = nullptr;  // [m]
};

// Variants 0 .. gemv_num_variants() - 1.
int gemv_num_variants();
const char* gemv_variant_name(int variant);
// How many warps share a row's k in a variant (1: a warp a row group).
int gemv_variant_split(int variant);

// Whether gemv() can run this product: bf16/f16, 1 <= m <= gemv_max_rows,
// k a multiple of 8, x and w 16-byte aligned.
bool gemv_supported(element_type t, int64_t m, int64_t k, const void* x, const void* w);

// out row i starts at out + i * n (elements of the output type: t, or
// float32 when out_f32). REQUIRES: gemv_supported(t, m, k, x, w).
// `lora`: deltas added before the store (null: none).
void gemv(element_type t, bool out_f32, int variant, const void* x, int64_t m, const void* w,
          int64_t n, int64_t k, void* out, cudaStream_t stream, const gemv_lora* lora = nullptr);

// The gate/up product with SiLU-and-mul in one kernel (gated_linear): w is
// [2d, k] (gate rows, then up rows), out [m, d] of type t:
// out[i, j] = silu(g) * u with g = (x w[j]^T) and u = (x w[d + j]^T) each
// rounded to t first, bit for bit gemv() with gemv_variant_of_glu(variant)
// (the GEMV variant that sums a row in the same order) followed by
// silu_and_mul().
// Variants 0 .. gemv_glu_num_variants() - 1. REQUIRES: gemv_supported.
int gemv_glu_num_variants();
const char* gemv_glu_variant_name(int variant);
int gemv_glu_variant_split(int variant);
int gemv_variant_of_glu(int glu_variant);
// `lora`: deltas added to the gate and up sums (modules gate, up) before
// the rounding and SiLU-and-mul.
void gemv_glu(element_type t, int variant, const void* x, int64_t m, const void* w, int64_t d,
              int64_t k, void* out, cudaStream_t stream, const gemv_lora* lora = nullptr);

// The fused q/k/v projection with qkv_rope_cache in its epilogue (decode):
// w is [(q_heads + 2 kv_heads) * head_dim, k] (q, k, v heads), bias one
// value a row or null; each warp computes a head's rotary pair of rows, adds
// the bias, rotates q and k heads (cos/sin at positions[i]) and stores q to
// q_out [m, q_heads * head_dim], k and v to the cache at slot_mapping[i]
// (-1: skipped; FP8 caches get the codes, cache.h): bit for bit gemv() with gemv_variant_of_glu(variant),
// add_bias and qkv_rope_cache without q/k norms. `variant` indexes the
// GEMV-GLU table (pairs of rows). `lora`: deltas (modules q, k, v) added
// to the sums before the rounding, bias and rotation. REQUIRES:
// gemv_rope_supported.
bool gemv_rope_supported(element_type t, int64_t m, int64_t k, int64_t head_dim, const void* x,
                         const void* w);
void gemv_qkv_rope_cache(element_type t, int variant, const void* x, int64_t m, const void* w,
                         const void* bias, int64_t k, int64_t q_heads, int64_t kv_heads,
                         int64_t head_dim, const int32_t* positions, const float* cos_table,
                         const float* sin_table, const int32_t* slot_mapping, void* q_out,
                         const kv_dest& cache, cudaStream_t stream,
                         const gemv_lora* lora = nullptr);

}  // namespace troupe::cuda
