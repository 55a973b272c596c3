// FP8 W8A8 kernels (kernels/cuda/quant/fp8.h): activation quantization,
// the float8 mma.sync product for few tokens, dummy FP8 weights.
//
// The product: a block takes 16 weight rows and 8 x NT tokens, its warps
// splitting k in chunks of 64 bytes. mma.sync m16n8k32 (e4m3) wants lane
// (g, t) = (lane / 4, lane % 4) to hold A's row g and g + 8 at k = 4 t +
// [0, 4) and 16 + 4 t + [0, 4), and B's token g at the same k; a sum over
// k does not care which physical input each k is, so long as A and B
// agree. So lane t loads the 16 bytes [16 t, 16 t + 16) of its two rows
// and of its token (three plain 16-byte loads, no repacking at load): the
// chunk's first mma takes bytes 0-7 of them (k 4 t + i from byte i, 16 +
// 4 t + i from byte 4 + i), the second bytes 8-15. Float32 sums a group
// of block_in inputs, then times the token's and the weight block's
// scales; the warps' sums meet in shared memory in warp order.
#include "kernels/cuda/quant/fp8.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>

#include "common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant/mma_tile.cuh"

namespace troupe::cuda {

namespace {

constexpr float e4m3_max = 448.0f;
constexpr int quant_threads = 256;

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.0f ? __fdiv_rn(amax, e4m3_max) : 1.0f; }

// The largest of the quant_threads threads' v (every thread gets it).
__device__ __forceinline__ float block_max(float v) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __shared__ float warp_max[quant_threads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < quant_threads / 32; ++w) v = fmaxf(v, warp_max[w]);
  return v;
}

// 8 elements (16 bytes of bf16/f16, 32 of f32) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    unpack8<T>(*reinterpret_cast<const uint4*>(p), f);
  }
}

__device__ __forceinline__ uint2 quantize8(const float (&f)[8], float scale) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= uint32_t(to_e4m3(f[i], scale)) << (8 * i);
    hi |= uint32_t(to_e4m3(f[4 + i], scale)) << (8 * i);
  }
  return make_uint2(lo, hi);
}

