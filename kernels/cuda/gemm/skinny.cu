#include "kernels/cuda/gemm/skinny.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention/mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

using attention::mma_16816;

constexpr int warps_per_block = 4;
constexpr int threads = warps_per_block * 32;

// The product as mma.sync sees it: out^T [n, m] = w [n, k] x^T [k, m], the
// weights as the row-major A operand (16 rows a fragment), x as the
// column-major B operand (8 of its rows a fragment, MT fragments for up to
// 8 MT rows). K is a sum, so any order of it that A and B share will do:
// in each step of 32, lane (g, t) loads 8 consecutive elements at 8t of
// weight rows g and g + 8 and of x rows 8j + g; the first mma takes
// elements 0-3 of every lane's eight (the fragment's k 2t..2t+1 and
// 2t+8..2t+9), the second elements 4-7. Every load is 16 bytes and no
// shuffle is needed.
//
// A warp computes RT tiles of 16 weight rows, a block 4 warps' rows, over
// the block's slice of K (blockIdx.y of gridDim.y). UNROLL steps of weight
// loads are issued at once, the next UNROLL while this one is multiplied;
// with `preload` the first ones before the PDL wait (weights are never
// written by a kernel: launch.cuh).
template <class T, class OutT, int MT, int RT, int UNROLL>
__global__ void __launch_bounds__(threads)
    skinny_kernel(const T* __restrict__ x, int64_t m, const T* __restrict__ w, int64_t n, int64_t k,
                  int64_t k_per_split, OutT* __restrict__ out, float* __restrict__ partial,
                  int* __restrict__ counters, bool preload) {
  constexpr int tile_n = warps_per_block * RT * 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y, splits = gridDim.y;
  const int64_t n_warp = tile * tile_n + int64_t(warp) * RT * 16;
  const int64_t k_begin = int64_t(split) * k_per_split;
  const int64_t k_end = k < k_begin + k_per_split ? k : k_begin + k_per_split;

  // Rows past n or m read the last row; their sums are not stored.
  const T* wrow[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = n_warp + rt * 16 + g + 8 * h;
      wrow[rt][h] = w + (row < n ? row : n - 1) * k + 8 * t;
    }
  const T* xrow[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const int64_t row = 8 * j + g;
    xrow[j] = x + (row < m ? row : m - 1) * k + 8 * t;
  }
  float acc[RT][MT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[rt][j][e] = 0.0f;

  // k_end is a multiple of 8: a lane's eight elements are all in or all out.
  const int64_t lane_end = k_end - 8 * t;
  auto load = [&](uint4 (&wv)[UNROLL][RT][2], int64_t base) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t kk = base + u * 32;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[u][rt][h] = kk < lane_end ? __ldcs(reinterpret_cast<const uint4*>(wrow[rt][h] + kk))
                                       : make_uint4(0, 0, 0, 0);
    }
  };
  auto compute = [&](const uint4 (&wv)[UNROLL][RT][2], int64_t base) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t kk = base + u * 32;
      if (kk >= k_end) break;  // uniform over the warp: the mma needs every lane
      uint4 xv[MT];
#pragma unroll
      for (int j = 0; j < MT; ++j)
        xv[j] = kk < lane_end ? *reinterpret_cast<const uint4*>(xrow[j] + kk) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        const uint32_t lo[4] = {wv[u][rt][0].x, wv[u][rt][1].x, wv[u][rt][0].y, wv[u][rt][1].y};
        const uint32_t hi[4] = {wv[u][rt][0].z, wv[u][rt][1].z, wv[u][rt][0].w, wv[u][rt][1].w};
#pragma unroll
        for (int j = 0; j < MT; ++j) {
          mma_16816<T>(acc[rt][j], lo, xv[j].x, xv[j].y);
          mma_16816<T>(acc[rt][j], hi, xv[j].z, xv[j].w);
        }
      }
    }
  };

  constexpr int64_t chunk = 32 * UNROLL;
  uint4 a[UNROLL][RT][2], b[UNROLL][RT][2];
  if (preload) {
    load(a, k_begin);
    pdl_begin();
  } else {
    pdl_begin();
    load(a, k_begin);
  }
  for (int64_t base = k_begin; base < k_end; base += 2 * chunk) {
    if (base + chunk < k_end) load(b, base + chunk);
    compute(a, base);
    if (base + 2 * chunk < k_end) load(a, base + 2 * chunk);
    if (base + chunk < k_end) compute(b, base + chunk);
  }

  // C fragment: e = 0, 1 at weight row g, x rows 2t and 2t + 1 of the
  // fragment; e = 2, 3 at weight row g + 8.
  auto store = [&](const float (&v)[RT][MT][4]) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = n_warp + rt * 16 + g + (e >= 2 ? 8 : 0);
          const int64_t col = 8 * j + 2 * t + (e & 1);
          if (row < n && col < m) out[col * n + row] = from_float<OutT>(v[rt][j][e]);
        }
  };
  if (splits == 1) {
    store(acc);
    return;
  }
  // Split-K: every block leaves its partial sums; the last of the tile to
  // arrive adds them all in split order and stores.
  constexpr int per_thread = RT * MT * 4;
  const int64_t tiles = gridDim.x;
  auto slot = [&](int s) {
    return reinterpret_cast<float4*>(partial + ((int64_t(s) * tiles + tile) * threads + threadIdx.x) * per_thread);
  };
  float4* mine = slot(split);
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < MT; ++j)
      __stcg(mine + rt * MT + j, make_float4(acc[rt][j][0], acc[rt][j][1], acc[rt][j][2], acc[rt][j][3]));
  __threadfence();
  __syncthreads();
  __shared__ int arrived;
  if (threadIdx.x == 0) arrived = atomicAdd(counters + tile, 1);
  __syncthreads();
  if (arrived != splits - 1) return;
  __threadfence();
  float sum[RT][MT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[rt][j][e] = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float4* theirs = slot(s);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const float4 p = s == split ? make_float4(acc[rt][j][0], acc[rt][j][1], acc[rt][j][2], acc[rt][j][3])
                                    : __ldcg(theirs + rt * MT + j);
        sum[rt][j][0] += p.x;
        sum[rt][j][1] += p.y;
        sum[rt][j][2] += p.z;
        sum[rt][j][3] += p.w;
      }
  }
  store(sum);
  if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next product
}

