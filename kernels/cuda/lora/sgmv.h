// Multi-LoRA kernels (host API), in the spirit of Punica's SGMV: the step's
// tokens are grouped by adapter slot (lora_batch: sorted_tokens and
// slot_starts, built by the runner), so a block works for one slot and a
// tile of its tokens and reads that adapter's weight rows once for all of
// them: shrink (u = x A_s^T, float32) then expand (out +=
// u B_s^T, summed in float32, out rounded once), each one launch for up to
// lora_max_modules modules that read the same x (q/k/v, gate/up) and write
// side by side in out. Tokens without a slot (-1) are never touched. All
// pointers are device memory; launches are asynchronous on `stream` (PDL,
// kernels/cuda/launch.cuh), allocate nothing and never wait for the host:
// the grids depend on n and the slot count only, so a captured graph serves
// every mix of adapters.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

constexpr int lora_max_modules = 3;
// The kernels' regimes by the step's token count: up to lora_few_tokens
// (decode of a few sequences), SIMT kernels with short walks over k; from
// lora_mma_min_tokens (prefill chunks), tensor cores for bf16/f16.
constexpr int64_t lora_few_tokens = 16;
constexpr int64_t lora_mma_min_tokens = 1024;
constexpr int64_t lora_max_rank = 512;
// Above lora_few_tokens, a module whose slots x rank is at most this runs
// dense (cuda_ops::lora_add): u for every slot in one cuBLAS product, the
// other slots' columns zeroed (lora_mask_slots), the expand one cuBLAS
// product over all slots' columns added into out. Beyond it the products'
// wasted columns cost more than the segmented kernels here.
constexpr int64_t lora_dense_max_cols = 256;

struct lora_module_args {
  const void* a = nullptr;  // [slots * rank, in]
  const void* b = nullptr;  // [out_cols, slots * rank]
  int64_t out_cols = 0;
};

struct lora_args {
  element_type type = element_type::f32;  // x, a, b and out
  const void* x = nullptr;                // [n, in]
  int64_t n = 0, in = 0;
  int64_t slots = 0, rank = 0;
  int count = 0;  // modules, <= lora_max_modules
  lora_module_args modules[lora_max_modules];
  const int32_t* sorted_tokens = nullptr;  // lora_batch
  const int32_t* slot_starts = nullptr;
  float* u = nullptr;  // [n rows of u_stride floats], module m at columns m * rank
  int64_t u_stride = 0;
  void* out = nullptr;  // rows of out_stride elements; module m from column col0 + sum of earlier out_cols
  int64_t out_stride = 0, col0 = 0;
};

// Shrink then expand. REQUIRES: 1 <= count <= lora_max_modules, 1 <= rank
// <= lora_max_rank, u_stride >= count * rank, the columns within out_stride.
void lora_add(const lora_args& args, cudaStream_t stream);

// The shrink alone (u for the tokens with a slot; out unused), for the
// decode GEMV that adds the expand itself (gemv.h gemv_lora): the SIMT
// kernel of steps of up to lora_few_tokens tokens. REQUIRES: as lora_add,
// n <= lora_few_tokens.
void lora_shrink(const lora_args& args, cudaStream_t stream);

// The dense path's mask: u32 is [n, count * slots * rank] float32 (the
// shrink's sums for every slot), module m at columns m * slots * rank, slot
// s of it at s * rank; u (same shape, of `type`) gets each token's own
// slot's sums and zero in every other column (all zero for slot -1).
void lora_mask_slots(element_type type, const float* u32, void* u, int64_t n, int count,
                     int64_t slots, int64_t rank, const int32_t* token_slots, cudaStream_t stream);

}  // namespace troupe::cuda
