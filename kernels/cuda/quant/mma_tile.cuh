// What the packed products' tensor-core kernels (qmma.cu, fp8.cu) share:
// a block's warps each hold float32 sums of one tile, 16 weight rows x 8
// NT tokens in mma.sync C fragments, over their part of k; the tile's sums
// meet in shared memory in warp order (so a token's outputs do not depend
// on the other tokens) and warp 0 stores them.
#pragma once

#include "kernels/cuda/element.cuh"

namespace troupe::cuda {

// The C fragment: lane (g, t4) holds c0, c1 = row g, tokens 2 t4 and 2 t4
// + 1 of each 8-token tile, c2, c3 = row g + 8. Rows r0 = 16 rb + g and
// r0 + 8 of out [m, rows] (row stride ldo); the tile's first token tok0.
template <class T, int NT, int MAX_WARPS>
__device__ __forceinline__ void reduce_and_store_tile(float (&acc)[NT][4], int m, int tok0, int64_t r0,
                                                      T* __restrict__ out, int64_t ldo) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  __shared__ float partial[MAX_WARPS - 1][NT * 4][32];
  if (warp > 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp - 1][nt * 4 + i][lane] = acc[nt][i];
    }
  }
  __syncthreads();
  if (warp != 0) return;
  for (int v = 0; v < warps - 1; ++v) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] += partial[v][nt * 4 + i][lane];
    }
  }
  const int64_t r1 = r0 + 8;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t tok = tok0 + nt * 8 + 2 * t4;
    if (tok < m) {
      out[tok * ldo + r0] = from_float<T>(acc[nt][0]);
      out[tok * ldo + r1] = from_float<T>(acc[nt][2]);
    }
    if (tok + 1 < m) {
      out[(tok + 1) * ldo + r0] = from_float<T>(acc[nt][1]);
      out[(tok + 1) * ldo + r1] = from_float<T>(acc[nt][3]);
    }
  }
}

}  // namespace troupe::cuda
