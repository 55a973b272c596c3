// moe.h's grouped GEMMs. A block takes one tile (moe_tile slots of one
// expert, from moe_sort) and one chunk of 64 weight rows: for the gate/up
// product 32 gate rows and the 32 up rows of the same act columns, so that
// the epilogue applies SiLU-and-mul; for the down product 64 output
// columns. The tile's x rows are gathered through the slot list (the
// token's row: slot / top_k; act rows by slot), rows past the tile's
// slots and k past the end read as zeros. Results meet in a float32
// shared tile, and the epilogue writes each slot's row.
//   mma:  bf16/f16, 4 warps of 32 x 32 (WMMA m16n16k16, float32
//         accumulators), k in chunks of 32 staged with cp.async in four
//         stages (three chunks load while one multiplies).
//   simt: any element type (float32 above all), 256 threads of 4 x 4
//         outputs, k in chunks of 16, sums in float32 in k order.
#include <mma.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe/moe.h"
#include "kernels/cuda/moe/moe_common.cuh"

namespace troupe::cuda {
namespace {

constexpr int tile_m = moe_tile;  // slots a block
constexpr int tile_n = 64;        // weight rows a block
constexpr int cs_ld = tile_n + 4;

struct gemm_args {
  const void* x;  // [tokens, k] (up; slot s reads row s / top_k) or act [slots, k] (down)
  const void* w;  // up: [E * 2n, k]; down: [E * n, k]
  void* out;      // [slots, n]
  int64_t n, k;
  int top_k;
  moe_index index;
};

// The block's tile: its expert, and the slot of each of its rows (-1 past
// the tile's slots) in shared memory. False when the block has no tile.
__device__ __forceinline__ bool tile_rows(const gemm_args& p, int& expert, int (&slots)[tile_m]) {
  const int tile = blockIdx.x;
  if (tile >= *p.index.num_tiles) return false;
  expert = p.index.tile_expert[tile];
  const int begin = p.index.tile_begin[tile];
  const int end = min(begin + tile_m, p.index.offsets[expert + 1]);
  for (int i = threadIdx.x; i < tile_m; i += blockDim.x) {
    slots[i] = begin + i < end ? p.index.sorted[begin + i] : -1;
  }
  __syncthreads();
  return true;
}

// Weight row j (< tile_n) of the block's chunk, or -1 past the outputs.
// UP: rows 0..31 the gate rows of act columns n0.., 32..63 their up rows.
template <bool UP>
__device__ __forceinline__ int64_t weight_row(const gemm_args& p, int expert, int j) {
  if (UP) {
    const int64_t c = int64_t(blockIdx.y) * (tile_n / 2) + (j % (tile_n / 2));
    return c < p.n ? expert * 2 * p.n + (j / (tile_n / 2)) * p.n + c : -1;
  }
  const int64_t c = int64_t(blockIdx.y) * tile_n + j;
  return c < p.n ? expert * p.n + c : -1;
}

// The x row of tile row i (slot s), or -1.
template <bool UP>
__device__ __forceinline__ int64_t x_row(const gemm_args& p, int slot) {
  return slot < 0 ? -1 : (UP ? slot / p.top_k : slot);
}

template <class T, bool UP>
__device__ __forceinline__ void epilogue(const gemm_args& p, const int (&slots)[tile_m],
                                         const float (&cs)[tile_m][cs_ld]) {
  T* out = static_cast<T*>(p.out);
  constexpr int cols = UP ? tile_n / 2 : tile_n;
  const int64_t n0 = int64_t(blockIdx.y) * cols;
  for (int e = threadIdx.x; e < tile_m * cols; e += blockDim.x) {
    const int i = e / cols, j = e % cols;
    if (slots[i] < 0 || n0 + j >= p.n) continue;
    out[slots[i] * p.n + n0 + j] = UP ? silu_mul<T>(cs[i][j], cs[i][j + cols]) : from_float<T>(cs[i][j]);
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

constexpr int mma_k = 32;
constexpr int mma_ld = mma_k + 8;
constexpr int mma_stages = 4;  // chunks in flight: 3 loading while one multiplies

template <class T, bool UP>
__global__ void __launch_bounds__(128) moe_gemm_mma_kernel(gemm_args p) {
  using namespace nvcuda;
  pdl_begin();
  __shared__ int slots[tile_m];
  int expert = 0;
  if (!tile_rows(p, expert, slots)) return;
  // The stages (A rows, then B rows, each mma_ld elements), and after the
  // loop the float32 tile in the same bytes.
  constexpr int stage_elems = (tile_m + tile_n) * mma_ld;
  constexpr size_t stage_bytes = mma_stages * stage_elems * sizeof(T);
  constexpr size_t cs_bytes = sizeof(float) * tile_m * cs_ld;
  __shared__ alignas(128) unsigned char raw[stage_bytes > cs_bytes ? stage_bytes : cs_bytes];
  T* const staged = reinterpret_cast<T*>(raw);
  auto a_at = [&](int s, int row) { return staged + s * stage_elems + row * mma_ld; };
  auto b_at = [&](int s, int row) { return staged + s * stage_elems + (tile_m + row) * mma_ld; };
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  const int tid = threadIdx.x, warp = tid / 32, wm = warp / 2, wn = warp % 2;
  // Each thread's two 16-byte pieces of A and of B a chunk: row, column.
  int64_t arow[2], brow[2];
  int prow[2], pcol[2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int piece = tid + q * 128;
    prow[q] = piece / (mma_k / 8);
    pcol[q] = (piece % (mma_k / 8)) * 8;
    arow[q] = x_row<UP>(p, slots[prow[q]]);
    brow[q] = weight_row<UP>(p, expert, prow[q]);
  }
  const int64_t chunks = (p.k + mma_k - 1) / mma_k;
  // Chunk c into stage c % mma_stages (nothing past the last chunk; the
  // group is committed all the same, so that the wait counts stay fixed).
  auto stage = [&](int64_t c) {
    if (c < chunks) {
      const int s = static_cast<int>(c % mma_stages);
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int64_t k = c * mma_k + pcol[q];
        const bool a_ok = arow[q] >= 0 && k < p.k, b_ok = brow[q] >= 0 && k < p.k;
        cp_async16(a_at(s, prow[q]) + pcol[q], a_ok ? x + arow[q] * p.k + k : x, a_ok);
        cp_async16(b_at(s, prow[q]) + pcol[q], b_ok ? w + brow[q] * p.k + k : w, b_ok);
      }
    }
    cp_async_commit();
  };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int c = 0; c < mma_stages - 1; ++c) stage(c);
  for (int64_t c = 0; c < chunks; ++c) {
    stage(c + mma_stages - 1);  // into the stage multiplied one iteration ago
    cp_async_wait<mma_stages - 1>();
    __syncthreads();
    const int s = static_cast<int>(c % mma_stages);
#pragma unroll
    for (int kk = 0; kk < mma_k; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];  // weight rows
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(fa[i], a_at(s, wm * 32 + i * 16) + kk, mma_ld);
        wmma::load_matrix_sync(fb[i], b_at(s, wn * 32 + i * 16) + kk, mma_ld);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();  // every warp is done with stage s before it is loaded again
  }
  cp_async_wait<0>();
  __syncthreads();
  auto& cs = *reinterpret_cast<float (*)[tile_m][cs_ld]>(raw);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], cs_ld,
                              wmma::mem_row_major);
    }
  __syncthreads();
  epilogue<T, UP>(p, slots, cs);
}

