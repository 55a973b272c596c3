#include "kernels/cuda/gemm/gemv.h"

#include <utility>

#include "kernels/cuda/cache/kv_codes.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

// A block's warps: 4, or one group of SPLIT warps when SPLIT is larger.
__host__ __device__ constexpr int block_warps(int split) { return split > 4 ? split : 4; }

template <class OutT>
__device__ __forceinline__ OutT store_as(float v) {
  return from_float<OutT>(v);
}

// One warp computes ROWS outputs n for all M rows of x. Each lane walks K
// in steps of 8 elements (one 16-byte load) with a stride of 32 x 8,
// UNROLL steps (a chunk) at a time: UNROLL x ROWS weight loads are issued
// before any is used, and the next chunk's loads are issued before this
// chunk's arithmetic (two buffers), so that enough bytes are in flight per
// SM to cover the memory latency. Weights are loaded with the streaming
// hint (read once, not kept in L1); x stays in L1/L2 (re-read by every
// warp).
//
// With `preload`, the first chunk of weights is requested before the PDL
// wait: weights are never written by a kernel, so their loads may overlap
// the end of the kernel ahead (launch.cuh); x and the output only after it.
//
// GLU (gated_linear: gate_up products followed by SiLU-and-mul): ROWS is 2,
// the warp's rows are p (gate) and p + n (up) of a [2n, k] weight, and it
// stores out[m, p] = silu(gate) * up, each rounded to T first as the
// separate product and silu_and_mul kernel would (bit for bit the same).
// ROPE (the fused q/k/v projection): the weight's rows are q heads, then k
// heads, then v heads of head_dim each, and a warp computes the rotary pair
// of one head, rows head * head_dim + j and + j + head_dim / 2; its epilogue
// is qkv_rope_cache's (bias, rotation, q to q_out, k and v to the cache at
// the token's slot, -1 skipped).
template <class T>
struct rope_args {
  int half = 0, q_heads = 0, kv_heads = 0;  // half: head_dim / 2
  const T* bias = nullptr;                  // [rows] or none
  const int32_t* positions = nullptr;       // [M]
  const int32_t* slots = nullptr;           // [M]
  const float* cos_table = nullptr;         // [position, half]
  const float* sin_table = nullptr;
  T* q_out = nullptr;  // [M, q_heads * head_dim]
  kv_dest cache;       // [slot, kv_heads * head_dim]
};

enum class epilogue { store, glu, rope };

// LoRA (gemv_lora): each token's delta for the warp's weight rows `row`,
// added to the lanes' partial sums (lanes split the rank). The module's
// lora_B is chosen by selects (no indexing into the parameter).
template <class T, int M, int ROWS>
__device__ __forceinline__ void add_deltas(const gemv_lora& l, const int64_t (&row)[ROWS], int lane,
                                           float (&acc)[ROWS][M]) {
  const T* brow[ROWS];
  int64_t ucol[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    int64_t j = row[r];
    int mod = 0;
    if (l.count > 1 && j >= l.rows[0]) {
      j -= l.rows[0];
      mod = 1;
      if (l.count > 2 && j >= l.rows[1]) {
        j -= l.rows[1];
        mod = 2;
      }
    }
    brow[r] = static_cast<const T*>(mod == 0 ? l.b[0] : mod == 1 ? l.b[1] : l.b[2]) + j * l.b_stride;
    ucol[r] = mod * l.rank;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int64_t s = l.token_slots[m];
    if (s < 0) continue;
    const float* um = l.u + m * l.u_stride;
    for (int64_t e = lane; e < l.rank; e += 32) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        acc[r][m] = fmaf(to_float(brow[r][s * l.rank + e]), um[ucol[r] + e], acc[r][m]);
      }
    }
  }
}

