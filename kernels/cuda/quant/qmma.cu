// Packed 4-bit products on the tensor cores (model/quant_pack.h's
// tensor-core layout): a block takes 16 weight rows and 8 x NT tokens,
// its warps splitting the 64-column chunks of k; a lane's 16-byte load is
// its A fragments of four 16 x 16 tiles, turned into bf16/f16 pairs of
// (bias + code) with two bit operations (128 + code from bfloat16 0x4300
// with the code in its low mantissa bits, or 1024 + code from float16
// 0x6400; both exact) and multiplied by x on mma.sync m16n8k16 in float32;
// one more mma a tile with a fragment of ones sums x, and each group's
// sums less (bias + zero) times that are multiplied by its scale in
// float32. The warps' sums meet in shared memory in warp order (the warp
// count depends on k only), so a token's outputs do not depend on the
// other tokens.
#include "kernels/cuda/quant/qmma.h"

#include <algorithm>
#include <type_traits>

#include "common/check.h"
#include "kernels/cuda/attention/mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant/mma_tile.cuh"

namespace troupe::cuda {

namespace {

// A block's warps split k: up to mma_max_warps, about
// mma_chunks_per_warp chunks of 64 columns each (enough warps in flight
// for a product of a few rows).
constexpr int mma_max_warps = 8;
constexpr int mma_chunks_per_warp = 8;
constexpr int loads_in_flight = 4;
// Nibble n's row and column offsets in a word (model/quant_pack.h's
// row_of = {0, 8, 0, 8, 0, 8, 0, 8} and col_of = {0, 0, 8, 8, 1, 1, 9, 9}).
__device__ __forceinline__ int row_of(int n) { return (n & 1) * 8; }
__device__ __forceinline__ int col_of(int n) { return ((n >> 1) & 1) * 8 + (n >> 2); }

// The pair (bias + code) of a T's exact-integer range: bfloat16 128 + code,
// float16 1024 + code.
template <class T>
__device__ __forceinline__ constexpr uint32_t code_bias_pair() {
  return std::is_same_v<T, __nv_bfloat16> ? 0x43004300u : 0x64006400u;
}

// The bias as a float, and a T pair of ones (the fragment that sums x).
template <class T>
__device__ __forceinline__ constexpr float code_bias() {
  return std::is_same_v<T, __nv_bfloat16> ? 128.0f : 1024.0f;
}
template <class T>
__device__ __forceinline__ constexpr uint32_t code_one_pair() {
  return std::is_same_v<T, __nv_bfloat16> ? 0x3f803f80u : 0x3c003c00u;
}

// SUB: chunks a request (1, or 2 where a group spans both: one scale and
// zero load, one x pointer and one scaling of the sums for 64 codes a lane).
template <class T, int NT, int SUB>
__global__ void __launch_bounds__(mma_max_warps * 32, NT == 1 ? 3 : 2)
    packed_mma_kernel(const T* __restrict__ x, int m, packed_weight_args w, int group_shift, T* __restrict__ out,
                      int64_t ldo) {
  constexpr int in_flight = loads_in_flight / SUB;  // requests (the same bytes)
  pdl_begin();
  // 32-bit indices, pointers advanced by offsets: the address arithmetic
  // is most of a chunk's instructions otherwise.
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int tiles = (m + 8 * NT - 1) / (8 * NT);
  // Token tiles of one row block are neighbours in the grid (their weight
  // reads meet in L2).
  const int rb = static_cast<int>(blockIdx.x) / tiles, tok0 = (static_cast<int>(blockIdx.x) % tiles) * 8 * NT;
  const int k = static_cast<int>(w.cols), chunks = k / 64, steps = chunks / SUB;
  const int groups = static_cast<int>((w.cols + w.group_size - 1) / w.group_size);
  const int per_warp = (steps + warps - 1) / warps;
  const int s_begin = min(steps, warp * per_warp), s_end = min(steps, s_begin + per_warp);
  const uint4* src = reinterpret_cast<const uint4*>(w.words) + (int64_t(rb) * chunks + s_begin * SUB) * 32 + lane;
  const int64_t r0 = int64_t(rb) * 16 + g, r1 = r0 + 8;
  const T* xrow[NT];
  bool valid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int tok = tok0 + nt * 8 + g;
    valid[nt] = tok < m;
    xrow[nt] = x + int64_t(valid[nt] ? tok : 0) * k + int64_t(s_begin) * SUB * 64 + 2 * t4;
  }
  float acc[NT][4] = {};
  const uint32_t one = code_one_pair<T>(), ones[4] = {one, one, one, one};
  // A ring of in_flight requests: the codes, and the two rows' scales and
  // zeros of the request's group (both scales in one word, both zeros in
  // another), made in_flight requests ahead of their use.
  uint4 buf[in_flight][SUB];
  uint32_t sbuf[in_flight], zbuf[in_flight];
  const uint16_t* scales0 = w.scales + r0 * groups;
  const uint16_t* scales1 = w.scales + r1 * groups;
  const uint8_t* zeros0 = w.zeros + r0 * groups;
  const uint8_t* zeros1 = w.zeros + r1 * groups;
  const int n = s_end - s_begin;  // this warp's requests, from s_begin
  auto request = [&](int d, int i) {
#pragma unroll
    for (int c = 0; c < SUB; ++c) buf[d][c] = __ldcs(src + (i * SUB + c) * 32);
    const int grp = ((s_begin + i) * SUB) >> group_shift;  // (no division: it would cost more than the rest)
    sbuf[d] = uint32_t(scales0[grp]) | (uint32_t(scales1[grp]) << 16);
    zbuf[d] = uint32_t(zeros0[grp]) | (uint32_t(zeros1[grp]) << 16);
  };
#pragma unroll
  for (int d = 0; d < in_flight; ++d) {
    if (d < n) request(d, d);
  }
  for (int i0 = 0; i0 < n; i0 += in_flight) {
#pragma unroll
    for (int d = 0; d < in_flight; ++d) {
      const int i = i0 + d;
      if (i < n) {
      uint4 q[SUB];
#pragma unroll
      for (int c = 0; c < SUB; ++c) q[c] = buf[d][c];
      const float s0 = half_bits_to_float(uint16_t(sbuf[d])), s1 = half_bits_to_float(uint16_t(sbuf[d] >> 16));
      // The zeros come off after the products: sum (bias + code) x, less
      // (bias + zero) sum x, with sum x from one more mma a tile of a
      // fragment of ones (exact products; float32 sums).
      const float z0 = code_bias<T>() + float(zbuf[d] & 0xffu), z1 = code_bias<T>() + float(zbuf[d] >> 16);
      if (i + in_flight < n) request(d, i + in_flight);
      // Even tiles into one sum, odd ones into another: two chains of
      // dependent mma instructions instead of one.
      float part[2][NT][4] = {}, sx[NT][4] = {};
#pragma unroll
      for (int c = 0; c < SUB; ++c) {
      const uint32_t words[4] = {q[c].x, q[c].y, q[c].z, q[c].w};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        uint32_t a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = ((words[t] >> (4 * r)) & 0x000f000fu) | code_bias_pair<T>();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const T* xc = xrow[nt] + i * SUB * 64;  // (the tile's offsets: immediates)
          const uint32_t b0 = valid[nt] ? *reinterpret_cast<const uint32_t*>(xc + c * 64 + t * 16) : 0u;
          const uint32_t b1 = valid[nt] ? *reinterpret_cast<const uint32_t*>(xc + c * 64 + t * 16 + 8) : 0u;
          attention::mma_16816<T>(part[t % 2][nt], a, b0, b1);
          attention::mma_16816<T>(sx[nt], ones, b0, b1);
        }
      }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        // Registers 0 and 1: row g (zero z0); 2 and 3: row g + 8.
        acc[nt][0] = fmaf(s0, fmaf(-z0, sx[nt][0], part[0][nt][0] + part[1][nt][0]), acc[nt][0]);
        acc[nt][1] = fmaf(s0, fmaf(-z0, sx[nt][1], part[0][nt][1] + part[1][nt][1]), acc[nt][1]);
        acc[nt][2] = fmaf(s1, fmaf(-z1, sx[nt][2], part[0][nt][2] + part[1][nt][2]), acc[nt][2]);
        acc[nt][3] = fmaf(s1, fmaf(-z1, sx[nt][3], part[0][nt][3] + part[1][nt][3]), acc[nt][3]);
      }
      }
    }
  }
  reduce_and_store_tile<T, NT, mma_max_warps>(acc, m, tok0, r0, out, ldo);
}

