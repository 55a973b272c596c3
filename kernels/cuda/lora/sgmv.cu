// Multi-LoRA by adapter slot (sgmv.h). A block takes one slot s and a tile
// of its tokens (lora_batch.sorted_tokens from
// slot_starts[s]; tile_of numbers the tiles slot after slot); the grid has
// K + floor((n - K) / tile) blocks along x, K = min(slots, n): the most
// tiles any assignment takes (k slots holding c_s >= 1 of the n tokens
// take sum ceil(c_s / tile) = k + sum floor((c_s - 1) / tile) <= k +
// floor((n - k) / tile), which grows with k), depending on n alone; blocks
// past the last tile exit at once (a decode token: one block, not 1 +
// slots).
//
// shrink: grid (slot x tile of 4 tokens, module x group of 16 rank rows;
// 4 rows and 512 threads for steps of up to 16 tokens, so that a decode
// step streams the weights with more blocks and shorter walks); the
// threads split k in 16-byte loads (scalar loads where in is not a
// multiple of the vector), each keeps the tile's tokens x rows partial
// sums in float32; warp shuffles and shared memory add them; u (float32)
// gets the tile's rows. A slot's lora_A rows are read once per tile, a
// token's x once per group of rank rows.
//
// expand: grid (slot x tile of 16 tokens, module x column chunk of 128); the tile's u
// rows go to shared memory; a thread per output column walks its lora_B
// row (rank contiguous values, read once per tile) and keeps one float32
// sum per token, then adds each to out in float32 and rounds once.
//
// The expand calls pdl_begin() first, before any memory access; the shrink
// lets the next kernel be scheduled at its start, and reads its tile and
// requests its lora_A rows into L2 before its wait (launch.cuh).
#include "kernels/cuda/lora/sgmv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

constexpr int tile = 16;                // expand: tokens a block
constexpr int shrink_tile = 4;          // shrink: tokens a block
constexpr int threads = 128;
// Rank rows a shrink block: 16 (x read once per 16 rows), or 4 for steps
// of few tokens (more blocks to stream the weights: a decode step's shrink
// has a block or two a module otherwise).
constexpr int shrink_rows_many = 16, shrink_rows_few = 4;
// Tensor cores only from lora_mma_min_tokens: below, a slot's few tokens
// would leave the 64-token tiles' blocks few and their walks over k long (a
// decode batch of 64 ran 3x slower than the SIMT kernels on the H100).

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The block's slot and its tile of tokens [begin, end) in sorted_tokens.
struct tile_range {
  int64_t slot, begin, end;
};

// Block x's slot and tile of tokens [begin, end) in sorted_tokens: the
// tiles of slot 0, then slot 1's, ... (tile_blocks() blocks cover any
// assignment; the rest find no tile and exit).
template <int TILE>
__device__ __forceinline__ tile_range tile_of(const lora_args& p) {
  int64_t b = blockIdx.x;
  for (int64_t s = 0; s < p.slots; ++s) {
    const int64_t first = p.slot_starts[s], last = p.slot_starts[s + 1];
    const int64_t t = (last - first + TILE - 1) / TILE;
    if (b < t) {
      const int64_t begin = first + b * TILE;
      return {s, begin, begin + TILE < last ? begin + TILE : last};
    }
    b -= t;
  }
  return {0, 0, 0};
}

// An expand block's module, column chunk within it, and the module's first
// column in out (grid.y enumerates module 0's chunks, then 1's, then 2's;
// chunks0, chunks1: how many modules 0 and 1 have).
struct module_chunk {
  int module;
  int64_t chunk, col;
};

__device__ __forceinline__ module_chunk module_chunk_of(const lora_args& p, int chunks0, int chunks1) {
  module_chunk r{0, blockIdx.y, p.col0};
  if (r.chunk >= chunks0) {
    r.chunk -= chunks0;
    r.col += p.modules[0].out_cols;
    r.module = 1;
    if (r.chunk >= chunks1) {
      r.chunk -= chunks1;
      r.col += p.modules[1].out_cols;
      r.module = 2;
    }
  }
  return r;
}

// Blocks a grid needs for tiles of `tile_tokens`: the most tiles n tokens
// over the slots can take (the file's comment; 0 for no tokens).
inline unsigned tile_blocks(const lora_args& p, int64_t tile_tokens) {
  const int64_t k = p.slots < p.n ? p.slots : p.n;
  return static_cast<unsigned>(k + (p.n - k) / tile_tokens);
}