template <class T, class OutT, int M, int UNROLL, int ROWS, int SPLIT, epilogue E>
__global__ void __launch_bounds__(block_warps(SPLIT) * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, int64_t n, int64_t k,
                OutT* __restrict__ out, bool preload, rope_args<T> ra, gemv_lora lora) {
  constexpr bool GLU = E == epilogue::glu, ROPE = E == epilogue::rope;
  static_assert((!GLU && !ROPE) || ROWS == 2, "a GLU or RoPE warp computes a pair of rows");
  constexpr int warps_per_block = block_warps(SPLIT);
  static_assert(warps_per_block % SPLIT == 0, "a block holds whole groups of SPLIT warps");
  // SPLIT warps (adjacent in the block) share a group of rows: warp `part`
  // of the group takes chunks part, part + SPLIT, ... of k, and the group's
  // partial sums meet in shared memory (part 0 adds them in part order and
  // runs the epilogue).
  const int warp_in_block = threadIdx.x / 32;
  const int part = warp_in_block % SPLIT;
  const int64_t warp = int64_t(blockIdx.x) * (warps_per_block / SPLIT) + warp_in_block / SPLIT;
  const int lane = threadIdx.x % 32;
  // ROPE: n is the pair count (rows / 2); pair p is (head, j).
  const int64_t row0 = GLU || ROPE ? warp : warp * ROWS;
  if (row0 >= n) {
    pdl_begin();  // nothing to do, but the PDL handshake is the block's
    if constexpr (SPLIT > 1) __syncthreads();  // and so is the partial sums' barrier
    return;
  }
  const int64_t head = ROPE ? row0 / ra.half : 0;
  const int j = ROPE ? static_cast<int>(row0 - head * ra.half) : 0;
  // Rows past n re-read the last row (their sums are not stored).
  int64_t wrow_index[ROWS];
  const T* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if constexpr (ROPE) {
      wrow_index[r] = head * 2 * ra.half + j + r * ra.half;
    } else {
      wrow_index[r] = GLU ? row0 + r * n : (row0 + r < n ? row0 + r : n - 1);
    }
    wrow[r] = w + wrow_index[r] * k;
  }
  // ROPE: lane m's token's position, slot, cos and sin (host-uploaded
  // metadata and tables no kernel writes: read before the wait).
  float rc = 0.0f, rs = 0.0f;
  int64_t slot = -1;
  if constexpr (ROPE) {
    if (lane < M) {
      const bool rotated = head < ra.q_heads + ra.kv_heads;
      if (head >= ra.q_heads) slot = ra.slots[lane];
      if (rotated) {
        const int64_t pos = ra.positions[lane];
        rc = ra.cos_table[pos * ra.half + j];
        rs = ra.sin_table[pos * ra.half + j];
      }
    }
  }
  float acc[ROWS][M];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

  constexpr int64_t step = 32 * 8, chunk = step * UNROLL, stride = chunk * SPLIT;
  auto load = [&](uint4 (&wv)[UNROLL][ROWS], int64_t base) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t kk = base + u * step;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        wv[u][r] = kk < k ? __ldcs(reinterpret_cast<const uint4*>(wrow[r] + kk)) : make_uint4(0, 0, 0, 0);
    }
  };
  auto compute = [&](const uint4 (&wv)[UNROLL][ROWS], int64_t base) {
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
  };
  const int64_t first = int64_t(lane) * 8 + part * chunk;
  uint4 a[UNROLL][ROWS], b[UNROLL][ROWS];
  if (preload) {
    load(a, first);
    pdl_begin();
  } else {
    pdl_begin();
    load(a, first);
  }
  // The LoRA deltas (u is the kernel ahead's: after the wait) while the
  // first weights are on their way; one warp of a split group adds them.
  if (lora.count > 0 && part == 0) add_deltas<T, M, ROWS>(lora, wrow_index, lane, acc);
  for (int64_t base = first; base < k; base += 2 * stride) {
    if (base + stride < k) load(b, base + stride);
    compute(a, base);
    if (base + 2 * stride < k) load(a, base + 2 * stride);
    if (base + stride < k) compute(b, base + stride);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], offset);
  if constexpr (SPLIT > 1) {
    __shared__ float partial[warps_per_block][ROWS][M];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) partial[warp_in_block][r][m] = acc[r][m];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float sum = partial[warp_in_block][r][m];
#pragma unroll
        for (int p = 1; p < SPLIT; ++p) sum += partial[warp_in_block + p][r][m];
        acc[r][m] = sum;
      }
  }
  if constexpr (ROPE) {
    // Lane m handles token m: as qkv_rope_cache on the rounded (and biased)
    // pair.
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (lane != m) continue;
      const int d = 2 * ra.half;
      float x1 = to_float(from_float<T>(acc[0][m]));
      float x2 = to_float(from_float<T>(acc[1][m]));
      if (ra.bias != nullptr) {
        x1 = to_float(from_float<T>(x1 + to_float(ra.bias[head * d + j])));
        x2 = to_float(from_float<T>(x2 + to_float(ra.bias[head * d + j + ra.half])));
      }
      if (head < ra.q_heads) {
        T* dst = ra.q_out + (int64_t(m) * ra.q_heads + head) * d;
        const float2 rot = rotate_pair(x1, x2, rc, rs);
        dst[j] = from_float<T>(rot.x);
        dst[j + ra.half] = from_float<T>(rot.y);
        continue;
      }
      if (slot < 0) continue;
      const bool is_v = head >= ra.q_heads + ra.kv_heads;
      const int64_t kv_head = head - ra.q_heads - (is_v ? ra.kv_heads : 0);
      const int64_t row = (slot * ra.kv_heads + kv_head) * d;
      const float2 rot = is_v ? make_float2(x1, x2) : rotate_pair(x1, x2, rc, rs);
      store_kv(ra.cache, is_v, row + j, from_float<T>(rot.x));
      store_kv(ra.cache, is_v, row + j + ra.half, from_float<T>(rot.y));
    }
  } else if constexpr (GLU) {
    // Lane m writes out[m, p].
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (lane == m) {
        const float g = to_float(from_float<T>(acc[0][m]));
        const float u = to_float(from_float<T>(acc[1][m]));
        out[m * n + row0] = from_float<OutT>(g / (1.0f + __expf(-g)) * u);
      }
    }
  } else {
    // Lanes share the stores: lane (r * M + m) % 32 writes out[m, row0 + r].
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m)
        if (lane == (r * M + m) % 32 && row0 + r < n) {
          out[m * n + row0 + r] = store_as<OutT>(acc[r][m]);
        }
  }
}