// One thread a tensor-core word: its 8 codes' (row, column) places, as
// model/quant_pack.h spells them.
struct mma_word {
  int64_t row, col;  // of nibble 0; nibble n: row + row_of(n), col + col_of(n)
};
__device__ __forceinline__ mma_word place_of(int64_t i, int64_t chunks) {
  const int t = static_cast<int>(i % 4), lane = static_cast<int>((i / 4) % 32);
  const int64_t bc = i / 128;
  return {(bc / chunks) * 16 + lane / 4, (bc % chunks) * 64 + t * 16 + 2 * (lane % 4)};
}

__global__ void to_mma_layout_kernel(packed_weight_args w, uint32_t* __restrict__ mma_words) {
  const int64_t wpr = w.cols / 8, chunks = w.cols / 64;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < w.rows * wpr;
       i += int64_t(gridDim.x) * blockDim.x) {
    const mma_word p = place_of(i, chunks);
    uint32_t word = 0;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int64_t row = p.row + row_of(n), col = p.col + col_of(n);
      word |= ((w.words[row * wpr + col / 8] >> (4 * (col % 8))) & 0xfu) << (4 * n);
    }
    mma_words[i] = word;
  }
}

// One warp a 16-row x 64-column tile: each lane's 16 bytes decoded into
// the tile in shared memory ((code - zero) * scale in float32, rounded
// once to T), then written out a row half (32 columns) a lane.
constexpr int dequantize_warps = 8;
template <class T>
__global__ void __launch_bounds__(dequantize_warps * 32)
    dequantize_mma_kernel(packed_weight_args w, const int32_t* __restrict__ perm, T* __restrict__ out) {
  pdl_begin();
  __shared__ T tile[dequantize_warps][16][64];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t chunks = w.cols / 64, groups = (w.cols + w.group_size - 1) / w.group_size;
  const int64_t tiles = w.rows / 16 * chunks;
  for (int64_t i = int64_t(blockIdx.x) * dequantize_warps + warp; i < tiles;
       i += int64_t(gridDim.x) * dequantize_warps) {
    const int64_t b = i / chunks, c = i % chunks;
    const uint4 q = __ldcs(reinterpret_cast<const uint4*>(w.words) + i * 32 + lane);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const int64_t grp = c * 64 / w.group_size;
    float scale[2], zero[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = b * 16 + g + 8 * h;
      scale[h] = half_bits_to_float(w.scales[row * groups + grp]);
      zero[h] = float(w.zeros[row * groups + grp]);
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int h = row_of(n) / 8;
        const float code = float((words[t] >> (4 * n)) & 0xfu);
        tile[warp][g + row_of(n)][t * 16 + 2 * t4 + col_of(n)] = from_float<T>(__fmul_rn(code - zero[h], scale[h]));
      }
    }
    __syncwarp();
    const int row = lane / 2, half = lane % 2;
    T* dst = out + (b * 16 + row) * w.cols + c * 64;
    if (perm == nullptr) {
      constexpr int per16 = 16 / sizeof(T);
#pragma unroll
      for (int v = 0; v < 32 / per16; ++v) {
        *reinterpret_cast<uint4*>(dst + half * 32 + v * per16) =
            *reinterpret_cast<const uint4*>(&tile[warp][row][half * 32 + v * per16]);
      }
    } else {
      const int32_t* p = perm + c * 64 + half * 32;
      T* row_out = out + (b * 16 + row) * w.cols;
      for (int j = 0; j < 32; ++j) row_out[p[j]] = tile[warp][row][half * 32 + j];
    }
    __syncwarp();
  }
}

