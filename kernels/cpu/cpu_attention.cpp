// Paged attention on the CPU: for every (sequence, query token, head), an
// online-softmax pass over the keys the token may see (causal), in tiles of
// keys, reading K and V through the sequence's block table. Numerically the
// reference the CUDA kernels are checked against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/quantization.h"

namespace troupe {

namespace {

struct attention_job {
  const float* q;  // [head_dim]
  float* out;      // [head_dim]
  const int32_t* block_table;
  int64_t num_keys;  // keys 0 .. num_keys-1 are visible
  int64_t kv_head;
};

constexpr int64_t key_tile = 32;

// q . k with eight running sums (one per SIMD lane), added at the end: the
// compiler vectorizes this without reordering any one sum.
float dot(const float* q, const float* k, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int j = 0; j < 8; ++j) part[j] += q[d + j] * k[d + j];
  }
  float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; d < n; ++d) sum += q[d] * k[d];
  return sum;
}

// The head's K or V row of `slot`: in the cache (float32), or decoded from
// its FP8 codes into `scratch` (head_dim floats).
const float* kv_row(const tensor& t, float kv_scale, int64_t slot, int64_t offset, int64_t head_dim,
                    float* scratch) {
  if (t.type != dtype::fp8_e4m3) return t.f32() + slot * t.cols + offset;
  static const std::vector<float> decoded = [] {
    std::vector<float> table(256);
    for (int c = 0; c < 256; ++c) table[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return table;
  }();
  const uint8_t* codes = static_cast<const uint8_t*>(t.data) + slot * t.cols + offset;
  for (int64_t d = 0; d < head_dim; ++d) scratch[d] = decoded[codes[d]] * kv_scale;
  return scratch;
}

// Online softmax a tile of keys at a time: the tile's scores, one rescale of
// the running sum and accumulator per tile (not per key), then the weighted
// values. The same result as key by key up to float rounding. `scratch`:
// head_dim * (key_tile + 1) floats for an FP8 cache's decoded rows.
void attend_one(const attention_job& job, const kv_cache_layer& cache, int64_t block_size,
                int64_t head_dim, float scale, float* acc, float* scratch) {
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(acc, acc + head_dim, 0.0f);
  const int64_t offset = job.kv_head * head_dim;
  float scores[key_tile];
  const float* values[key_tile];
  for (int64_t t0 = 0; t0 < job.num_keys; t0 += key_tile) {
    const int64_t n = std::min(key_tile, job.num_keys - t0);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = t0 + i;
      const int64_t slot = static_cast<int64_t>(job.block_table[t / block_size]) * block_size +
                           t % block_size;
      const float* key = kv_row(cache.k, cache.k_scale, slot, offset, head_dim, scratch + key_tile * head_dim);
      values[i] = kv_row(cache.v, cache.v_scale, slot, offset, head_dim, scratch + i * head_dim);
      scores[i] = dot(job.q, key, head_dim) * scale;
      tile_max = std::max(tile_max, scores[i]);
    }
    if (tile_max > running_max) {
      const float correction = std::exp(running_max - tile_max);
      running_sum *= correction;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] *= correction;
      running_max = tile_max;
    }
    for (int64_t i = 0; i < n; ++i) {
      const float p = std::exp(scores[i] - running_max);
      running_sum += p;
      const float* val = values[i];
      for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * val[d];
    }
  }
  const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
  for (int64_t d = 0; d < head_dim; ++d) job.out[d] = acc[d] * inv;
}

}  // namespace

void cpu_ops::paged_attention(const tensor& q, const kv_cache_layer& cache,
                              const attention_metadata& meta, int64_t num_heads,
                              int64_t num_kv_heads, int64_t head_dim, float scale,
                              const tensor& out) {
  TROUPE_CHECK(num_heads % num_kv_heads == 0);
  TROUPE_CHECK(q.cols == num_heads * head_dim && out.cols == q.cols);
  const int64_t group = num_heads / num_kv_heads;
  // Flatten (token, head) pairs so OpenMP balances prefill and decode alike.
  std::vector<int32_t> token_seq(static_cast<size_t>(q.rows), -1);
  for (int64_t s = 0; s < meta.num_seqs; ++s) {
    for (int32_t t = meta.query_start_loc[s]; t < meta.query_start_loc[s + 1]; ++t) {
      token_seq[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    }
  }
  const int64_t total = q.rows * num_heads;
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(head_dim));
    std::vector<float> scratch(cache.fp8() ? static_cast<size_t>(head_dim * (key_tile + 1)) : 0);
#pragma omp for schedule(dynamic, 16)
    for (int64_t job_index = 0; job_index < total; ++job_index) {
      const int64_t token = job_index / num_heads;
      const int64_t head = job_index % num_heads;
      const int32_t s = token_seq[static_cast<size_t>(token)];
      if (s < 0) continue;  // padding token outside every sequence
      const int64_t query_len = meta.query_start_loc[s + 1] - meta.query_start_loc[s];
      const int64_t index_in_query = token - meta.query_start_loc[s];
      // The token's position is seq_len - query_len + index; it sees keys 0..position.
      attention_job job;
      job.q = q.f32() + token * q.cols + head * head_dim;
      job.out = out.f32() + token * out.cols + head * head_dim;
      job.block_table = meta.block_tables + s * meta.max_blocks_per_seq;
      job.num_keys = meta.seq_lens[s] - query_len + index_in_query + 1;
      job.kv_head = head / group;
      attend_one(job, cache, meta.block_size, head_dim, scale, acc.data(), scratch.data());
    }
  }
}

}  // namespace troupe
