#include "kernels/cuda/quant/qgemm.h"

#include "common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant/qmma.h"

namespace troupe::cuda {

namespace {

constexpr int gemv_warps = 4;  // a block's warps

// The 8 codes of packed columns 8p .. 8p + 7 of a 16-byte load (4-bit:
// word p; 8-bit: words 2p and 2p + 1) as floats v[i] = BIAS + code, BIAS
// 128 for 4-bit codes (made as bfloat16 128 + code, two at a time: the
// code in the low mantissa bits of 0x4300), 0 for 8-bit ones (float 2^23 +
// code from a byte permute, less 2^23). Both exact.
template <int BITS>
__device__ __forceinline__ void codes8(const uint4& q, int p, float (&v)[8]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
  if constexpr (BITS == 4) {
    const uint32_t word = words[p];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t pair = ((word >> (4 * i)) & 0x000f000fu) | 0x43004300u;  // columns i and i + 4
      v[i] = __uint_as_float(pair << 16);
      v[i + 4] = __uint_as_float(pair & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = words[2 * p + h];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[4 * h + b] = __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7540u + b)) - 8388608.0f;
      }
    }
  }
}

// One warp computes R rows of the weight for all M rows of x. Lane l takes
// the 16-byte loads l, l + 32, ... of each row (4-bit: 32 columns a load,
// 8-bit: 16), all in one group; per load and x row it sums x * (BIAS +
// code) and x, and adds scale * (that - (BIAS + zero) * sum x) to its
// total: the group's scale and zero applied once per load. The next
// load's codes are requested before this one's arithmetic.
template <class T, int BITS, int M, int R>
__global__ void __launch_bounds__(gemv_warps * 32)
    packed_gemv_kernel(const T* __restrict__ x, packed_weight_args w, T* __restrict__ out, int64_t ldo) {
  constexpr int IN = 128 / BITS;  // columns a 16-byte load
  constexpr float BIAS = BITS == 4 ? 128.0f : 0.0f;
  pdl_begin();
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * gemv_warps + threadIdx.x / 32) * R;
  if (row0 >= w.rows) return;
  const int64_t k = w.cols, loads = k / IN, groups = (k + w.group_size - 1) / w.group_size;
  const uint4* rows[R];
  int64_t row_of[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row_of[r] = min(row0 + r, w.rows - 1);  // rows past the end re-read the last (not stored)
    rows[r] = reinterpret_cast<const uint4*>(w.words + row_of[r] * (k * BITS / 32));
  }
  float acc[R][M] = {};
  uint4 next[R];
  int64_t c = lane;
  if (c < loads) {
#pragma unroll
    for (int r = 0; r < R; ++r) next[r] = __ldcs(rows[r] + c);
  }
  for (; c < loads; c += 32) {
    uint4 q[R];
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = next[r];
    if (c + 32 < loads) {
#pragma unroll
      for (int r = 0; r < R; ++r) next[r] = __ldcs(rows[r] + c + 32);
    }
    const int64_t g = c * IN / w.group_size;
    float scale[R], offset[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      scale[r] = half_bits_to_float(w.scales[row_of[r] * groups + g]);
      offset[r] = BIAS + float(w.zeros[row_of[r] * groups + g]);
    }
    float sum[R][M] = {}, sx[M] = {};
#pragma unroll
    for (int p = 0; p < IN / 8; ++p) {
      float xf[M][8];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        unpack8<T>(*reinterpret_cast<const uint4*>(x + m * k + c * IN + p * 8), xf[m]);
#pragma unroll
        for (int i = 0; i < 8; ++i) sx[m] += xf[m][i];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float v[8];
        codes8<BITS>(q[r], p, v);
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
          for (int i = 0; i < 8; ++i) sum[r][m] = fmaf(xf[m][i], v[i], sum[r][m]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = fmaf(scale[r], sum[r][m] - offset[r] * sx[m], acc[r][m]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int s = 16; s > 0; s /= 2) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], s);
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (row0 + r >= w.rows) break;
#pragma unroll
    for (int m = 0; m < M; ++m) out[m * ldo + row0 + r] = from_float<T>(acc[r][m]);
  }
}

// One thread a word: its codes dequantized, (code - zero) * scale in
// float32, rounded once to T, stored at their inputs' columns (together,
// as one store of PER_WORD elements, without a permutation).
template <class T, int BITS>
__global__ void packed_dequantize_kernel(packed_weight_args w, const int32_t* __restrict__ perm,
                                         T* __restrict__ out) {
  constexpr int PER_WORD = 32 / BITS;
  constexpr uint32_t MASK = (1u << BITS) - 1;
  pdl_begin();
  const int64_t wpr = w.cols / PER_WORD, groups = (w.cols + w.group_size - 1) / w.group_size;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < w.rows * wpr;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / wpr, j0 = (i % wpr) * PER_WORD;
    const int64_t g = o * groups + j0 / w.group_size;
    const float scale = half_bits_to_float(w.scales[g]), zero = float(w.zeros[g]);
    const uint32_t word = w.words[i];
    struct alignas(PER_WORD * sizeof(T)) run {
      T v[PER_WORD];
    } r;
#pragma unroll
    for (int b = 0; b < PER_WORD; ++b) r.v[b] = from_float<T>(__fmul_rn(float((word >> (BITS * b)) & MASK) - zero, scale));
    if (perm == nullptr) {
      *reinterpret_cast<run*>(out + o * w.cols + j0) = r;
      continue;
    }
#pragma unroll
    for (int b = 0; b < PER_WORD; ++b) out[o * w.cols + perm[j0 + b]] = r.v[b];
  }
}

