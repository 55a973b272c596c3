// Split-KV decode on tensor cores, for bfloat16/float16 with 16-byte rows
// (head_dim % 8 == 0) up to head_dim 128. The grid, the key splits, the
// warp merge and the partials are decode_kernel's (decode.cuh); what
// differs is a warp's step over 16 keys: instead of ~80 SIMT instructions a
// key (dot products, shuffle reductions, exponentials per head), the group's
// query heads are the rows of mma.sync m16n8k16 tiles (ROWS = 8 or 16 heads;
// rows past the group are zero), which leaves the kernel bound by memory.
//
//   S (heads x 16 keys) = Q K^T: two 8-key column tiles, head_dim / 16 k-steps
//   P = online softmax of S (exp2 domain), per head row
//   O (heads x head_dim) += P V: one 16-key k-step, head_dim / 8 column tiles
//
// Every K and V load is 16 bytes by choosing which physical dims each
// logical mma index stands for (a dot product and P V do not care about the
// order of dims, as long as both operands agree):
//   S: lane (g, t) loads key g of a column tile, dims 32j + 8t .. +8, as 4
//      words w0..w3: k-step 2j takes b0 = w0, b1 = w1, k-step 2j+1 b0 = w2,
//      b1 = w3; Q's A fragments are built from the same dims of head rows g
//      (and g + 8).
//   P V: column n of column tile 8h + j is dim 64h + 8n + j. Lane (g, t)
//      loads keys 2t, 2t+1, 2t+8, 2t+9 at dims 64h + 8g .. +8 and pairs
//      keys (2t, 2t+1) and (2t+8, 2t+9) element by element (byte_perm)
//      into b0 and b1; P's A fragment is S's C fragments re-packed. So the
//      lane's outputs c0, c1 of tile 8h + j are dims 64h + 16t + j and
//      64h + 16t + 8 + j.
// Dims past head_dim load as zeros. Keys past the split's end load as zeros
// (their V must not be NaN: P = 0 would not cancel it) and score -inf.
#pragma once

#include "kernels/cuda/attention/decode.cuh"
#include "kernels/cuda/attention/mma.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda::attention {

constexpr int mma_step_keys = 16;

// 16 bytes at byte `offset` of a row, or zeros.
__device__ __forceinline__ uint4 load_row_chunk(const char* row, int offset, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(row + offset)) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <class T, int DMAX, int ROWS>
__global__ void __launch_bounds__(decode_threads) decode_mma_kernel(params p) {
  static_assert(sizeof(T) == 2 && (DMAX == 64 || DMAX == 128) && (ROWS == 8 || ROWS == 16));
  constexpr int k_chunks = DMAX / 32;  // S: 16-byte chunks of a K row per lane
  constexpr int v_chunks = DMAX / 64;  // P V: 16-byte chunks of a V row per lane
  constexpr int k_steps = DMAX / 16;
  constexpr int out_tiles = DMAX / 8;
  constexpr bool two_row_halves = ROWS == 16;  // heads g + 8 are in use

  const int seq = blockIdx.z;
  const int token = p.query_start_loc[seq];
  if (p.query_start_loc[seq + 1] - token != 1) return;  // the prefill kernel's sequence
  const int kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y - kv_head * p.head_chunks;
  const int first_head = kv_head * p.group + chunk * ROWS;
  const int heads_here = min(ROWS, p.group - chunk * ROWS);
  const int num_keys = p.seq_lens[seq];
  const int split = blockIdx.x;
  const split_range range = split_of(p, num_keys, split, mma_step_keys);
  if (split >= range.used) return;  // a short sequence's unused split
  const int key_begin = range.begin, key_end = range.end;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int dim_bytes = p.head_dim * static_cast<int>(sizeof(T));
  constexpr int elem = static_cast<int>(sizeof(T));

  // The step's metadata (query_start_loc, seq_lens, block tables) is
  // uploaded before the step's first kernel and written by no kernel, so
  // it and the first table lookup are read before waiting for the kernel
  // ahead (launch.cuh); Q and this step's K/V rows (written by
  // qkv_rope_cache) only after.
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const char* k_head = static_cast<const char*>(p.k_cache) +
                       static_cast<int64_t>(kv_head) * p.head_dim * elem;
  const char* v_head = static_cast<const char*>(p.v_cache) +
                       static_cast<int64_t>(kv_head) * p.head_dim * elem;
  const int64_t row_bytes = p.kv_row_stride * elem;
  // A step's 16 keys start at a multiple of 16; with block_size % 16 == 0
  // they share one block: one table lookup a step, issued a step ahead.
  const bool one_block_a_step = (p.block_size & (mma_step_keys - 1)) == 0;
  constexpr int step_stride = decode_warps * mma_step_keys;
  int step = key_begin + warp * mma_step_keys;
  int step_slot = one_block_a_step && step < key_end ? slot_of(p, table, step) : 0;
  auto row_offset = [&](int key) -> int64_t {  // bytes, for a key before key_end
    const int slot = one_block_a_step ? step_slot + (key - step) : slot_of(p, table, key);
    return static_cast<int64_t>(slot) * row_bytes;
  };

  uint4 kc[2][k_chunks];  // keys step + g and step + 8 + g
  uint4 vc[4][v_chunks];  // keys step + 2t, 2t + 1, 2t + 8, 2t + 9
  auto load_kv = [&] {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = step + 8 * nt + g;
      const bool valid = key < key_end;
      const char* row = valid ? k_head + row_offset(key) : k_head;
#pragma unroll
      for (int j = 0; j < k_chunks; ++j) {
        const int dim_byte = (32 * j + 8 * t) * elem;
        kc[nt][j] = load_row_chunk(row, dim_byte, valid && dim_byte < dim_bytes);
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = step + 2 * t + (r & 1) + 8 * (r >> 1);
      const bool valid = key < key_end;
      const char* row = valid ? v_head + row_offset(key) : v_head;
#pragma unroll
      for (int h = 0; h < v_chunks; ++h) {
        const int dim_byte = (64 * h + 8 * g) * elem;
        vc[r][h] = load_row_chunk(row, dim_byte, valid && dim_byte < dim_bytes);
      }
    }
  };
  // The first step's keys and values are requested before the wait too
  // when none of them is this step's: the sequence's one new key (its
  // last, num_keys - 1) is the only cache row the kernels of this step
  // write for it, and every older row was written by an earlier step
  // (launch.cuh). TROUPE_PRELOAD=0 waits first.
  bool preloaded = p.preload && step < key_end && step + mma_step_keys <= num_keys - 1;
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
      const int dim_byte = (32 * j + 8 * t) * elem;
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
  }

  float o[out_tiles][4];