struct variant_info {
  int rt, unroll, waves;  // weight-row tiles a warp, steps in flight, blocks per SM aimed at
  const char* name;
};
constexpr variant_info variants[] = {
    {1, 4, 2, "skinny r16 u4 b2"},
    {1, 4, 4, "skinny r16 u4 b4"},
    {2, 2, 2, "skinny r32 u2 b2"},
    {2, 2, 4, "skinny r32 u2 b4"},
};
constexpr int num_variants = sizeof(variants) / sizeof(variants[0]);

int sm_count() {
  int device = 0, sms = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

struct plan {
  int64_t tiles, splits, k_per_split;
};

plan plan_for(const variant_info& v, int64_t m, int64_t n, int64_t k, const skinny_scratch& scratch) {
  const int64_t tile_n = warps_per_block * v.rt * 16;
  const int64_t tiles = (n + tile_n - 1) / tile_n;
  const int64_t steps = (k + 31) / 32;
  const int64_t mt = (m + 7) / 8;
  int64_t splits = std::llround(static_cast<double>(v.waves) * sm_count() / static_cast<double>(tiles));
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(16, steps));
  const auto fits = [&](int64_t s) {
    const double bytes = static_cast<double>(s) * tiles * threads * v.rt * mt * 4 * sizeof(float);
    return bytes <= static_cast<double>(scratch.workspace_bytes) && tiles <= scratch.num_counters &&
           scratch.workspace != nullptr && scratch.counters != nullptr;
  };
  while (splits > 1 && !fits(splits)) --splits;
  const int64_t k_per_split = (steps + splits - 1) / splits * 32;
  return {tiles, (k + k_per_split - 1) / k_per_split, k_per_split};
}

template <class T, class OutT, int MT, int RT, int UNROLL>
void launch(const plan& p, const void* x, int64_t m, const void* w, int64_t n, int64_t k, void* out,
            const skinny_scratch& scratch, cudaStream_t stream) {
  launch_pdl(skinny_kernel<T, OutT, MT, RT, UNROLL>,
             dim3(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.splits)), threads, 0,
             stream, static_cast<const T*>(x), m, static_cast<const T*>(w), n, k, p.k_per_split,
             static_cast<OutT*>(out), scratch.workspace, scratch.counters, gemv_preload());
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <class T, class OutT, int MT>
void launch_variant(int variant, const plan& p, const void* x, int64_t m, const void* w, int64_t n,
                    int64_t k, void* out, const skinny_scratch& scratch, cudaStream_t stream) {
  if (variants[variant].rt == 1) return launch<T, OutT, MT, 1, 4>(p, x, m, w, n, k, out, scratch, stream);
  return launch<T, OutT, MT, 2, 2>(p, x, m, w, n, k, out, scratch, stream);
}

template <class T, class OutT>
void launch_rows(int variant, const plan& p, const void* x, int64_t m, const void* w, int64_t n,
                 int64_t k, void* out, const skinny_scratch& scratch, cudaStream_t stream) {
  switch ((m + 7) / 8) {
    case 1: return launch_variant<T, OutT, 1>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 2: return launch_variant<T, OutT, 2>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 3: return launch_variant<T, OutT, 3>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 4: return launch_variant<T, OutT, 4>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 5: return launch_variant<T, OutT, 5>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 6: return launch_variant<T, OutT, 6>(variant, p, x, m, w, n, k, out, scratch, stream);
    case 7: return launch_variant<T, OutT, 7>(variant, p, x, m, w, n, k, out, scratch, stream);
    default: return launch_variant<T, OutT, 8>(variant, p, x, m, w, n, k, out, scratch, stream);
  }
}

}  // namespace

int skinny_num_variants() { return num_variants; }

const char* skinny_variant_name(int variant) {
  return variant >= 0 && variant < num_variants ? variants[variant].name : "skinny ?";
}

bool skinny_supported(element_type t, int64_t m, int64_t k, const void* x, const void* w) {
  return (t == element_type::bf16 || t == element_type::f16) && m >= 1 && m <= skinny_max_rows &&
         k > 0 && k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

int skinny_splits(int variant, int64_t m, int64_t n, int64_t k, const skinny_scratch& scratch) {
  return static_cast<int>(plan_for(variants[variant], m, n, k, scratch).splits);
}

void skinny(element_type t, bool out_f32, int variant, const void* x, int64_t m, const void* w,
            int64_t n, int64_t k, void* out, const skinny_scratch& scratch, cudaStream_t stream) {
  if (n == 0) return;
  const plan p = plan_for(variants[variant], m, n, k, scratch);
  if (t == element_type::bf16) {
    if (out_f32) return launch_rows<__nv_bfloat16, float>(variant, p, x, m, w, n, k, out, scratch, stream);
    return launch_rows<__nv_bfloat16, __nv_bfloat16>(variant, p, x, m, w, n, k, out, scratch, stream);
  }
  if (out_f32) return launch_rows<__half, float>(variant, p, x, m, w, n, k, out, scratch, stream);
  return launch_rows<__half, __half>(variant, p, x, m, w, n, k, out, scratch, stream);
}

}  // namespace troupe::cuda
