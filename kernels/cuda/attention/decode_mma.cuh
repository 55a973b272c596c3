// Split-KV decode on tensor cores, for bfloat16/float16 with 16-byte rows
// (head_dim % 8 == 0; FP8 caches: % 16) up to head_dim 128, over caches of
// the compute type or FP8 caches. The grid, the key splits, the warp merge and the partials
// are decode_kernel's (decode.cuh); what differs is a warp's step over 16
// keys: instead of ~80 SIMT instructions a key (dot products, shuffle
// reductions, exponentials per head), the group's query heads are the rows
// of mma.sync m16n8k16 tiles (ROWS = 8 or 16 heads; rows past the group
// are zero), which leaves the kernel bound by memory.
//
//   S (heads x 16 keys) = Q K^T: two 8-key column tiles, head_dim / 16 k-steps
//   P = online softmax of S (exp2 domain), per head row
//   O (heads x head_dim) += P V: one 16-key k-step, head_dim / 8 column tiles
//
// Every K and V load is as wide as possible by choosing which physical
// dims each logical mma index stands for (decode_mma_layout.cuh; 16-bit
// caches):
//   S: lane (g, t) loads key g of a column tile, dims 32j + 8t .. +8, as 4
//      words w0..w3: k-step 2j takes b0 = w0, b1 = w1, k-step 2j+1 b0 = w2,
//      b1 = w3; Q's A fragments are built from the same dims of head rows g
//      (and g + 8).
//   P V: column n of column tile 8h + j is dim 64h + 8n + j. Lane (g, t)
//      loads keys 2t, 2t+1, 2t+8, 2t+9 at dims 64h + 8g .. +8 and pairs
//      keys (2t, 2t+1) and (2t+8, 2t+9) element by element (byte_perm)
//      into b0 and b1; P's A fragment is S's C fragments re-packed. So the
//      lane's outputs c0, c1 of tile 8h + j are columns 2t and 2t + 1.
// Dims past head_dim load as zeros. Keys past the split's end load as zeros
// (their V must not be NaN: P = 0 would not cancel it) and score -inf.
//
// FP8 caches (C = uint8_t): 16 codes a load where the layout allows, widened
// to float16 pairs where used (e4m3 values are float16 values: exact), so
// the products run in float16 whatever T is (bf16 q is rounded to float16
// once; P is packed as float16); k_scale is in p.scale_log2, v_scale in the
// output's normalisation. HALVES = 2 makes a warp step two 16-key halves
// whose loads are all issued first (the same bytes in flight as a 16-bit
// step, at the registers of one), 1 one half (decode_launch.cuh chooses).
#pragma once

#include "kernels/cuda/attention/decode.cuh"
#include "kernels/cuda/attention/decode_mma_layout.cuh"
#include "kernels/cuda/attention/mma.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda::attention {

constexpr int mma_step_keys = 16;

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// q's pair of bfloat16 as float16 (saturated at +-65504), for the FP8
// cache's float16 products.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t w) {
  const float lo = fminf(fmaxf(__uint_as_float(w << 16), -65504.0f), 65504.0f);
  const float hi = fminf(fmaxf(__uint_as_float(w & 0xffff0000u), -65504.0f), 65504.0f);
  return pack_pair<__half>(lo, hi);
}