// Loops are fully unrolled with predicates, never `break`: the partial
// sums stay in registers.
template <class T, int shrink_rows, int shrink_threads>
__global__ void __launch_bounds__(shrink_threads) shrink_kernel(lora_args p, int groups, bool preload) {
  // The next kernel (the expand, or the GEMV that adds it) may be
  // scheduled at once: its weights then arrive while this one runs. The
  // tile (host-uploaded slot starts) and the block's lora_A rows (weights:
  // uploads, never a kernel's writes) before the PDL wait: the rows are
  // requested into L2 while the kernel ahead finishes.
  if (preload) pdl_schedule_next();
  const tile_range tr = tile_of<shrink_tile>(p);
  if (tr.begin >= tr.end) {
    pdl_begin();
    return;
  }
  const int m = static_cast<int>(blockIdx.y) / groups;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y % groups) * shrink_rows;
  const int rows = static_cast<int>(p.rank - r0 < shrink_rows ? p.rank - r0 : shrink_rows);
  const int ntok = static_cast<int>(tr.end - tr.begin);
  const T* x = static_cast<const T*>(p.x);
  const T* a = static_cast<const T*>(p.modules[m].a) + (tr.slot * p.rank + r0) * p.in;
  if (preload) {
    constexpr int64_t line = 128 / sizeof(T);  // elements a 128-byte line
    for (int64_t e = static_cast<int64_t>(threadIdx.x) * line; e < rows * p.in; e += shrink_threads * line) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(a + e));
    }
  }
  pdl_begin();
  const T* xs[shrink_tile];
#pragma unroll
  for (int i = 0; i < shrink_tile; ++i) {
    xs[i] = x + static_cast<int64_t>(p.sorted_tokens[tr.begin + (i < ntok ? i : 0)]) * p.in;
  }
  float acc[shrink_tile][shrink_rows] = {};
  constexpr int vec = vec16<T>::size;
  if (p.in % vec == 0) {
    for (int64_t k = static_cast<int64_t>(threadIdx.x) * vec; k < p.in; k += shrink_threads * vec) {
      float xv[shrink_tile][vec];
#pragma unroll
      for (int i = 0; i < shrink_tile; ++i) {
        const vec16<T> v = load16(xs[i] + k);  // (tokens past ntok: the first one again)
#pragma unroll
        for (int e = 0; e < vec; ++e) xv[i][e] = to_float(v.v[e]);
      }
#pragma unroll
      for (int rr = 0; rr < shrink_rows; ++rr) {
        if (rr < rows) {
          const vec16<T> v = load16(a + rr * p.in + k);
#pragma unroll
          for (int e = 0; e < vec; ++e) {
            const float af = to_float(v.v[e]);
#pragma unroll
            for (int i = 0; i < shrink_tile; ++i) acc[i][rr] += af * xv[i][e];
          }
        }
      }
    }
  } else {
    for (int64_t k = threadIdx.x; k < p.in; k += shrink_threads) {
      float xv[shrink_tile];
#pragma unroll
      for (int i = 0; i < shrink_tile; ++i) xv[i] = to_float(xs[i][k]);
#pragma unroll
      for (int rr = 0; rr < shrink_rows; ++rr) {
        if (rr < rows) {
          const float af = to_float(a[rr * p.in + k]);
#pragma unroll
          for (int i = 0; i < shrink_tile; ++i) acc[i][rr] += af * xv[i];
        }
      }
    }
  }
  __shared__ float partial[shrink_threads / 32][shrink_tile][shrink_rows];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int i = 0; i < shrink_tile; ++i) {
#pragma unroll
    for (int rr = 0; rr < shrink_rows; ++rr) {
      const float s = warp_sum(acc[i][rr]);
      if (lane == 0) partial[warp][i][rr] = s;
    }
  }
  __syncthreads();
  if (threadIdx.x < shrink_tile * shrink_rows) {
    const int i = static_cast<int>(threadIdx.x) / shrink_rows, rr = static_cast<int>(threadIdx.x) % shrink_rows;
    if (i < ntok && rr < rows) {
      float s = 0;
#pragma unroll
      for (int w = 0; w < shrink_threads / 32; ++w) s += partial[w][i][rr];
      const int64_t t = p.sorted_tokens[tr.begin + i];
      p.u[t * p.u_stride + m * p.rank + r0 + rr] = s;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(threads) expand_kernel(lora_args p, int chunks0,
                                                         int chunks1) {
  pdl_begin();
  const tile_range tr = tile_of<tile>(p);
  if (tr.begin >= tr.end) return;
  const module_chunk mc = module_chunk_of(p, chunks0, chunks1);
  const int m = mc.module;
  const int64_t chunk = mc.chunk, col = mc.col;
  const int ntok = static_cast<int>(tr.end - tr.begin);
  extern __shared__ float u_tile[];  // [tile][rank]
  for (int64_t e = threadIdx.x; e < static_cast<int64_t>(ntok) * p.rank; e += threads) {
    const int64_t i = e / p.rank, r = e % p.rank;
    u_tile[i * p.rank + r] = p.u[static_cast<int64_t>(p.sorted_tokens[tr.begin + i]) * p.u_stride + m * p.rank + r];
  }
  __syncthreads();
  const int64_t out_cols = p.modules[m].out_cols;
  const int64_t j = chunk * threads + threadIdx.x;
  if (j >= out_cols) return;
  const T* b = static_cast<const T*>(p.modules[m].b) + j * p.slots * p.rank + tr.slot * p.rank;
  float acc[tile] = {};
  constexpr int vec = vec16<T>::size;
  if (p.rank % vec == 0) {
    for (int64_t r = 0; r < p.rank; r += vec) {
      const vec16<T> v = load16(b + r);
#pragma unroll
      for (int e = 0; e < vec; ++e) {
        const float bv = to_float(v.v[e]);
#pragma unroll
        for (int i = 0; i < tile; ++i) acc[i] += bv * u_tile[i * p.rank + r + e];  // (rows past ntok: unused)
      }
    }
  } else {
    for (int64_t r = 0; r < p.rank; ++r) {
      const float bv = to_float(b[r]);
#pragma unroll
      for (int i = 0; i < tile; ++i) acc[i] += bv * u_tile[i * p.rank + r];
    }
  }
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int i = 0; i < tile; ++i) {
    if (i < ntok) {
      T* o = out + static_cast<int64_t>(p.sorted_tokens[tr.begin + i]) * p.out_stride + col + j;
      *o = from_float<T>(to_float(*o) + acc[i]);
    }
  }
}

}  // namespace
}  // namespace troupe::cuda

