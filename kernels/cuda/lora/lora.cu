// Multi-LoRA (Punica's BGMV): every token of a batch may use another
// adapter slot, so the low-rank product is two small gathered kernels
// rather than one GEMM. Tokens go in tiles of TILE consecutive tokens: 1
// for small batches (decode: many small blocks), 8 from 64 tokens on
// (prefill: a row of a or b is read once for a tile's tokens of one slot).
// Tokens of a tile that share its first valid slot (a prefill's do) use
// the tile's one load of a or b; the others load their own rows.
//
// shrink: u[t, r] = a[s * rank + r, :] . x[t, :]. A block (128 threads)
// per token tile and group of R rank rows (R = 8; 2 for a few tokens, so
// that a decode step still has some blocks); its threads split k, in
// 16-byte loads where in and the pointers allow (coalesced along the rows
// of x and a), each thread sums its share of the TILE x R dot products in
// float32, then warp shuffles and shared memory add the threads' shares;
// u is written in float32.
//
// expand: out[t, col0 + j] += b[s * out_cols + j, :] . u[t, :]. A thread
// per output column j and token tile (128 columns a block); the block
// copies the tile's u rows to shared memory (read back as broadcasts),
// each thread requests its out elements first, then walks its b row's
// `rank` contiguous values (16-byte loads where rank and b allow), sums in
// float32, and adds the sum to out's element in float32, rounding once to
// out's type.
//
// A token whose slot is -1 (or >= slots) is skipped whole: its u row is
// not written, its out row not read or written. Both kernels wait for
// their predecessor (pdl_begin) first, in every thread, before any memory
// access (token_slots included), so a grid whose tokens are all skipped
// still completes only after the kernel before it.
#include "kernels/cuda/lora/lora.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

constexpr int big_tile = 8;
constexpr int64_t tile_min_tokens = 64;  // from here on, tiles of big_tile tokens
constexpr int shrink_threads = 128;
constexpr int shrink_rows = 8;        // rank rows a shrink block (R)
constexpr int shrink_few_rows = 2;    // R for batches of fewer blocks than this:
constexpr int64_t shrink_min_blocks = 128;
constexpr int expand_threads = 128;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// A token's slot, -1 past n, for no adapter or out of range.
__device__ __forceinline__ int token_slot(const int32_t* token_slots, int64_t t, int64_t n,
                                          int64_t slots) {
  const int s = t < n ? token_slots[t] : -1;
  return s < slots ? s : -1;
}

// The slots of tokens t0 .. t0 + TILE - 1; returns the first valid one (-1
// if none).
template <int TILE>
__device__ __forceinline__ int tile_slots(const int32_t* token_slots, int64_t t0, int64_t n,
                                          int64_t slots, int (&slot)[TILE]) {
  int lead = -1;
#pragma unroll
  for (int i = 0; i < TILE; ++i) {
    slot[i] = token_slot(token_slots, t0 + i, n, slots);
    if (lead < 0) lead = slot[i];
  }
  return lead;
}

template <class T, int W>
__device__ __forceinline__ void to_floats(const vec16<T>& v, float (&f)[W]) {
#pragma unroll
  for (int e = 0; e < W; ++e) f[e] = to_float(v.v[e]);
}