// T: q's and the output's type; C: the cache's (T, or uint8_t: FP8
// codes, whose products run in float16: M); HALVES: 16-key halves a warp
// step (1 for 16-bit caches).
template <class T, class C, int DMAX, int ROWS, int HALVES = 1>
__global__ void __launch_bounds__(decode_threads) decode_mma_kernel(params p) {
  static_assert(sizeof(T) == 2 && (DMAX == 64 || DMAX == 128) && (ROWS == 8 || ROWS == 16));
  static_assert(std::is_same_v<C, T> || std::is_same_v<C, uint8_t>);
  using M = std::conditional_t<std::is_same_v<C, T>, T, __half>;
  using L = mma_kv_layout<C, DMAX>;
  constexpr int k_chunks = DMAX / 32;  // S: 8-dim chunks of a K row per lane
  constexpr int v_chunks = DMAX / 64;  // P V: 8-dim chunks of a V row per lane
  constexpr int k_steps = DMAX / 16;
  constexpr int out_tiles = DMAX / 8;
  constexpr bool two_row_halves = ROWS == 16;  // heads g + 8 are in use
  constexpr int halves = HALVES;
  static_assert(HALVES == 1 || (HALVES == 2 && sizeof(C) == 1));
  constexpr int step_keys = halves * mma_step_keys;

  const int seq = blockIdx.z;
  const int token = p.query_start_loc[seq];
  if (p.query_start_loc[seq + 1] - token != 1) return;  // the prefill kernel's sequence
  const int kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y - kv_head * p.head_chunks;
  const int first_head = kv_head * p.group + chunk * ROWS;
  const int heads_here = min(ROWS, p.group - chunk * ROWS);
  const int num_keys = p.seq_lens[seq];
  const int split = blockIdx.x;
  const split_range range = split_of(p, num_keys, split, step_keys);
  if (split >= range.used) return;  // a short sequence's unused split
  const int key_begin = range.begin, key_end = range.end;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int dim_bytes = p.head_dim * static_cast<int>(sizeof(T));  // q's row
  constexpr int elem = static_cast<int>(sizeof(T));
  constexpr int kv_elem = static_cast<int>(sizeof(C));

  // The step's metadata (query_start_loc, seq_lens, block tables) is
  // uploaded before the step's first kernel and written by no kernel, so
  // it and the first table lookup are read before waiting for the kernel
  // ahead (launch.cuh); Q and this step's K/V rows (written by
  // qkv_rope_cache) only after.
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const char* k_head = static_cast<const char*>(p.k_cache) +
                       static_cast<int64_t>(kv_head) * p.head_dim * kv_elem;
  const char* v_head = static_cast<const char*>(p.v_cache) +
                       static_cast<int64_t>(kv_head) * p.head_dim * kv_elem;
  const int64_t row_bytes = p.kv_row_stride * kv_elem;
  // A half's 16 keys start at a multiple of 16; with block_size % 16 == 0
  // they share one block: one table lookup a half, issued a step ahead.
  const bool one_block_a_half = (p.block_size & (mma_step_keys - 1)) == 0;
  constexpr int step_stride = decode_warps * step_keys;
  int step = key_begin + warp * step_keys;
  int half_slot[halves];  // (one_block_a_half) the slot of each half's first key
  auto find_slots = [&](int base) {
#pragma unroll
    for (int h = 0; h < halves; ++h) {
      const int key = base + h * mma_step_keys;
      half_slot[h] = one_block_a_half && key < key_end ? slot_of(p, table, key) : 0;
    }
  };
  find_slots(step);

  // Half h of the step: K keys step + 16h + g and + 8 + g; V keys + 2t,
  // 2t + 1, 2t + 8, 2t + 9.
  typename L::k_piece kc[halves][2][L::k_pieces];
  typename L::v_piece vc[halves][4][L::v_pieces];
  auto load_kv = [&] {
#pragma unroll
    for (int h = 0; h < halves; ++h) {
      const int base = step + h * mma_step_keys;
      auto row_offset = [&](int key) -> int64_t {  // bytes, for a key before key_end
        const int slot = one_block_a_half ? half_slot[h] + (key - base) : slot_of(p, table, key);
        return static_cast<int64_t>(slot) * row_bytes;
      };
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int key = base + 8 * nt + g;
        const bool valid = key < key_end;
        const char* row = valid ? k_head + row_offset(key) : k_head;
#pragma unroll
        for (int i = 0; i < L::k_pieces; ++i) {
          kc[h][nt][i] = L::load_k(row, L::k_dim(i, t), valid ? p.head_dim : 0);
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = base + 2 * t + (r & 1) + 8 * (r >> 1);
        const bool valid = key < key_end;
        const char* row = valid ? v_head + row_offset(key) : v_head;
#pragma unroll
        for (int i = 0; i < L::v_pieces; ++i) {
          vc[h][r][i] = L::load_v(row, L::v_dim(i, g), valid ? p.head_dim : 0);
        }
      }
    }
  };
  // The first step's keys and values are requested before the wait too
  // when none of them is this step's: the sequence's one new key (its
  // last, num_keys - 1) is the only cache row the kernels of this step
  // write for it, and every older row was written by an earlier step
  // (launch.cuh). TROUPE_PRELOAD=0 waits first.
  bool preloaded = p.preload && step < key_end && step + step_keys <= num_keys - 1;
  if (preloaded) load_kv();

  pdl_begin();

  // Q's A fragments: qa[kk] = {a0, a2} of head row g, qb[kk] of row g + 8.
  uint32_t qa[k_steps][2], qb[k_steps][2];
  {
    const char* q_base = static_cast<const char*>(p.q) +
                         (static_cast<int64_t>(token) * p.q_row_stride +
                          static_cast<int64_t>(first_head) * p.head_dim) * elem;
#pragma unroll
    for (int j = 0; j < k_chunks; ++j) {
      const int dim_byte = L::q_dim(j, t) * elem;
      const uint4 a = load_row_chunk(q_base + static_cast<int64_t>(g) * dim_bytes, dim_byte,
                                     g < heads_here && dim_byte < dim_bytes);
      const uint4 b = two_row_halves
                          ? load_row_chunk(q_base + static_cast<int64_t>(g + 8) * dim_bytes,
                                           dim_byte, g + 8 < heads_here && dim_byte < dim_bytes)
                          : make_uint4(0u, 0u, 0u, 0u);
      qa[2 * j][0] = a.x;
      qa[2 * j][1] = a.y;
      qa[2 * j + 1][0] = a.z;
      qa[2 * j + 1][1] = a.w;
      qb[2 * j][0] = b.x;
      qb[2 * j][1] = b.y;
      qb[2 * j + 1][0] = b.z;
      qb[2 * j + 1][1] = b.w;
    }
    if constexpr (!std::is_same_v<M, T>) {
#pragma unroll
      for (int kk = 0; kk < k_steps; ++kk) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          qa[kk][i] = bf16x2_to_f16x2(qa[kk][i]);
          qb[kk][i] = bf16x2_to_f16x2(qb[kk][i]);
        }
      }
    }
  }

  float o[out_tiles][4];