struct variant_info {
  int unroll, rows, split;
  const char* name;
};
constexpr variant_info variants[] = {
    {4, 1, 1, "gemv u4 r1"},
    {8, 1, 1, "gemv u8 r1"},
    {2, 2, 1, "gemv u2 r2"},
    {4, 2, 1, "gemv u4 r2"},
    {2, 1, 1, "gemv u2 r1"},
    {2, 4, 1, "gemv u2 r4"},
    {2, 1, 4, "gemv u2 r1 s4"},
    {4, 1, 4, "gemv u4 r1 s4"},
    {2, 1, 8, "gemv u2 r1 s8"},
};
constexpr int num_variants = sizeof(variants) / sizeof(variants[0]);
// GLU variants: one gate row and its up row per warp.
constexpr variant_info glu_variants[] = {
    {2, 2, 1, "gemv-glu u2"},
    {4, 2, 1, "gemv-glu u4"},
    {8, 2, 1, "gemv-glu u8"},
    {1, 2, 1, "gemv-glu u1"},
    {2, 2, 4, "gemv-glu u2 s4"},
    {4, 2, 4, "gemv-glu u4 s4"},
    {2, 2, 8, "gemv-glu u2 s8"},
};
constexpr int num_glu_variants = sizeof(glu_variants) / sizeof(glu_variants[0]);

// `n` is the number of outputs a row of out holds (GLU: half the weight's
// rows; ROPE: the pairs, half the weight's rows).
template <class T, class OutT, int M, int UNROLL, int ROWS, int SPLIT, epilogue E>
void launch(const void* x, const void* w, int64_t n, int64_t k, void* out, const rope_args<T>& ra,
            const gemv_lora& lora, cudaStream_t stream) {
  const int64_t groups = E != epilogue::store ? n : (n + ROWS - 1) / ROWS;
  constexpr int per_block = block_warps(SPLIT) / SPLIT;
  const auto blocks = static_cast<unsigned>((groups + per_block - 1) / per_block);
  launch_pdl(gemv_kernel<T, OutT, M, UNROLL, ROWS, SPLIT, E>, blocks, block_warps(SPLIT) * 32, 0, stream,
             static_cast<const T*>(x), static_cast<const T*>(w), n, k, static_cast<OutT*>(out),
             preload_enabled(), ra, lora);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

// Launches entry `variant` of the table (variants, or glu_variants with
// GLU and ROPE): the kernel's unroll and rows come from the table itself.
template <class T, class OutT, int M, epilogue E, size_t... I>
void launch_variant(int variant, const void* x, const void* w, int64_t n, int64_t k, void* out,
                    const rope_args<T>& ra, const gemv_lora& lora, cudaStream_t stream,
                    std::index_sequence<I...>) {
  constexpr const variant_info* table = E == epilogue::store ? variants : glu_variants;
  auto run = [&](auto i) {
    launch<T, OutT, M, table[i].unroll, table[i].rows, table[i].split, E>(x, w, n, k, out, ra, lora,
                                                                          stream);
    return true;
  };
  (void)((variant == static_cast<int>(I) && run(std::integral_constant<size_t, I>{})) || ...);
}

// Calls F::template run<M>() for m in 1..gemv_max_rows.
template <class F>
void with_rows(int64_t m, F&& f) {
  switch (m) {
    case 1: return f.template run<1>();
    case 2: return f.template run<2>();
    case 3: return f.template run<3>();
    case 4: return f.template run<4>();
    case 5: return f.template run<5>();
    case 6: return f.template run<6>();
    case 7: return f.template run<7>();
    default: return f.template run<8>();
  }
}

// A product for with_rows: the GEMV (OutT: T or float), the GEMV-GLU
// (OutT = T, n = d) or the GEMV with the RoPE epilogue (n = pairs).
template <class T, class OutT, epilogue E>
struct call {
  int variant;
  const void *x, *w;
  int64_t n, k;
  void* out;
  cudaStream_t stream;
  const gemv_lora* lora = nullptr;
  rope_args<T> ra{};
  template <int M>
  void run() const {
    launch_variant<T, OutT, M, E>(
        variant, x, w, n, k, out, ra, lora != nullptr ? *lora : gemv_lora{}, stream,
        std::make_index_sequence<E == epilogue::store ? num_variants : num_glu_variants>{});
  }
};

}  // namespace

