// Mixture-of-experts MLP on the GPU (ops::moe_mlp; kernels/cpu/cpu_moe.h is
// the reference). A step of n tokens routed to top_k experts each has
// n * top_k slots (slot t * top_k + j: token t's j-th expert). The pieces,
// each a kernel launched with PDL (launch.cuh) and none synchronising, so
// a decode step captures into a CUDA graph:
//   moe_route:   router logits -> each token's expert ids and weights
//                (softmax in float32, top k, ties to the lower expert,
//                renormalised when asked), a warp a token.
//   moe_sort:    the slots grouped by expert (offsets, the slot list, and
//                the tiles of moe_tile slots each expert's slots make), on
//                the device: the tile count is read by the GEMMs, which
//                are launched for the most tiles n tokens can make.
//   moe_gemm_up / moe_gemm_down: grouped GEMMs over the tiles (a block a
//                tile of slots and a chunk of outputs; bf16/f16 on tensor
//                cores (WMMA), float32 on the SIMT path), SiLU-and-mul
//                fused into the gate/up product's epilogue.
//   moe_gemv_up / moe_gemv_down_sum: the decode form for a few tokens, no
//                sort: a block (its threads splitting k) an output of one
//                slot's expert (up) or of all of a token's slots, summed
//                with their weights (down), reading only the selected
//                experts' weights, once a slot; no combine after it.
//   moe_combine: out[t] = sum_j weight[t, j] * y[t * top_k + j] in float32
//                (j order), rounded once.
// Weights: gate_up [E * 2I, h] (expert e's gate rows at e * 2I, its up rows
// at e * 2I + I), down [E * h, I]; act [slots, I] and y [slots, h] in the
// element type. The gate and up sums are rounded to the element type before
// SiLU-and-mul, the act values (and the grouped form's y values) once, as
// the unfused model would; the decode form sums a token's slots in float32
// without rounding each slot's output first, so the two forms differ by
// the element type's rounding (keep_rows_consistent runs one form only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

constexpr int moe_max_experts = 512;
constexpr int moe_max_top_k = 32;
constexpr int moe_tile = 64;  // slots a grouped-GEMM tile

// The most tiles `slots` slots over `experts` experts can make.
int64_t moe_max_tiles(int64_t slots, int64_t experts);

// moe_sort's output, carved from one int32 buffer of moe_index_ints() ints.
struct moe_index {
  int32_t* offsets = nullptr;      // [experts + 1]: expert e's slots at sorted[offsets[e] ..]
  int32_t* sorted = nullptr;       // [slots]
  int32_t* tile_expert = nullptr;  // [max tiles]
  int32_t* tile_begin = nullptr;   // [max tiles]: the tile's first entry of sorted
  int32_t* num_tiles = nullptr;    // [1]
};
int64_t moe_index_ints(int64_t slots, int64_t experts);
moe_index moe_index_at(int32_t* ints, int64_t slots, int64_t experts);

// REQUIRES: experts <= moe_max_experts, top_k <= min(moe_max_top_k, experts).
// logits [n, experts] of type t; ids, weights [n, top_k]. With `counts`
// (uint32 [experts], wrapping), each token t with count_if[t] >= 0 (every
// token when count_if is null) adds one (atomically) to its experts'.
void moe_route(element_type t, const void* logits, int64_t n, int experts, int top_k,
               bool renormalize, int32_t* ids, float* weights, cudaStream_t stream,
               uint32_t* counts = nullptr, const int32_t* count_if = nullptr);
void moe_sort(const int32_t* ids, int64_t slots, int experts, const moe_index& index,
              cudaStream_t stream);

// The decode form: whether it runs these sizes (hidden and inter multiples
// of 8, so that every row is read in 16-byte pieces).
bool moe_gemv_supported(int64_t hidden, int64_t inter);
// act[s, j] = silu(g) * u, g and u expert ids[s]'s gate row j and up row j
// times x[s / top_k]. REQUIRES: slots <= 65535 (a block row a slot).
void moe_gemv_up(element_type t, const void* x, const int32_t* ids, int64_t slots, int top_k,
                 const void* gate_up, int64_t inter, int64_t hidden, void* act,
                 cudaStream_t stream);
// out[t, r] = sum_j weights[t, j] * (down row r of expert ids[t, j] times
// act[t * top_k + j]), in float32, rounded once (the decode form of
// moe_gemm_down and moe_combine). out row t at out + t * out_stride.
// REQUIRES: top_k <= moe_max_top_k, n <= 65535 (as moe_gemv_up's slots).
void moe_gemv_down_sum(element_type t, const void* act, const int32_t* ids, const float* weights,
                       int64_t n, int top_k, const void* down, int64_t hidden, int64_t inter,
                       void* out, int64_t out_stride, cudaStream_t stream);

// The grouped products over moe_sort's tiles (grid: max_tiles x output
// chunks; blocks past the tile count exit). The tensor-core form needs
// hidden and inter multiples of 8 (moe_gemv_supported); otherwise, and for
// float32, the SIMT form runs.
void moe_gemm_up(element_type t, const void* x, int top_k, const moe_index& index,
                 int64_t max_tiles, const void* gate_up, int64_t inter, int64_t hidden, void* act,
                 cudaStream_t stream);
void moe_gemm_down(element_type t, const void* act, const moe_index& index, int64_t max_tiles,
                   const void* down, int64_t hidden, int64_t inter, void* y, cudaStream_t stream);

// out row t at out + t * out_stride.
void moe_combine(element_type t, const void* y, const float* weights, int64_t n, int top_k,
                 int64_t hidden, void* out, int64_t out_stride, cudaStream_t stream);

}  // namespace troupe::cuda