#pragma unroll
  for (int n = 0; n < out_tiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // head rows g and g + 8, exp2 domain
  float l[2] = {0.0f, 0.0f};            // this lane's part of their sums

  for (; step < key_end; step += step_stride) {  // warp-uniform
    if (!preloaded) load_kv();
    preloaded = false;
    if (one_block_a_half && step + step_stride < key_end) {
      find_slots(step + step_stride);  // lands while the loads fly
    }
#pragma unroll
    for (int h = 0; h < halves; ++h) {
      const int base = step + h * mma_step_keys;
      if (base >= key_end) break;  // warp-uniform (a step's second half past the split)
      float s[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < k_chunks; ++j) {
          const uint4 c = L::k_chunk(kc[h][nt], j);
#pragma unroll
          for (int kk = 2 * j; kk < 2 * j + 2; ++kk) {
            const uint32_t a[4] = {qa[kk][0], two_row_halves ? qb[kk][0] : 0u, qa[kk][1],
                                   two_row_halves ? qb[kk][1] : 0u};
            mma_16816<M>(s[nt], a, word(c, 2 * (kk % 2)), word(c, 2 * (kk % 2) + 1));
          }
        }
      }
      // Scale, mask keys past the split, online softmax per head row (the
      // 4 lanes of a quad hold a row's 16 keys). Key `base` is valid, so
      // the row maxima are finite.
#pragma unroll
      for (int r = 0; r < (two_row_halves ? 2 : 1); ++r) {
        float row_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            const int key = base + 8 * nt + 2 * t + (e & 1);
            s[nt][e] = key < key_end ? s[nt][e] * p.scale_log2 : -INFINITY;
            row_max = fmaxf(row_max, s[nt][e]);
          }
        }
        row_max = fmaxf(row_max, __shfl_xor_sync(full_mask, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(full_mask, row_max, 2));
        const float new_max = fmaxf(m[r], row_max);
        const float correction = exp2f(m[r] - new_max);  // 0 while m is -inf
        m[r] = new_max;
        l[r] *= correction;
#pragma unroll
        for (int n = 0; n < out_tiles; ++n) {
          o[n][2 * r] *= correction;
          o[n][2 * r + 1] *= correction;
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[nt][e] = exp2f(s[nt][e] - new_max);  // 0 for masked keys
            l[r] += s[nt][e];
          }
        }
      }
      if (!two_row_halves) {
        s[0][2] = s[0][3] = s[1][2] = s[1][3] = 0.0f;  // no head rows g + 8
      }
      const uint32_t a[4] = {pack_pair<M>(s[0][0], s[0][1]), pack_pair<M>(s[0][2], s[0][3]),
                             pack_pair<M>(s[1][0], s[1][1]), pack_pair<M>(s[1][2], s[1][3])};
