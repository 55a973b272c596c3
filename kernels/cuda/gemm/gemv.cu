#include "kernels/cuda/gemm/gemv.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

constexpr int warps_per_block = 4;

// 8 elements of 16 bytes as floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]);
template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack8<__half>(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

template <class OutT>
__device__ __forceinline__ OutT store_as(float v) {
  return from_float<OutT>(v);
}

// One warp computes ROWS consecutive outputs n for all M rows of x. Each
// lane walks K in steps of 8 elements (one 16-byte load) with a stride of
// 32 x 8, UNROLL steps at a time: UNROLL x ROWS weight loads are issued
// before any is used, so that enough bytes are in flight per SM to cover
// the memory latency. Weights are loaded with the streaming hint (read
// once, not kept in L1); x stays in L1/L2 (re-read by every warp).
//
// Before waiting for the kernel ahead (programmatic dependent launch,
// launch.cuh), each warp asks L2 for the first prefetch_bytes of its weight
// rows: weights are written by no kernel of a forward pass, so with PDL
// their fetch from memory overlaps the end of the kernel ahead (a norm or
// the attention), instead of starting only once x is ready. prefetch_bytes
// is sized on the host so that what the resident warps ask for fits in
// part of L2 (gemv_prefetch_bytes); 0 turns it off.
template <class T, class OutT, int M, int UNROLL, int ROWS>
__global__ void __launch_bounds__(warps_per_block * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, int64_t n, int64_t k,
                OutT* __restrict__ out, int64_t prefetch_bytes) {
  const int64_t warp = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = warp * ROWS;
  // Rows past n re-read the last row (their sums are not stored).
  const T* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + (row0 + r < n ? row0 + r : n - 1) * k;
  if (row0 < n) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const char* bytes = reinterpret_cast<const char*>(wrow[r]);
      for (int64_t off = int64_t(lane) * 128; off < prefetch_bytes; off += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(bytes + off));
    }
  }
  pdl_begin();  // before reading x or writing out (launch.cuh)
  if (row0 >= n) return;
  float acc[ROWS][M];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

  constexpr int64_t step = 32 * 8;
  for (int64_t base = int64_t(lane) * 8; base < k; base += step * UNROLL) {
    uint4 wv[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t kk = base + u * step;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        wv[u][r] = kk < k ? __ldcs(reinterpret_cast<const uint4*>(wrow[r] + kk)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t kk = base + u * step;
      if (kk >= k) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        unpack8<T>(*reinterpret_cast<const uint4*>(x + m * k + kk), xf);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float wf[8];
          unpack8<T>(wv[u][r], wf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][m] = fmaf(wf[e], xf[e], acc[r][m]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], offset);
  // Lanes share the stores: lane (r * M + m) % 32 writes out[m, row0 + r].
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (lane == (r * M + m) % 32 && row0 + r < n) out[m * n + row0 + r] = store_as<OutT>(acc[r][m]);
}

struct variant_info {
  int unroll, rows;
  const char* name;
};
constexpr variant_info variants[] = {
    {4, 1, "gemv u4 r1"},
    {8, 1, "gemv u8 r1"},
    {2, 2, "gemv u2 r2"},
    {4, 2, "gemv u4 r2"},
};
constexpr int num_variants = sizeof(variants) / sizeof(variants[0]);

// Per device, cached: the SM count and the L2 bytes the prefetch may fill
// (half of L2; 0 with TROUPE_GEMV_PREFETCH=0).
struct device_facts {
  int sms = 0;
  int64_t prefetch_budget = 0;
};

const device_facts& facts() {
  constexpr int max_devices = 64;
  static std::array<std::once_flag, max_devices> once;
  static std::array<device_facts, max_devices> cached;
  int device = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  const auto d = static_cast<size_t>(device < max_devices ? device : 0);
  std::call_once(once[d], [&] {
    int l2 = 0;
    TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&cached[d].sms, cudaDevAttrMultiProcessorCount, device));
    TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    cached[d].prefetch_budget = gemv_prefetch_enabled() ? int64_t{l2} / 2 : 0;
  });
  return cached[d];
}