constexpr int simt_k = 16;

template <class T, bool UP>
__global__ void __launch_bounds__(256) moe_gemm_simt_kernel(gemm_args p) {
  pdl_begin();
  __shared__ int slots[tile_m];
  int expert = 0;
  if (!tile_rows(p, expert, slots)) return;
  __shared__ float as[tile_m][simt_k + 1];
  __shared__ float bs[tile_n][simt_k + 1];
  __shared__ float cs[tile_m][cs_ld];
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += simt_k) {
    for (int e = tid; e < tile_m * simt_k; e += 256) {
      const int r = e / simt_k, kk = e % simt_k;
      const int64_t k = k0 + kk;
      const int64_t xr = x_row<UP>(p, slots[r]), wr = weight_row<UP>(p, expert, r);
      as[r][kk] = xr >= 0 && k < p.k ? to_float(x[xr * p.k + k]) : 0.0f;
      bs[r][kk] = wr >= 0 && k < p.k ? to_float(w[wr * p.k + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < simt_k; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = as[ty * 4 + i][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[tx + 16 * j][kk];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) cs[ty * 4 + i][tx + 16 * j] = acc[i][j];
  __syncthreads();
  epilogue<T, UP>(p, slots, cs);
}

template <bool UP>
void grouped(element_type t, const gemm_args& p, int64_t max_tiles, cudaStream_t stream) {
  if (max_tiles == 0) return;
  const int64_t cols = UP ? tile_n / 2 : tile_n;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((p.n + cols - 1) / cols));
  const bool mma = t != element_type::f32 && moe_gemv_supported(p.k, p.n);
  with_element(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      if (mma) {
        launch_pdl(moe_gemm_mma_kernel<T, UP>, grid, dim3(128), 0, stream, p);
        return;
      }
    }
    launch_pdl(moe_gemm_simt_kernel<T, UP>, grid, dim3(256), 0, stream, p);
  });
}

}  // namespace

void moe_gemm_up(element_type t, const void* x, int top_k, const moe_index& index,
                 int64_t max_tiles, const void* gate_up, int64_t inter, int64_t hidden, void* act,
                 cudaStream_t stream) {
  grouped<true>(t, gemm_args{x, gate_up, act, inter, hidden, top_k, index}, max_tiles, stream);
}

void moe_gemm_down(element_type t, const void* act, const moe_index& index, int64_t max_tiles,
                   const void* down, int64_t hidden, int64_t inter, void* y, cudaStream_t stream) {
  grouped<false>(t, gemm_args{act, down, y, hidden, inter, 1, index}, max_tiles, stream);
}

}  // namespace troupe::cuda