// Grid: (token tiles, rank row groups of R). Static shared memory: the
// warps' partial sums.
template <class T, int TILE, int R, bool VEC>
__global__ void __launch_bounds__(shrink_threads)
    lora_shrink_kernel(const T* x, int64_t n, int64_t in, const T* a, int64_t slots,
                       int64_t rank, const int32_t* token_slots, float* u, int64_t u_stride) {
  constexpr int warps = shrink_threads / 32;
  __shared__ float partial[warps][TILE * R];
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t t0 = int64_t(blockIdx.x) * TILE;
  const int64_t r0 = int64_t(blockIdx.y) * R;
  int slot[TILE];
  const int lead = tile_slots<TILE>(token_slots, t0, n, slots, slot);
  if (lead < 0) return;  // the same for the whole block: before the barrier
  const int64_t rows = rank - r0 < R ? rank - r0 : R;  // this group's rank rows
  float acc[TILE][R];
#pragma unroll
  for (int i = 0; i < TILE; ++i) {
#pragma unroll
    for (int q = 0; q < R; ++q) acc[i][q] = 0.0f;
  }
  const T* a_lead = a + (int64_t(lead) * rank + r0) * in;
  // acc[i][q] += a row (r0 + q) of token i's slot . xf[i], over W elements
  // from element k, where af (a_lead's) serves the tokens of the lead slot.
  auto step = [&](auto width, int64_t k, const float (&af)[decltype(width)::value],
                  const float (&xf)[TILE][decltype(width)::value], int q, auto load_a) {
    constexpr int W = decltype(width)::value;
#pragma unroll
    for (int i = 0; i < TILE; ++i) {
      if (slot[i] < 0) continue;
      float own[W];
      const float* ai = af;
      if (slot[i] != lead) {
        load_a((int64_t(slot[i]) * rank + r0 + q) * in + k, own);
        ai = own;
      }
      float sum = acc[i][q];
#pragma unroll
      for (int e = 0; e < W; ++e) sum = fmaf(ai[e], xf[i][e], sum);
      acc[i][q] = sum;
    }
  };
  if constexpr (VEC) {
    constexpr int W = vec16<T>::size;
    const int64_t vecs = in / W;
    auto load_a = [&](int64_t offset, float (&f)[W]) { to_floats(load16(a + offset), f); };
#pragma unroll(TILE == 1 ? 2 : 1)
    for (int64_t c = threadIdx.x; c < vecs; c += shrink_threads) {
      const int64_t k = c * W;
      float xf[TILE][W];
#pragma unroll
      for (int i = 0; i < TILE; ++i) {
        if (slot[i] >= 0) to_floats(load16(x + (t0 + i) * in + k), xf[i]);
      }
#pragma unroll
      for (int q = 0; q < R; ++q) {
        if (q >= rows) break;
        float af[W];
        to_floats(load16(a_lead + q * in + k), af);
        step(std::integral_constant<int, W>{}, k, af, xf, q, load_a);
      }
    }
  } else {
    auto load_a = [&](int64_t offset, float (&f)[1]) { f[0] = to_float(a[offset]); };
#pragma unroll(TILE == 1 ? 4 : 1)
    for (int64_t k = threadIdx.x; k < in; k += shrink_threads) {
      float xf[TILE][1];
#pragma unroll
      for (int i = 0; i < TILE; ++i) {
        if (slot[i] >= 0) xf[i][0] = to_float(x[(t0 + i) * in + k]);
      }
#pragma unroll
      for (int q = 0; q < R; ++q) {
        if (q >= rows) break;
        const float af[1] = {to_float(a_lead[q * in + k])};
        step(std::integral_constant<int, 1>{}, k, af, xf, q, load_a);
      }
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < TILE; ++i) {
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const float v = warp_sum(acc[i][q]);
      if (lane == 0) partial[warp][i * R + q] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < TILE * R) {
    const int i = threadIdx.x / R, q = threadIdx.x % R;
    if (q < rows && token_slot(token_slots, t0 + i, n, slots) >= 0) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < warps; ++w) v += partial[w][threadIdx.x];
      u[(t0 + i) * u_stride + r0 + q] = v;
    }
  }
}