template <class T, class OutT, int M, int UNROLL, int ROWS>
void launch(const void* x, const void* w, int64_t n, int64_t k, void* out, cudaStream_t stream) {
  const auto kernel = gemv_kernel<T, OutT, M, UNROLL, ROWS>;
  const int64_t warps = (n + ROWS - 1) / ROWS;
  const auto blocks = static_cast<unsigned>((warps + warps_per_block - 1) / warps_per_block);
  static const int blocks_per_sm = [&] {
    int b = 0;
    TROUPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, warps_per_block * 32, 0));
    return b;
  }();
  const device_facts& f = facts();
  const int64_t resident = std::min<int64_t>(warps, int64_t{f.sms} * blocks_per_sm * warps_per_block);
  const int64_t prefetch = gemv_prefetch_bytes(f.prefetch_budget, resident, ROWS,
                                               k * static_cast<int64_t>(sizeof(T)));
  launch_pdl(kernel, blocks, warps_per_block * 32, 0, stream, static_cast<const T*>(x),
             static_cast<const T*>(w), n, k, static_cast<OutT*>(out), prefetch);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <class T, class OutT, int M>
void launch_variant(int variant, const void* x, const void* w, int64_t n, int64_t k, void* out,
                    cudaStream_t stream) {
  switch (variant) {
    case 0: return launch<T, OutT, M, 4, 1>(x, w, n, k, out, stream);
    case 1: return launch<T, OutT, M, 8, 1>(x, w, n, k, out, stream);
    case 2: return launch<T, OutT, M, 2, 2>(x, w, n, k, out, stream);
    default: return launch<T, OutT, M, 4, 2>(x, w, n, k, out, stream);
  }
}

template <class T, class OutT>
void launch_rows(int variant, const void* x, int64_t m, const void* w, int64_t n, int64_t k,
                 void* out, cudaStream_t stream) {
  switch (m) {
    case 1: return launch_variant<T, OutT, 1>(variant, x, w, n, k, out, stream);
    case 2: return launch_variant<T, OutT, 2>(variant, x, w, n, k, out, stream);
    case 3: return launch_variant<T, OutT, 3>(variant, x, w, n, k, out, stream);
    case 4: return launch_variant<T, OutT, 4>(variant, x, w, n, k, out, stream);
    case 5: return launch_variant<T, OutT, 5>(variant, x, w, n, k, out, stream);
    case 6: return launch_variant<T, OutT, 6>(variant, x, w, n, k, out, stream);
    case 7: return launch_variant<T, OutT, 7>(variant, x, w, n, k, out, stream);
    default: return launch_variant<T, OutT, 8>(variant, x, w, n, k, out, stream);
  }
}

}  // namespace

bool gemv_prefetch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TROUPE_GEMV_PREFETCH");
    return v == nullptr || (std::strcmp(v, "0") != 0 && std::strcmp(v, "off") != 0 &&
                            std::strcmp(v, "false") != 0);
  }();
  return on;
}

int64_t gemv_prefetch_bytes(int64_t budget, int64_t resident_warps, int rows_per_warp,
                            int64_t row_bytes) {
  if (budget <= 0 || resident_warps <= 0 || rows_per_warp <= 0 || row_bytes <= 0) return 0;
  const int64_t per_row = budget / (resident_warps * rows_per_warp) / 128 * 128;
  return std::min(per_row, row_bytes);
}

int gemv_num_variants() { return num_variants; }

const char* gemv_variant_name(int variant) {
  return variant >= 0 && variant < num_variants ? variants[variant].name : "gemv ?";
}

bool gemv_supported(element_type t, int64_t m, int64_t k, const void* x, const void* w) {
  return (t == element_type::bf16 || t == element_type::f16) && m >= 1 && m <= gemv_max_rows &&
         k > 0 && k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void gemv(element_type t, bool out_f32, int variant, const void* x, int64_t m, const void* w,
          int64_t n, int64_t k, void* out, cudaStream_t stream) {
  if (n == 0) return;
  if (t == element_type::bf16) {
    if (out_f32) return launch_rows<__nv_bfloat16, float>(variant, x, m, w, n, k, out, stream);
    return launch_rows<__nv_bfloat16, __nv_bfloat16>(variant, x, m, w, n, k, out, stream);
  }
  if (out_f32) return launch_rows<__half, float>(variant, x, m, w, n, k, out, stream);
  return launch_rows<__half, __half>(variant, x, m, w, n, k, out, stream);
}

}  // namespace troupe::cuda