template <class T, int NT, int SUB>
void launch_mma(const void* x, int64_t m, const packed_weight_args& w, void* out, int64_t ldo, cudaStream_t stream) {
  const int64_t tiles = (m + 8 * NT - 1) / (8 * NT);
  const int64_t warps = std::clamp<int64_t>(w.cols / 64 / mma_chunks_per_warp, 1, mma_max_warps);
  // A chunk's group: chunk >> group_shift (groups of 2^n chunks, or the
  // whole input).
  int group_shift = 62;
  if (w.group_size < w.cols) {
    group_shift = 0;
    while ((int64_t{64} << group_shift) < w.group_size) ++group_shift;
  }
  launch_pdl(packed_mma_kernel<T, NT, SUB>, dim3(static_cast<unsigned>(w.rows / 16 * tiles)),
             dim3(static_cast<unsigned>(warps * 32)), 0, stream, static_cast<const T*>(x), static_cast<int>(m), w,
             group_shift, static_cast<T*>(out), ldo);
}

}  // namespace

bool packed_mma_supported(element_type t, int64_t m, const packed_weight_args& w, const void* x) {
  const int64_t group_chunks = w.group_size / 64;
  return (t == element_type::bf16 || t == element_type::f16) && m >= 1 && m <= packed_mma_rows && w.mma &&
         w.bits == 4 && w.rows % 16 == 0 && w.cols % 64 == 0 && w.group_size % 64 == 0 &&
         (w.group_size >= w.cols || (group_chunks & (group_chunks - 1)) == 0) &&
         reinterpret_cast<uintptr_t>(x) % 4 == 0;
}