template <class T>
__global__ void gather_cols_kernel(const T* __restrict__ x, int64_t cols, const int32_t* __restrict__ perm,
                                   T* __restrict__ out) {
  pdl_begin();
  const int64_t m = blockIdx.y;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols; j += int64_t(gridDim.x) * blockDim.x) {
    out[m * cols + j] = x[m * cols + perm[j]];
  }
}

// One thread a (row, group): rtn_quantize's rule on the dummy values.
template <class T>
__global__ void packed_fill_dummy_kernel(packed_weight_args w, uint64_t key, float scale) {
  const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= w.rows * groups) return;
  const int64_t o = i / groups, begin = (i % groups) * w.group_size;
  const int64_t end = min(w.cols, begin + w.group_size);
  auto value = [&](int64_t j) { return to_float(from_float<T>(dummy_value(key, o * w.cols + j, scale))); };
  float lo = 0.0f, hi = 0.0f;
  for (int64_t j = begin; j < end; ++j) {
    const float v = value(j);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  const float max_code = float((1 << w.bits) - 1);
  const __half s16 = __float2half_rn(hi > lo ? __fdiv_rn(__fsub_rn(hi, lo), max_code) : 1.0f);
  const float s = __half2float(s16) > 0.0f ? __half2float(s16) : 1.0f;
  const float zero = fminf(fmaxf(rintf(__fdiv_rn(-lo, s)), 0.0f), max_code);
  const_cast<uint16_t*>(w.scales)[i] = __half_as_ushort(__float2half_rn(s));
  const_cast<uint8_t*>(w.zeros)[i] = static_cast<uint8_t>(zero);
  const int per_word = 32 / w.bits;
  uint32_t* words = const_cast<uint32_t*>(w.words) + o * (w.cols / per_word);
  for (int64_t j0 = begin; j0 < end; j0 += per_word) {
    uint32_t word = 0;
    for (int b = 0; b < per_word; ++b) {
      const float q = fminf(fmaxf(__fadd_rn(rintf(__fdiv_rn(value(j0 + b), s)), zero), 0.0f), max_code);
      word |= static_cast<uint32_t>(q) << (w.bits * b);
    }
    words[j0 / per_word] = word;
  }
}

template <class F>
void by_half_type(element_type t, F&& f) {
  if (t == element_type::bf16) return f(__nv_bfloat16{});
  TROUPE_CHECK_MSG(t == element_type::f16, "packed_gemv: bf16 or f16 only");
  f(__half{});
}

template <class T, int BITS, int M>
void launch_gemv(const void* x, const packed_weight_args& w, void* out, int64_t ldo, cudaStream_t stream) {
  constexpr int R = M <= 2 ? 2 : 1;
  const int64_t warps = (w.rows + R - 1) / R;
  launch_pdl(packed_gemv_kernel<T, BITS, M, R>, dim3(static_cast<unsigned>((warps + gemv_warps - 1) / gemv_warps)),
             dim3(gemv_warps * 32), 0, stream, static_cast<const T*>(x), w, static_cast<T*>(out), ldo);
}

template <class T, int BITS, int M = 1>
void gemv_rows(int64_t m, const void* x, const packed_weight_args& w, void* out, int64_t ldo, cudaStream_t stream) {
  if constexpr (M < packed_gemv_rows) {
    if (m != M) return gemv_rows<T, BITS, M + 1>(m, x, w, out, ldo, stream);
  }
  launch_gemv<T, BITS, M>(x, w, out, ldo, stream);
}

}  // namespace

bool packed_gemv_supported(element_type t, int64_t m, const packed_weight_args& w, const void* x) {
  return (t == element_type::bf16 || t == element_type::f16) && m >= 1 && m <= packed_gemv_rows &&
         (w.bits == 4 || w.bits == 8) && !w.mma && w.cols % 32 == 0 && w.group_size % 32 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void packed_gemv(element_type t, const void* x, int64_t m, const packed_weight_args& w, void* out, int64_t ldo,
                 cudaStream_t stream) {
  TROUPE_CHECK(packed_gemv_supported(t, m, w, x));
  by_half_type(t, [&](auto zero) {
    using T = decltype(zero);
    if (w.bits == 4) return gemv_rows<T, 4>(m, x, w, out, ldo, stream);
    gemv_rows<T, 8>(m, x, w, out, ldo, stream);
  });
}

void packed_dequantize(element_type t, const packed_weight_args& w, const int32_t* perm, void* out,
                       cudaStream_t stream) {
  TROUPE_CHECK(w.bits == 4 || w.bits == 8);
  if (w.mma) return packed_dequantize_mma(t, w, perm, out, stream);
  const int64_t words = w.rows * (w.cols * w.bits / 32);
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    auto kernel = w.bits == 4 ? packed_dequantize_kernel<T, 4> : packed_dequantize_kernel<T, 8>;
    launch_pdl(kernel, dim3(grid_stride_blocks(words, 256)), dim3(256), 0, stream, w, perm, static_cast<T*>(out));
  });
}

void packed_gather_cols(element_type t, const void* x, int64_t m, int64_t cols, const int32_t* perm, void* out,
                        cudaStream_t stream) {
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    launch_pdl(gather_cols_kernel<T>, dim3(grid_stride_blocks(cols, 256), static_cast<unsigned>(m)), dim3(256), 0, stream,
               static_cast<const T*>(x), cols, perm, static_cast<T*>(out));
  });
}

void packed_fill_dummy(element_type t, const packed_weight_args& w, uint64_t key, float scale,
                       cudaStream_t stream) {
  const int64_t n = w.rows * ((w.cols + w.group_size - 1) / w.group_size);
  by_element_type(t, [&](auto zero) {
    using T = decltype(zero);
    packed_fill_dummy_kernel<T><<<static_cast<unsigned>((n + 127) / 128), 128, 0, stream>>>(w, key, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