#pragma unroll
      for (int hh = 0; hh < v_chunks; ++hh) {
        const uint4 v[4] = {L::v_chunk(vc[h][0], hh), L::v_chunk(vc[h][1], hh),
                            L::v_chunk(vc[h][2], hh), L::v_chunk(vc[h][3], hh)};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const unsigned selector = j % 2 == 0 ? 0x5410u : 0x7632u;  // low or high halves
          const uint32_t b0 = __byte_perm(word(v[0], j / 2), word(v[1], j / 2), selector);
          const uint32_t b1 = __byte_perm(word(v[2], j / 2), word(v[3], j / 2), selector);
          mma_16816<M>(o[8 * hh + j], a, b0, b1);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(full_mask, l[r], 1);
    l[r] += __shfl_xor_sync(full_mask, l[r], 2);
  }

  __shared__ float s_max[decode_warps][ROWS];
  __shared__ float s_sum[decode_warps][ROWS];
  __shared__ float s_out[decode_warps][ROWS][DMAX];
  static_assert(2 * max_splits <= decode_warps * DMAX, "s_out holds the split merge's scratch");
#pragma unroll
  for (int hh = 0; hh < v_chunks; ++hh) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int d0 = L::out_dim(hh, 2 * t, j), d1 = L::out_dim(hh, 2 * t + 1, j);
      s_out[warp][g][d0] = o[8 * hh + j][0];
      s_out[warp][g][d1] = o[8 * hh + j][1];
      if (two_row_halves) {
        s_out[warp][g + 8][d0] = o[8 * hh + j][2];
        s_out[warp][g + 8][d1] = o[8 * hh + j][3];
      }
    }
  }
  if (t == 0) {
    s_max[warp][g] = m[0];
    s_sum[warp][g] = l[0];
    if (two_row_halves) {
      s_max[warp][g + 8] = m[1];
      s_sum[warp][g + 8] = l[1];
    }
  }
  __syncthreads();
  merge_warps_and_store<T, ROWS, DMAX>(p, s_max, s_sum, s_out, seq, token, first_head,
                                       heads_here, split, range.used);
  merge_splits_if_last<T>(p, seq, token, first_head, heads_here, range.used, &s_out[0][0][0]);
}

}  // namespace troupe::cuda::attention