int gemv_num_variants() { return num_variants; }

const char* gemv_variant_name(int variant) {
  return variant >= 0 && variant < num_variants ? variants[variant].name : "gemv ?";
}

int gemv_variant_split(int variant) {
  return variant >= 0 && variant < num_variants ? variants[variant].split : 1;
}

int gemv_glu_num_variants() { return num_glu_variants; }

int gemv_glu_variant_split(int variant) {
  return variant >= 0 && variant < num_glu_variants ? glu_variants[variant].split : 1;
}

const char* gemv_glu_variant_name(int variant) {
  return variant >= 0 && variant < num_glu_variants ? glu_variants[variant].name : "gemv-glu ?";
}

bool gemv_supported(element_type t, int64_t m, int64_t k, const void* x, const void* w) {
  return (t == element_type::bf16 || t == element_type::f16) && m >= 1 && m <= gemv_max_rows &&
         k > 0 && k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void gemv(element_type t, bool out_f32, int variant, const void* x, int64_t m, const void* w,
          int64_t n, int64_t k, void* out, cudaStream_t stream, const gemv_lora* lora) {
  if (n == 0) return;
  if (t == element_type::bf16) {
    using bf16 = __nv_bfloat16;
    if (out_f32) return with_rows(m, call<bf16, float, epilogue::store>{variant, x, w, n, k, out, stream, lora});
    return with_rows(m, call<bf16, bf16, epilogue::store>{variant, x, w, n, k, out, stream, lora});
  }
  if (out_f32) return with_rows(m, call<__half, float, epilogue::store>{variant, x, w, n, k, out, stream, lora});
  return with_rows(m, call<__half, __half, epilogue::store>{variant, x, w, n, k, out, stream, lora});
}

void gemv_glu(element_type t, int variant, const void* x, int64_t m, const void* w, int64_t d,
              int64_t k, void* out, cudaStream_t stream, const gemv_lora* lora) {
  if (d == 0) return;
  if (t == element_type::bf16) {
    return with_rows(m, call<__nv_bfloat16, __nv_bfloat16, epilogue::glu>{variant, x, w, d, k, out, stream, lora});
  }
  return with_rows(m, call<__half, __half, epilogue::glu>{variant, x, w, d, k, out, stream, lora});
}

int gemv_variant_of_glu(int glu_variant) {
  if (glu_variant < 0 || glu_variant >= num_glu_variants) return -1;
  // A one-row variant with the same split and unroll; with no split every
  // variant sums a row in the same order.
  const variant_info& g = glu_variants[glu_variant];
  int same_split = -1;
  for (int i = 0; i < num_variants; ++i) {
    if (variants[i].split != g.split) continue;
    if (variants[i].rows == 1 && variants[i].unroll == g.unroll) return i;
    if (same_split < 0 && g.split == 1) same_split = i;
  }
  return same_split;
}

bool gemv_rope_supported(element_type t, int64_t m, int64_t k, int64_t head_dim, const void* x,
                         const void* w) {
  return gemv_supported(t, m, k, x, w) && head_dim % 2 == 0 && head_dim > 0;
}

void gemv_qkv_rope_cache(element_type t, int variant, const void* x, int64_t m, const void* w,
                         const void* bias, int64_t k, int64_t q_heads, int64_t kv_heads,
                         int64_t head_dim, const int32_t* positions, const float* cos_table,
                         const float* sin_table, const int32_t* slot_mapping, void* q_out,
                         const kv_dest& cache, cudaStream_t stream, const gemv_lora* lora) {
  const int64_t pairs = (q_heads + 2 * kv_heads) * head_dim / 2;
  if (pairs == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    rope_args<T> ra;
    ra.half = static_cast<int>(head_dim / 2);
    ra.q_heads = static_cast<int>(q_heads);
    ra.kv_heads = static_cast<int>(kv_heads);
    ra.bias = static_cast<const T*>(bias);
    ra.positions = positions;
    ra.slots = slot_mapping;
    ra.cos_table = cos_table;
    ra.sin_table = sin_table;
    ra.q_out = static_cast<T*>(q_out);
    ra.cache = cache;
    with_rows(m, call<T, T, epilogue::rope>{variant, x, w, pairs, k, nullptr, stream, lora, ra});
  };
  if (t == element_type::bf16) return go(__nv_bfloat16{});
  go(__half{});
}

}  // namespace troupe::cuda