void packed_mma(element_type t, const void* x, int64_t m, const packed_weight_args& w, void* out, int64_t ldo,
                cudaStream_t stream) {
  TROUPE_CHECK(packed_mma_supported(t, m, w, x));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    // Two chunks a request where a group spans them.
    const bool pairs = w.cols % 128 == 0 && w.group_size % 128 == 0;
    if (m <= 8) return pairs ? launch_mma<T, 1, 2>(x, m, w, out, ldo, stream) : launch_mma<T, 1, 1>(x, m, w, out, ldo, stream);
    pairs ? launch_mma<T, 2, 2>(x, m, w, out, ldo, stream) : launch_mma<T, 2, 1>(x, m, w, out, ldo, stream);
  };
  if (t == element_type::bf16) return run(__nv_bfloat16{});
  run(__half{});
}

void packed_to_mma_layout(const packed_weight_args& w, uint32_t* mma_words, cudaStream_t stream) {
  TROUPE_CHECK(w.bits == 4 && w.rows % 16 == 0 && w.cols % 64 == 0);
  to_mma_layout_kernel<<<grid_stride_blocks(w.rows * w.cols / 8, 256), 256, 0, stream>>>(w, mma_words);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void packed_dequantize_mma(element_type t, const packed_weight_args& w, const int32_t* perm, void* out,
                           cudaStream_t stream) {
  const int64_t tiles = w.rows / 16 * (w.cols / 64);
  const dim3 grid(grid_stride_blocks(tiles, dequantize_warps));
  const dim3 block(dequantize_warps * 32);
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    launch_pdl(dequantize_mma_kernel<T>, grid, block, 0, stream, w, perm, static_cast<T*>(out));
  });
}

}  // namespace troupe::cuda