// One block a row, 8 elements a thread a pass. GROUP128: each 16 lanes'
// 128 elements are a group (cols a multiple of 128); otherwise the row is.
template <class T, bool GROUP128>
__global__ void __launch_bounds__(quant_threads)
    quantize_kernel(const T* __restrict__ x, int64_t cols, uint8_t* __restrict__ codes, float* __restrict__ scales) {
  pdl_begin();
  const int64_t row = blockIdx.x, rows = gridDim.x;
  const T* xr = x + row * cols;
  uint8_t* cr = codes + row * cols;
  float f[8];
  if constexpr (GROUP128) {
    for (int64_t base = 0; base < cols; base += quant_threads * 8) {  // the same passes for every thread
      const int64_t j = base + threadIdx.x * 8;
      const bool in = j < cols;
      float amax = 0.0f;
      if (in) {
        load8(xr + j, f);
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
      }
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (!in) continue;
      const float s = scale_of(amax);
      if (threadIdx.x % 16 == 0) scales[(j / 128) * rows + row] = s;
      *reinterpret_cast<uint2*>(cr + j) = quantize8(f, s);
    }
  } else {
    float amax = 0.0f;
    for (int64_t j = threadIdx.x * 8; j < cols; j += quant_threads * 8) {
      load8(xr + j, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    }
    const float s = scale_of(block_max(amax));
    if (threadIdx.x == 0) scales[row] = s;
    for (int64_t j = threadIdx.x * 8; j < cols; j += quant_threads * 8) {
      load8(xr + j, f);
      *reinterpret_cast<uint2*>(cr + j) = quantize8(f, s);
    }
  }
}

__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int mma_max_warps = 8;

// A request: 2 chunks (128 inputs: one block_in-128 group, or part of a
// row's group), IN of them in flight a warp (2 KB each). The first IN are
// requested before the PDL wait: the weights are no kernel's output, so
// their loads overlap the activations' quantization.
template <class T, int NT, int IN>
__global__ void __launch_bounds__(mma_max_warps * 32, 2)
    fp8_mma_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, int m, fp8_weight_args w,
                   T* __restrict__ out, int64_t ldo, bool preload) {
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int tiles = (m + 8 * NT - 1) / (8 * NT);
  const int rb = static_cast<int>(blockIdx.x) / tiles, tok0 = (static_cast<int>(blockIdx.x) % tiles) * 8 * NT;
  const int k = static_cast<int>(w.cols), steps = k / 128;
  const bool per_row = w.block_in == w.cols;  // one group a row (else groups of 128: one a request)
  const int per_warp = (steps + warps - 1) / warps;
  const int s_begin = min(steps, warp * per_warp), s_end = min(steps, s_begin + per_warp);
  const int64_t r0 = int64_t(rb) * 16 + g, r1 = r0 + 8;
  // 16-byte words: row g's at a0p[j], row g + 8's at a0p[j + row8].
  const uint4* a0p = reinterpret_cast<const uint4*>(w.codes + r0 * k) + s_begin * 8 + t4;
  const int row8 = k / 2;  // 8 rows of k bytes, in 16-byte words
  const float* ws0 = w.scales + (r0 / w.block_out) * w.scale_stride;
  const int ws8 = static_cast<int>((r1 / w.block_out - r0 / w.block_out) * w.scale_stride);
  // A ring of IN requests: the weights' codes and scales (requested IN
  // ahead; the first before the PDL wait) and the tokens' codes and scales
  // (after it: the quantization's output).
  uint4 buf[IN][2][2];  // [request][chunk][row g, g + 8]
  float2 wbuf[IN];      // the request's weight scales (rows g, g + 8)
  uint4 xbuf[IN][NT][2];
  float2 xsbuf[IN][NT];  // the lane's C tokens' scales (2 t4, 2 t4 + 1)
  const int n = s_end - s_begin;
  auto request_weights = [&](int d, int i) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      buf[d][c][0] = __ldcs(a0p + i * 8 + c * 4);
      buf[d][c][1] = __ldcs(a0p + i * 8 + c * 4 + row8);
    }
    const int grp = per_row ? 0 : s_begin + i;
    wbuf[d] = make_float2(ws0[grp], ws0[grp + ws8]);
  };
  // The lane's B token (g of each tile: its codes) and C tokens (2 t4, 2
  // t4 + 1: their scales, group grp's at xs[grp * m + token]).
  const uint4* xp = reinterpret_cast<const uint4*>(xq) + s_begin * 8 + t4;
  const int xrow = k / 16;  // a token's codes, in 16-byte words
  auto request_tokens = [&](int d, int i) {
    const int grp = per_row ? 0 : s_begin + i;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = tok0 + nt * 8 + g, ct = tok0 + nt * 8 + 2 * t4;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        xbuf[d][nt][c] = tok < m ? xp[tok * xrow + i * 8 + c * 4] : make_uint4(0, 0, 0, 0);
      }
      xsbuf[d][nt] = make_float2(ct < m ? xs[grp * m + ct] : 0.0f, ct + 1 < m ? xs[grp * m + ct + 1] : 0.0f);
    }
  };
  if (preload) {
#pragma unroll
    for (int d = 0; d < IN; ++d) {
      if (d < n) request_weights(d, d);
    }
  }
  pdl_begin();
  if (!preload) {
#pragma unroll
    for (int d = 0; d < IN; ++d) {
      if (d < n) request_weights(d, d);
    }
  }
#pragma unroll
  for (int d = 0; d < IN; ++d) {
    if (d < n) request_tokens(d, d);
  }
  float acc[NT][4] = {};
  for (int i0 = 0; i0 < n; i0 += IN) {
#pragma unroll
    for (int d = 0; d < IN; ++d) {
      const int i = i0 + d;
      if (i < n) {
        const float2 wsc = wbuf[d];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          float part[4] = {};
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint4 b = xbuf[d][nt][c];
            const uint4 a0 = buf[d][c][0], a1 = buf[d][c][1];
            mma_e4m3(part, a0.x, a1.x, a0.y, a1.y, b.x, b.y);
            mma_e4m3(part, a0.z, a1.z, a0.w, a1.w, b.z, b.w);
          }
          const float2 xsc = xsbuf[d][nt];
          // c0, c1: row g, tokens 2 t4 and 2 t4 + 1; c2, c3: row g + 8.
          acc[nt][0] = fmaf(part[0], wsc.x * xsc.x, acc[nt][0]);
          acc[nt][1] = fmaf(part[1], wsc.x * xsc.y, acc[nt][1]);
          acc[nt][2] = fmaf(part[2], wsc.y * xsc.x, acc[nt][2]);
          acc[nt][3] = fmaf(part[3], wsc.y * xsc.y, acc[nt][3]);
        }
        // The slot's next request, once this one is in the mma's registers.
        if (i + IN < n) {
          request_weights(d, i + IN);
          request_tokens(d, i + IN);
        }
      }
    }
  }
  reduce_and_store_tile<T, NT, mma_max_warps>(acc, m, tok0, r0, out, ldo);
}

