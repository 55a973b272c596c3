// Tensor-core forms of sgmv.cu's kernels, for bf16/f16 steps of many tokens
// (from lora_mma_min_tokens: prefill chunks): a block takes one slot and a tile
// of 64 of its tokens, so each adapter's weights are read once per 64
// tokens, and multiplies with WMMA (m16n16k16, float32 accumulators); 4
// warps, 16 tokens each. Included by sgmv.cu (its tile_of, module_chunk_of).
//
// shrink_mma: u[64 tokens, 16 rank rows] per block (grid.y: module x group
// of 16 rows); k in chunks of 64 staged in shared memory (the tokens' x
// rows gathered through sorted_tokens, lora_A's rows; zeros past the
// tokens and the rank), u written in float32.
// expand_mma: out[64 tokens, 64 columns] += u B^T per block (grid.y:
// module x column chunk of 64); u rounded to the element type (as peft
// computes in bf16) and the chunk's lora_B rows staged in shared memory
// for ranks up to mma_max_rank, sums in float32, out rounded once.
#pragma once

#include <mma.h>

namespace troupe::cuda {
namespace {

constexpr int mma_tile = 64;  // tokens a block
constexpr int mma_k = 64;     // shrink: k staged at a time
constexpr int mma_cols = 64;  // expand: output columns a block
constexpr int mma_max_rank = 64;

template <class T>
__global__ void __launch_bounds__(128) shrink_mma_kernel(lora_args p, int groups) {
  using namespace nvcuda;
  pdl_begin();
  const tile_range tr = tile_of<mma_tile>(p);
  if (tr.begin >= tr.end) return;
  const int m = static_cast<int>(blockIdx.y) / groups;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y % groups) * 16;
  const int ntok = static_cast<int>(tr.end - tr.begin);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  __shared__ alignas(32) T xs[mma_tile][mma_k + 8];
  __shared__ alignas(32) T as[16][mma_k + 8];
  __shared__ alignas(32) float cs[mma_tile][16 + 4];
  const T* x = static_cast<const T*>(p.x);
  const T* a = static_cast<const T*>(p.modules[m].a) + (tr.slot * p.rank) * p.in;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  vec16<T> zero;
#pragma unroll
  for (int e = 0; e < vec16<T>::size; ++e) zero.v[e] = from_float<T>(0.0f);
  for (int64_t k0 = 0; k0 < p.in; k0 += mma_k) {
    // x: 64 rows x 64 k in 16-byte pieces (8 a row); lora_A: 16 rows.
    for (int e = tid; e < mma_tile * 8; e += 128) {
      const int row = e / 8, c = (e % 8) * 8;
      const int64_t k = k0 + c;
      vec16<T> v = zero;
      if (row < ntok && k < p.in) v = load16(x + static_cast<int64_t>(p.sorted_tokens[tr.begin + row]) * p.in + k);
      store16(&xs[row][c], v);
    }
    {
      const int row = tid / 8, c = (tid % 8) * 8;
      const int64_t k = k0 + c;
      vec16<T> v = zero;
      if (r0 + row < p.rank && k < p.in) v = load16(a + (r0 + row) * p.in + k);
      store16(&as[row][c], v);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < mma_k; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;  // A^T: as[r][k]
      wmma::load_matrix_sync(fa, &xs[warp * 16][kk], mma_k + 8);
      wmma::load_matrix_sync(fb, &as[0][kk], mma_k + 8);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(&cs[warp * 16][0], acc, 16 + 4, wmma::mem_row_major);
  __syncthreads();
  for (int e = tid; e < mma_tile * 16; e += 128) {
    const int i = e / 16, rr = e % 16;
    if (i < ntok && r0 + rr < p.rank) {
      const int64_t t = p.sorted_tokens[tr.begin + i];
      p.u[t * p.u_stride + m * p.rank + r0 + rr] = cs[i][rr];
    }
  }
}

// RK: the rank rounded up to a multiple of 16 (<= mma_max_rank).
template <class T, int RK>
__global__ void __launch_bounds__(128) expand_mma_kernel(lora_args p, int chunks0,
                                                         int chunks1) {
  using namespace nvcuda;
  pdl_begin();
  const tile_range tr = tile_of<mma_tile>(p);
  if (tr.begin >= tr.end) return;
  const module_chunk mc = module_chunk_of(p, chunks0, chunks1);
  const int m = mc.module;
  const int64_t chunk = mc.chunk, col = mc.col;
  const int64_t out_cols = p.modules[m].out_cols, j0 = chunk * mma_cols;
  const int ntok = static_cast<int>(tr.end - tr.begin);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  __shared__ alignas(32) T us[mma_tile][RK + 8];
  __shared__ alignas(32) T bs[mma_cols][RK + 8];
  __shared__ alignas(32) float cs[mma_tile][mma_cols + 4];
  for (int e = tid; e < mma_tile * RK; e += 128) {
    const int i = e / RK, r = e % RK;
    float v = 0.0f;
    if (i < ntok && r < p.rank) {
      v = p.u[static_cast<int64_t>(p.sorted_tokens[tr.begin + i]) * p.u_stride + m * p.rank + r];
    }
    us[i][r] = from_float<T>(v);
  }
  const T* b = static_cast<const T*>(p.modules[m].b) + tr.slot * p.rank;  // [out, slots * rank]
  for (int e = tid; e < mma_cols * RK; e += 128) {
    const int jj = e / RK, r = e % RK;
    bs[jj][r] = j0 + jj < out_cols && r < p.rank ? b[(j0 + jj) * p.slots * p.rank + r]
                                                 : from_float<T>(0.0f);
  }
  __syncthreads();
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[mma_cols / 16];
#pragma unroll
  for (int f = 0; f < mma_cols / 16; ++f) wmma::fill_fragment(acc[f], 0.0f);
#pragma unroll
  for (int kk = 0; kk < RK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, &us[warp * 16][kk], RK + 8);
#pragma unroll
    for (int f = 0; f < mma_cols / 16; ++f) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;  // B^T: bs[j][r]
      wmma::load_matrix_sync(fb, &bs[f * 16][kk], RK + 8);
      wmma::mma_sync(acc[f], fa, fb, acc[f]);
    }
  }
#pragma unroll
  for (int f = 0; f < mma_cols / 16; ++f) {
    wmma::store_matrix_sync(&cs[warp * 16][f * 16], acc[f], mma_cols + 4, wmma::mem_row_major);
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out);
  for (int e = tid; e < mma_tile * mma_cols; e += 128) {
    const int i = e / mma_cols, jj = e % mma_cols;
    if (i < ntok && j0 + jj < out_cols) {
      T* o = out + static_cast<int64_t>(p.sorted_tokens[tr.begin + i]) * p.out_stride + col + j0 + jj;
      *o = from_float<T>(to_float(*o) + cs[i][jj]);
    }
  }
}

}  // namespace
}  // namespace troupe::cuda
