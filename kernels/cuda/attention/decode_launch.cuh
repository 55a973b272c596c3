// Launchers of the split-KV decode kernels, shared by decode.cu (caches of
// the compute type, C = T) and decode_fp8.cu (FP8 caches, C = uint8_t):
// the SIMT kernel (decode.cuh), one instantiation per element type, row
// layout and heads-per-block bucket, and the tensor-core kernel
// (decode_mma.cuh) for 16-bit types.
#pragma once

#include <algorithm>
#include <type_traits>

#include "common/check.h"
#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/attention/decode.cuh"
#include "kernels/cuda/attention/decode_mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda::attention {

// One decode kernel instantiation: its launch over the split grid, and
// its resident blocks per SM (the occupancy API, asked once).
template <auto Kernel>
struct decode_launcher {
  static void launch(const params& p, int num_kv_heads, int num_seqs, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(p.num_splits),
                    static_cast<unsigned>(num_kv_heads * p.head_chunks),
                    static_cast<unsigned>(num_seqs));
    launch_pdl(Kernel, grid, decode_threads, 0, stream, p);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
  static int blocks_per_sm() {
    static const int blocks = [] {
      int n = 0;
      TROUPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, decode_threads, 0));
      return std::max(n, 1);
    }();
    return blocks;
  }
};

template <class T, class C, int DMAX, int VEC, int GB>
using decode_simt_variant = decode_launcher<decode_kernel<T, C, DMAX, VEC, GB>>;

template <class T, class C, int DMAX, int ROWS, int HALVES>
using decode_mma_variant = decode_launcher<decode_mma_kernel<T, C, DMAX, ROWS, HALVES>>;

// FP8 caches: warp steps of two 16-key halves unless TROUPE_FP8_DECODE_PAIRS=0
// (one half a step: fewer registers, more resident blocks).
inline bool fp8_decode_pairs() {
  static const bool on = env_switch("TROUPE_FP8_DECODE_PAIRS");
  return on;
}

// Tensor cores: 16-bit types, rows of up to 128 elements
// (decode_mma_layout.cuh).
template <class T, class C, class F>
void visit_mma(row_layout layout, int heads_per_block, F&& f) {
  auto halves = [&](auto dmax, auto rows) {
    constexpr int DMAX = decltype(dmax)::value, ROWS = decltype(rows)::value;
    if constexpr (std::is_same_v<C, uint8_t>) {
      if (fp8_decode_pairs()) return f(decode_mma_variant<T, C, DMAX, ROWS, 2>{});
    }
    f(decode_mma_variant<T, C, DMAX, ROWS, 1>{});
  };
  auto rows = [&](auto dmax) {
    if (heads_per_block <= 8) {
      halves(dmax, std::integral_constant<int, 8>{});
    } else {
      halves(dmax, std::integral_constant<int, 16>{});
    }
  };
  if (layout == row_layout::vec16_d64) {
    rows(std::integral_constant<int, 64>{});
  } else {
    rows(std::integral_constant<int, 128>{});
  }
}

template <class T, class C, int DMAX, int VEC, class F>
void visit_heads(int heads_per_block, F&& f) {
  switch (heads_per_block) {
    case 1: f(decode_simt_variant<T, C, DMAX, VEC, 1>{}); break;
    case 2: f(decode_simt_variant<T, C, DMAX, VEC, 2>{}); break;
    case 4: f(decode_simt_variant<T, C, DMAX, VEC, 4>{}); break;
    default: f(decode_simt_variant<T, C, DMAX, VEC, 8>{}); break;
  }
}

// SIMT: float32 in every layout; 16-bit types only where tensor cores do not
// serve (16-byte rows past 128 elements, or no 16-byte rows). FP8 caches
// (C = uint8_t): vectors of 8 codes, the vec16 layouts only.
template <class T, class C, class F>
void visit_layout(row_layout layout, int heads_per_block, F&& f) {
  constexpr bool codes = std::is_same_v<C, uint8_t>;
  constexpr int vec = codes ? 8 : 16 / static_cast<int>(sizeof(T));
  switch (layout) {
    case row_layout::vec16_d64:
    case row_layout::vec16_d128:
      if constexpr (sizeof(T) == 4) {
        if (layout == row_layout::vec16_d64) {
          visit_heads<T, C, 64, vec>(heads_per_block, f);
        } else {
          visit_heads<T, C, 128, vec>(heads_per_block, f);
        }
      } else {
        TROUPE_CHECK_MSG(false, "16-bit decode with 16-byte rows up to 128 runs on tensor cores");
      }
      break;
    case row_layout::vec16_d256: visit_heads<T, C, 256, vec>(heads_per_block, f); break;
    case row_layout::pairs_d256:
      if constexpr (codes) {
        TROUPE_CHECK_MSG(false, "FP8 KV cache decode needs rows of 8-code vectors");
      } else {
        visit_heads<T, C, 256, 2>(heads_per_block, f);
      }
      break;
  }
}

// FP8 = false: caches of the compute type; true: e4m3 codes.
template <bool FP8, class F>
void visit(const decode_variant& v, F&& f) {
  by_element_type(v.type, [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<FP8, uint8_t, T>;
    if constexpr (sizeof(T) == 2) {
      if (v.tensor_cores) return visit_mma<T, C>(v.layout, v.heads_per_block, f);
    }
    visit_layout<T, C>(v.layout, v.heads_per_block, f);
  });
}

}  // namespace troupe::cuda::attention