// One block a weight block (block_out x block_in): its amax, then codes.
template <class T>
__global__ void __launch_bounds__(quant_threads) fill_dummy_kernel(fp8_weight_args w, uint64_t key, float scale) {
  const int64_t bo = blockIdx.y, bi = blockIdx.x;
  const int64_t r_begin = bo * w.block_out, r_end = min(w.rows, r_begin + w.block_out);
  const int64_t c_begin = bi * w.block_in, c_end = min(w.cols, c_begin + w.block_in);
  const int64_t width = c_end - c_begin, n = (r_end - r_begin) * width;
  auto value = [&](int64_t i) {
    const int64_t r = r_begin + i / width, c = c_begin + i % width;
    return to_float(from_float<T>(dummy_value(key, r * w.cols + c, scale)));
  };
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += quant_threads) amax = fmaxf(amax, fabsf(value(i)));
  const float s = scale_of(block_max(amax));
  if (threadIdx.x == 0) const_cast<float*>(w.scales)[bo * w.scale_stride + bi] = s;
  uint8_t* codes = const_cast<uint8_t*>(w.codes);
  for (int64_t i = threadIdx.x; i < n; i += quant_threads) {
    codes[(r_begin + i / width) * w.cols + c_begin + i % width] = to_e4m3(value(i), s);
  }
}

// TROUPE_FP8_REQUESTS_PER_WARP (comparisons; default 8): a block's warps
// split k so that each takes about this many requests of 128 inputs (at
// most 8 warps).
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

template <class T, int NT, int IN>
void launch_mma(const uint8_t* xq, const float* xs, int64_t m, const fp8_weight_args& w, void* out, int64_t ldo,
                cudaStream_t stream) {
  static const int per_warp = std::max(1, env_int("TROUPE_FP8_REQUESTS_PER_WARP", 8));
  const int64_t tiles = (m + 8 * NT - 1) / (8 * NT);
  const int64_t warps = std::clamp<int64_t>(w.cols / 128 / per_warp, 1, mma_max_warps);
  launch_pdl(fp8_mma_kernel<T, NT, IN>, dim3(static_cast<unsigned>(w.rows / 16 * tiles)),
             dim3(static_cast<unsigned>(warps * 32)), 0, stream, xq, xs, static_cast<int>(m), w,
             static_cast<T*>(out), ldo, preload_enabled());
}

}  // namespace

bool fp8_supported(const fp8_weight_args& w) {
  return w.cols % 128 == 0 && w.rows % 16 == 0 && (w.block_in == 128 || w.block_in == w.cols) &&
         (16 % w.block_out == 0 || w.block_out % 16 == 0) && w.cols < (int64_t{1} << 30);
}

void fp8_quantize_activations(element_type t, const void* x, int64_t rows, int64_t cols, int64_t group,
                              uint8_t* codes, float* scales, cudaStream_t stream) {
  TROUPE_CHECK(cols % 8 == 0 && (group == cols || (group == 128 && cols % 128 == 0)));
  if (rows == 0) return;
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    auto kernel = group == cols && cols != 128 ? quantize_kernel<T, false> : quantize_kernel<T, true>;
    launch_pdl(kernel, dim3(static_cast<unsigned>(rows)), dim3(quant_threads), 0, stream, static_cast<const T*>(x),
               cols, codes, scales);
  });
}

void fp8_mma(element_type t, const uint8_t* xq, const float* xs, int64_t m, const fp8_weight_args& w, void* out,
             int64_t ldo, cudaStream_t stream) {
  TROUPE_CHECK(fp8_supported(w) && m >= 1);
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    // TROUPE_FP8_IN=4 (comparisons): four requests in flight at up to 8
    // tokens (it spills at 128 registers); two by default.
    static const bool in4 = env_int("TROUPE_FP8_IN", 2) == 4;
    if (m <= 8) {
      return in4 ? launch_mma<T, 1, 4>(xq, xs, m, w, out, ldo, stream)
                 : launch_mma<T, 1, 2>(xq, xs, m, w, out, ldo, stream);
    }
    launch_mma<T, 2, 2>(xq, xs, m, w, out, ldo, stream);
  });
}

void fp8_fill_dummy(element_type t, const fp8_weight_args& w, uint64_t key, float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((w.cols + w.block_in - 1) / w.block_in),
                  static_cast<unsigned>((w.rows + w.block_out - 1) / w.block_out));
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    fill_dummy_kernel<T><<<grid, quant_threads, 0, stream>>>(w, key, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