#pragma unroll
  for (int n = 0; n < out_tiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // head rows g and g + 8, exp2 domain
  float l[2] = {0.0f, 0.0f};            // this lane's part of their sums

  for (; step < key_end; step += step_stride) {  // warp-uniform
    if (!preloaded) load_kv();
    preloaded = false;
    if (one_block_a_step) {
      const int next = step + step_stride;
      if (next < key_end) step_slot = slot_of(p, table, next);  // lands while the loads fly
    }

    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < k_steps; ++kk) {
        const uint32_t a[4] = {qa[kk][0], two_row_halves ? qb[kk][0] : 0u, qa[kk][1],
                               two_row_halves ? qb[kk][1] : 0u};
        const uint4& c = kc[nt][kk / 2];
        mma_16816<T>(s[nt], a, word(c, 2 * (kk % 2)), word(c, 2 * (kk % 2) + 1));
      }
    }
    // Scale, mask keys past the split, online softmax per head row (the 4
    // lanes of a quad hold a row's 16 keys). Key `step` is valid, so the row
    // maxima are finite.
#pragma unroll
    for (int r = 0; r < (two_row_halves ? 2 : 1); ++r) {
      float row_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const int key = step + 8 * nt + 2 * t + (e & 1);
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
    const uint32_t a[4] = {pack_pair<T>(s[0][0], s[0][1]), pack_pair<T>(s[0][2], s[0][3]),
                           pack_pair<T>(s[1][0], s[1][1]), pack_pair<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int h = 0; h < v_chunks; ++h) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned selector = j % 2 == 0 ? 0x5410u : 0x7632u;  // low or high halves
        const uint32_t b0 = __byte_perm(word(vc[0][h], j / 2), word(vc[1][h], j / 2), selector);
        const uint32_t b1 = __byte_perm(word(vc[2][h], j / 2), word(vc[3][h], j / 2), selector);
        mma_16816<T>(o[8 * h + j], a, b0, b1);
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
  for (int h = 0; h < v_chunks; ++h) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int d = 64 * h + 16 * t + j;
      s_out[warp][g][d] = o[8 * h + j][0];
      s_out[warp][g][d + 8] = o[8 * h + j][1];
      if (two_row_halves) {
        s_out[warp][g + 8][d] = o[8 * h + j][2];
        s_out[warp][g + 8][d + 8] = o[8 * h + j][3];
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