// Grid: (token tiles, out_cols / expand_threads); a thread per column.
// Dynamic shared memory: TILE * rank floats.
template <class T, int TILE, bool VEC>
__global__ void __launch_bounds__(expand_threads)
    lora_expand_kernel(const float* u, int64_t u_stride, int64_t n, const T* b, int64_t slots,
                       int64_t rank, int64_t out_cols, const int32_t* token_slots, T* out,
                       int64_t out_stride, int64_t col0) {
  extern __shared__ float4 shared_u4[];
  float* us = reinterpret_cast<float*>(shared_u4);  // [TILE, rank]
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t t0 = int64_t(blockIdx.x) * TILE;
  int slot[TILE];
  const int lead = tile_slots<TILE>(token_slots, t0, n, slots, slot);
  if (lead < 0) return;  // the same for the whole block: before the barrier
  const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool column = j < out_cols;
  // out's elements requested first: they travel while u and b do.
  float before[TILE];
#pragma unroll
  for (int i = 0; i < TILE; ++i) {
    before[i] = column && slot[i] >= 0 ? to_float(out[(t0 + i) * out_stride + col0 + j]) : 0.0f;
  }
  // u rows of skipped tokens inside n are copied too (unused).
  const int tile_rank = static_cast<int>(TILE * rank), r32 = static_cast<int>(rank);
  for (int e = threadIdx.x; e < tile_rank; e += blockDim.x) {
    const int i = e / r32;
    us[e] = t0 + i < n ? u[(t0 + i) * u_stride + (e - i * r32)] : 0.0f;
  }
  __syncthreads();
  if (!column) return;
  const T* b_lead = b + (int64_t(lead) * out_cols + j) * rank;
  float acc[TILE];
#pragma unroll
  for (int i = 0; i < TILE; ++i) acc[i] = 0.0f;
  if constexpr (VEC) {
    // rank is a multiple of W (itself a multiple of 4): float4 reads of us.
    constexpr int W = vec16<T>::size;
#pragma unroll 4
    for (int r = 0; r < r32; r += W) {
      float bf[W];
      to_floats(load16(b_lead + r), bf);
#pragma unroll
      for (int i = 0; i < TILE; ++i) {
        if (slot[i] < 0) continue;
        float own[W];
        const float* bi = bf;
        if (slot[i] != lead) {
          to_floats(load16(b + (int64_t(slot[i]) * out_cols + j) * rank + r), own);
          bi = own;
        }
        const float* ui = us + i * r32 + r;
        float sum = acc[i];
#pragma unroll
        for (int e = 0; e < W; e += 4) {
          const float4 uu = *reinterpret_cast<const float4*>(ui + e);
          sum = fmaf(bi[e], uu.x, sum);
          sum = fmaf(bi[e + 1], uu.y, sum);
          sum = fmaf(bi[e + 2], uu.z, sum);
          sum = fmaf(bi[e + 3], uu.w, sum);
        }
        acc[i] = sum;
      }
    }
  } else {
#pragma unroll 4
    for (int r = 0; r < r32; ++r) {
      const float bv = to_float(b_lead[r]);
#pragma unroll
      for (int i = 0; i < TILE; ++i) {
        if (slot[i] < 0) continue;
        const float bi =
            slot[i] == lead ? bv : to_float(b[(int64_t(slot[i]) * out_cols + j) * rank + r]);
        acc[i] = fmaf(bi, us[i * r32 + r], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < TILE; ++i) {
    if (slot[i] >= 0) out[(t0 + i) * out_stride + col0 + j] = from_float<T>(before[i] + acc[i]);
  }
}

template <class F>
void by_type(element_type t, F&& f) {
  switch (t) {
    case element_type::f32: return f(float{});
    case element_type::bf16: return f(__nv_bfloat16{});
    case element_type::f16: return f(__half{});
  }
}

// f(tile, vec): both as compile-time constants.
template <class F>
void by_variant(bool big, bool vec, F&& f) {
  using one = std::integral_constant<int, 1>;
  using eight = std::integral_constant<int, big_tile>;
  if (big) {
    if (vec) return f(eight{}, std::true_type{});
    return f(eight{}, std::false_type{});
  }
  if (vec) return f(one{}, std::true_type{});
  return f(one{}, std::false_type{});
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned blocks(int64_t items, int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

void lora_shrink(element_type t, const void* x, int64_t n, int64_t in, const void* a,
                 int64_t slots, int64_t rank, const int32_t* token_slots, float* u,
                 int64_t u_stride, cudaStream_t stream) {
  if (n == 0 || rank == 0) return;
  by_type(t, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = in % vec16<T>::size == 0 && aligned16(x) && aligned16(a);
    const bool big = n >= tile_min_tokens;
    const bool few = !big && n * blocks(rank, shrink_rows) < shrink_min_blocks;
    by_variant(big, vec, [&](auto tile, auto v) {
      constexpr int TILE = decltype(tile)::value;
      constexpr bool VEC = decltype(v)::value;
      auto go = [&](auto rows) {
        constexpr int R = decltype(rows)::value;
        const dim3 grid(blocks(n, TILE), blocks(rank, R));
        launch_pdl(lora_shrink_kernel<T, TILE, R, VEC>, grid, shrink_threads, 0, stream,
                   static_cast<const T*>(x), n, in, static_cast<const T*>(a), slots, rank,
                   token_slots, u, u_stride);
      };
      if constexpr (TILE == 1) {
        if (few) return go(std::integral_constant<int, shrink_few_rows>{});
      }
      go(std::integral_constant<int, shrink_rows>{});
    });
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void lora_expand(element_type t, const float* u, int64_t u_stride, int64_t n, const void* b,
                 int64_t slots, int64_t rank, int64_t out_cols, const int32_t* token_slots,
                 void* out, int64_t out_stride, int64_t col0, cudaStream_t stream) {
  if (n == 0 || rank == 0 || out_cols == 0) return;
  by_type(t, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = rank % vec16<T>::size == 0 && aligned16(b);
    by_variant(n >= tile_min_tokens, vec, [&](auto tile, auto v) {
      constexpr int TILE = decltype(tile)::value;
      const dim3 grid(blocks(n, TILE), blocks(out_cols, expand_threads));
      const size_t smem = static_cast<size_t>(TILE * rank) * sizeof(float);
      launch_pdl(lora_expand_kernel<T, TILE, decltype(v)::value>, grid, expand_threads, smem,
                 stream, u, u_stride, n, static_cast<const T*>(b), slots, rank, out_cols,
                 token_slots, static_cast<T*>(out), out_stride, col0);
    });
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void lora_add(element_type t, const void* x, int64_t n, int64_t in, const void* a,
              const void* b, int64_t slots, int64_t rank, int64_t out_cols,
              const int32_t* token_slots, float* u, int64_t u_stride, void* out,
              int64_t out_stride, int64_t col0, cudaStream_t stream) {
  lora_shrink(t, x, n, in, a, slots, rank, token_slots, u, u_stride, stream);
  lora_expand(t, u, u_stride, n, b, slots, rank, out_cols, token_slots, out, out_stride, col0,
              stream);
}

}  // namespace troupe::cuda