#include "kernels/cuda/lora/sgmv_mma.cuh"

namespace troupe::cuda {
namespace {

template <class T>
void run_shrink(const lora_args& p, cudaStream_t stream);
template <class T>
void run_expand(const lora_args& p, cudaStream_t stream);

template <class T, int RK>
void launch_expand_mma(const lora_args& p, cudaStream_t stream, dim3 grid, int c0, int c1) {
  launch_pdl(expand_mma_kernel<T, RK>, grid, dim3(128), 0, stream, p, c0, c1);
}

// Tensor cores for bf16/f16 steps of many tokens (sgmv_mma.cuh).
template <class T>
void run_mma(const lora_args& p, cudaStream_t stream) {
  const unsigned blocks = tile_blocks(p, mma_tile);
  if (p.in % 8 == 0) {
    const int groups = static_cast<int>((p.rank + 15) / 16);
    launch_pdl(shrink_mma_kernel<T>, dim3(blocks, static_cast<unsigned>(p.count * groups)), dim3(128), 0, stream,
               p, groups);
    TROUPE_CUDA_CHECK(cudaGetLastError());
  } else {
    run_shrink<T>(p, stream);
  }
  if (p.rank > mma_max_rank) return run_expand<T>(p, stream);
  int chunks[lora_max_modules] = {0, 0, 0};
  int total = 0;
  for (int m = 0; m < p.count; ++m) {
    chunks[m] = static_cast<int>((p.modules[m].out_cols + mma_cols - 1) / mma_cols);
    total += chunks[m];
  }
  const dim3 grid(blocks, static_cast<unsigned>(total));
  const int64_t rk = (p.rank + 15) / 16 * 16;
  if (rk == 16) launch_expand_mma<T, 16>(p, stream, grid, chunks[0], chunks[1]);
  else if (rk == 32) launch_expand_mma<T, 32>(p, stream, grid, chunks[0], chunks[1]);
  else if (rk == 48) launch_expand_mma<T, 48>(p, stream, grid, chunks[0], chunks[1]);
  else launch_expand_mma<T, 64>(p, stream, grid, chunks[0], chunks[1]);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void run(const lora_args& p, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.n >= lora_mma_min_tokens) return run_mma<T>(p, stream);
  }
  run_shrink<T>(p, stream);
  run_expand<T>(p, stream);
}

template <class T>
void run_shrink(const lora_args& p, cudaStream_t stream) {
  const int rows = p.n <= lora_few_tokens ? shrink_rows_few : shrink_rows_many;
  const int groups = static_cast<int>((p.rank + rows - 1) / rows);
  const dim3 shrink_grid(tile_blocks(p, shrink_tile), static_cast<unsigned>(p.count * groups));
  if (rows == shrink_rows_few) {  // 512 threads: a short walk over k each
    launch_pdl(shrink_kernel<T, shrink_rows_few, 512>, shrink_grid, dim3(512), 0, stream, p, groups,
               preload_enabled());
  } else {
    launch_pdl(shrink_kernel<T, shrink_rows_many, threads>, shrink_grid, dim3(threads), 0, stream, p, groups,
               preload_enabled());
  }
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void run_expand(const lora_args& p, cudaStream_t stream) {
  int chunks[lora_max_modules] = {0, 0, 0};
  int total = 0;
  for (int m = 0; m < p.count; ++m) {
    chunks[m] = static_cast<int>((p.modules[m].out_cols + threads - 1) / threads);
    total += chunks[m];
  }
  const size_t smem = static_cast<size_t>(tile * p.rank) * sizeof(float);
  launch_pdl(expand_kernel<T>, dim3(tile_blocks(p, tile), static_cast<unsigned>(total)), dim3(threads), smem,
             stream, p, chunks[0], chunks[1]);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
__global__ void mask_slots_kernel(const float* u32, T* u, int64_t n, int64_t cols, int64_t slot_cols,
                                  int64_t rank, const int32_t* token_slots) {
  pdl_begin();
  const int64_t total = n * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / cols, s = (e % cols) % slot_cols / rank;
    u[e] = from_float<T>(token_slots[t] == s ? u32[e] : 0.0f);
  }
}

}  // namespace

void lora_mask_slots(element_type type, const float* u32, void* u, int64_t n, int count,
                     int64_t slots, int64_t rank, const int32_t* token_slots, cudaStream_t stream) {
  const int64_t cols = count * slots * rank, total = n * cols;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  switch (type) {
    case element_type::f32:
      launch_pdl(mask_slots_kernel<float>, dim3(blocks), dim3(256), 0, stream, u32,
                 static_cast<float*>(u), n, cols, slots * rank, rank, token_slots);
      break;
    case element_type::bf16:
      launch_pdl(mask_slots_kernel<__nv_bfloat16>, dim3(blocks), dim3(256), 0, stream, u32,
                 static_cast<__nv_bfloat16*>(u), n, cols, slots * rank, rank, token_slots);
      break;
    case element_type::f16:
      launch_pdl(mask_slots_kernel<__half>, dim3(blocks), dim3(256), 0, stream, u32,
                 static_cast<__half*>(u), n, cols, slots * rank, rank, token_slots);
      break;
  }
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

namespace {

// lora_shrink's and lora_add's shared preconditions.
void check_args(const lora_args& p) {
  TROUPE_CHECK(p.count >= 1 && p.count <= lora_max_modules);
  TROUPE_CHECK(p.rank >= 1 && p.rank <= lora_max_rank && p.u_stride >= p.count * p.rank);
}

}  // namespace

void lora_shrink(const lora_args& p, cudaStream_t stream) {
  check_args(p);
  TROUPE_CHECK(p.n <= lora_few_tokens);
  if (p.n == 0) return;
  by_element_type(p.type, [&](auto tag) { run_shrink<decltype(tag)>(p, stream); });
}

void lora_add(const lora_args& p, cudaStream_t stream) {
  check_args(p);
  if (p.n == 0) return;
  by_element_type(p.type, [&](auto tag) { run<decltype(tag)>(p, stream); });
}

}  // namespace troupe::cuda
