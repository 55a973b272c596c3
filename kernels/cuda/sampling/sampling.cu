// The GPU sampler: one block of 1024 threads per row (greedy and unfiltered
// rows: their maximum over blocks of 256 first). See sampling.h for the
// contract and docs/gpu.md for how it matches the CPU sampler.
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sampling/candidates.cuh"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/select.cuh"
#include "kernels/philox.h"

namespace troupe::cuda {

namespace {

using namespace sampling_detail;

constexpr float sampling_eps = 1e-5f;  // below: greedy (vLLM's _SAMPLING_EPS)
// Quiet-NaN bit patterns that hold a token's output count in their low 22
// bits while the frequency penalty is being counted in place.
constexpr uint32_t count_tag = 0x7fc00000u;
constexpr uint32_t count_tag_mask = 0xffc00000u;

// ---- penalties ---------------------------------------------------------------

// The CPU's float arithmetic exactly: explicit roundings, no FMA contraction.
__device__ __forceinline__ float repetition(float x, float penalty) {
  return x > 0.0f ? __fdiv_rn(x, penalty) : __fmul_rn(x, penalty);
}

__device__ __forceinline__ bool has_penalties(const sample_params& p) {
  return (p.repetition_penalty != 1.0f && p.num_prompt_ids + p.num_output_ids > 0) ||
         ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && p.num_output_ids > 0);
}

__device__ __forceinline__ bool has_processors(const sample_params& p) {
  return p.mask_begin >= 0 || p.num_biases > 0;
}

// A token's logit after the logits processors: -inf outside the allowed
// mask, else plus its bias (found by binary search over the sorted pairs).
__device__ __forceinline__ float processed(const float* __restrict__ raw, int32_t token,
                                           const sample_params& p, const int32_t* __restrict__ ids) {
  if (p.mask_begin >= 0) {
    const uint32_t word = static_cast<uint32_t>(ids[p.mask_begin + (token >> 5)]);
    if (((word >> (token & 31)) & 1u) == 0) return -INFINITY;
  }
  float x = raw[token];
  const int32_t* pairs = ids + p.bias_begin;
  int lo = 0, hi = p.num_biases;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (pairs[2 * mid] < token) lo = mid + 1; else hi = mid;
  }
  if (lo < p.num_biases && pairs[2 * lo] == token) x = __fadd_rn(x, __int_as_float(pairs[2 * lo + 1]));
  return x;
}

// Greedy: temperature < 1e-5, top_k 1 or a vocabulary of one.
__device__ __forceinline__ bool greedy_row(const sample_params& p, int64_t vocab) {
  return p.temperature < sampling_eps || p.top_k == 1 || vocab == 1;
}

// The token is a maximum over the raw row (sampling.cu's chunked path):
// greedy, or sampled with no filter (no top_k below the vocabulary, top_p
// >= 1, min_p <= 0), without penalties, not forced.
__device__ __forceinline__ bool fast_row(const sample_params& p, int64_t vocab) {
  if (p.forced_token >= 0 || has_penalties(p) || has_processors(p)) return false;
  return greedy_row(p, vocab) ||
         (!(p.top_k > 0 && p.top_k < vocab) && p.min_p <= 0.0f && p.top_p >= 1.0f);
}

// The largest (key, id) of x[i] for i = first, first + stride, ... < end.
__device__ __forceinline__ u64 argmax_packed(const float* x, int64_t first, int64_t end,
                                             int64_t stride) {
  u64 best = 0;
  for (int64_t i = first; i < end; i += stride) {
    const u64 packed = pack_key_id(order_key(x[i]), static_cast<int32_t>(i));
    best = packed > best ? packed : best;
  }
  return best;
}

// out = the processed and penalized copy of raw (apply_processors, then
// apply_penalties of the CPU sampler). A penalty starts from the token's
// processed logit (recomputed by `processed`, so that writes stay
// idempotent). Output counts are taken in place: each output token's slot
// of `out` becomes a tagged counter (a NaN pattern), counted with atomics,
// then replaced exactly once (compare-and-swap) by its final value.
__device__ void penalize(const float* __restrict__ raw, int64_t vocab, const sample_params& p,
                         const int32_t* __restrict__ ids, float* out) {
  const int t = threadIdx.x;
  if (p.mask_begin >= 0) {
    const int32_t* mask = ids + p.mask_begin;
    for (int64_t i = t; i < vocab; i += sample_block_threads) {
      const bool allowed = (static_cast<uint32_t>(mask[i >> 5]) >> (i & 31)) & 1u;
      out[i] = allowed ? raw[i] : -INFINITY;
    }
  } else {
    for (int64_t i = t; i < vocab; i += sample_block_threads) out[i] = raw[i];
  }
  __syncthreads();
  if (p.num_biases > 0) {  // unique tokens: one write each
    const int32_t* pairs = ids + p.bias_begin;
    for (int j = t; j < p.num_biases; j += sample_block_threads) {
      out[pairs[2 * j]] = __fadd_rn(out[pairs[2 * j]], __int_as_float(pairs[2 * j + 1]));
    }
    __syncthreads();
  }
  if (!has_penalties(p)) return;
  const bool processors = has_processors(p);
  auto base = [&](int32_t token) { return processors ? processed(raw, token, p, ids) : raw[token]; };
  const int32_t* prompt = ids + p.prompt_begin;
  const int32_t* output = ids + p.output_begin;
  const bool repeat = p.repetition_penalty != 1.0f;
  if (repeat) {  // once per token however often it appears: idempotent writes
    for (int j = t; j < p.num_prompt_ids; j += sample_block_threads) {
      out[prompt[j]] = repetition(base(prompt[j]), p.repetition_penalty);
    }
    for (int j = t; j < p.num_output_ids; j += sample_block_threads) {
      out[output[j]] = repetition(base(output[j]), p.repetition_penalty);
    }
    __syncthreads();
  }
  if ((p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) || p.num_output_ids == 0) return;
  uint32_t* bits = reinterpret_cast<uint32_t*>(out);
  for (int j = t; j < p.num_output_ids; j += sample_block_threads) bits[output[j]] = count_tag;
  __syncthreads();
  for (int j = t; j < p.num_output_ids; j += sample_block_threads) atomicAdd(&bits[output[j]], 1u);
  __syncthreads();
  for (int j = t; j < p.num_output_ids; j += sample_block_threads) {
    const int32_t token = output[j];
    const uint32_t old = atomicAdd(&bits[token], 0u);
    if ((old & count_tag_mask) != count_tag) continue;  // another occurrence finished it
    const float count = static_cast<float>(old - count_tag);
    const float start = repeat ? repetition(base(token), p.repetition_penalty) : base(token);
    const float value = __fsub_rn(
        start, __fadd_rn(__fmul_rn(p.frequency_penalty, count), p.presence_penalty));
    atomicCAS(&bits[token], old, __float_as_uint(value));
  }
  __syncthreads();
}

// ---- sampled rows ------------------------------------------------------------

// What a sampled row keeps. min_key and min_weight are bounds every kept
// token meets (min_weight also carries min_p, an exact filter); the cuts
// are top_k's and top_p's.
struct keep_rule {
  float max_logit;
  uint32_t max_key;
  float temperature;
  uint32_t min_key = 0;
  float min_weight = 0.0f;
  order_cut top_k, top_p;
  __device__ float weight(float v) const { return expf((v - max_logit) / temperature); }
  __device__ bool within_bounds(float v, uint32_t key, float& w) const {
    if (v != v || key < min_key) return false;
    w = weight(v);
    return w >= min_weight;
  }
  __device__ bool keeps(float v, uint32_t key, int32_t id, float& w) const {
    return top_k.keeps(key, id) && top_p.keeps(key, id) && within_bounds(v, key, w);
  }
};

__device__ __forceinline__ void race_one(u64& best, float w, uint32_t word, int64_t id) {
  const float score = sampling_race_score(w, sampling_exponential_of(word));
  const u64 packed = pack_key_id(__float_as_uint(score), static_cast<int32_t>(id));
  best = packed > best ? packed : best;
}

// The exponential race over the kept tokens of the list.
__device__ u64 race(const list_source& src, const keep_rule& rule, const sample_params& p) {
  u64 best = 0;
  for (int64_t i = threadIdx.x; i < src.n; i += sample_block_threads) {
    const float v = src.value(i);
    const int32_t id = src.id(i);
    float w;
    if (!rule.keeps(v, order_key(v), id, w)) continue;
    race_one(best, w, sampling_philox(p.seed, p.step, static_cast<uint32_t>(id) / 4).v[id % 4], id);
  }
  return best;
}

// The race over groups g of four neighbouring tokens (one Philox call
// each) of the row, from `first` in steps of `stride` up to `end`.
__device__ u64 race_groups(const row_source& src, const keep_rule& rule, const sample_params& p,
                           int64_t first, int64_t end, int64_t stride) {
  u64 best = 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(src.x) & 15u) == 0;
  for (int64_t g = first; g < end && g * 4 < src.n; g += stride) {
    const int64_t base = g * 4;
    float v[4];
    if (aligned && base + 4 <= src.n) {
      const float4 q = *reinterpret_cast<const float4*>(src.x + base);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      for (int j = 0; j < 4; ++j) v[j] = base + j < src.n ? src.x[base + j] : NAN;
    }
    float w[4];
    bool kept[4], any = false;
    for (int j = 0; j < 4; ++j) {
      kept[j] = rule.keeps(v[j], order_key(v[j]), static_cast<int32_t>(base + j), w[j]);
      any = any || kept[j];
    }
    if (!any) continue;
    const philox_block r = sampling_philox(p.seed, p.step, static_cast<uint32_t>(g));
    for (int j = 0; j < 4; ++j) {
      if (kept[j]) race_one(best, w[j], r.v[j], base + j);
    }
  }
  return best;
}

// The race over the whole row.
__device__ u64 race(const row_source& src, const keep_rule& rule, const sample_params& p) {
  return race_groups(src, rule, p, threadIdx.x, (src.n + 3) / 4, sample_block_threads);
}

// top_k and top_p cuts on the source (the list or the row), then the race.
// total: top_p's total weight when the source is pruned by weight, else 0.
template <class Source>
__device__ int32_t cut_and_race(const Source& src, keep_rule rule, const sample_params& p,
                                u64 total, int32_t argmax, kernel_shared& sh) {
  auto key_of = [&](int64_t i, uint32_t& key) {
    key = order_key(src.value(i));
    return true;
  };
  const uint32_t lowest = rule.min_key > 0u ? rule.min_key : 1u;  // key 0: NaN
  if (p.top_k > 0 && p.top_k < src.n) {
    // The k-th of the whole order lies above min_key. With fewer candidates
    // than k (the list, min_p applied) everything stays.
    const select_result r = radix_select<false>(src.n, lowest, rule.max_key, key_of, any_token,
                                                p.top_k, 0.0f, 0, sh.select);
    rule.top_k = cut_at(src, r.key, p.top_k - r.above_count, r.eq_count, any_token, sh.select);
  }
  if (p.top_p < 1.0f) {
    auto kept = [&](int64_t i, uint32_t key, float& w) {
      return rule.top_k.keeps(key, src.id(i)) && rule.within_bounds(src.value(i), key, w);
    };
    const uint32_t lo = rule.top_k.active && rule.top_k.key > lowest ? rule.top_k.key : lowest;
    const select_result r =
        radix_select<true>(src.n, lo, rule.max_key, key_of, kept, 0, p.top_p, total, sh.select);
    // Ties at the cut, in id order: the m-th is kept while the weight before
    // it, above + (m - 1) * w, is below the target (at least one is).
    const u64 w = fixed_weight(rule.weight(key_value(r.key)));
    int need = r.eq_count;
    if (w > 0) {
      const u64 rest = r.target_weight > r.above_weight ? r.target_weight - r.above_weight : 0;
      const u64 n = (rest + w - 1) / w;
      need = n < 1 ? 1 : n > static_cast<u64>(r.eq_count) ? r.eq_count : static_cast<int>(n);
    }
    rule.top_p = cut_at(src, r.key, need, r.eq_count, kept, sh.select);
  }
  const u64 best = block_max_u64(race(src, rule, p), sh.reduce);
  return best == 0 ? argmax : packed_id(best);
}

// min_p -> top_k -> top_p as cuts of the (logit desc, id asc) order and the
// exponential race over what they keep. Bounds first (cheap, from the
// threads' own best tokens), so that usually a short list of candidates in
// shared memory replaces the row.
__device__ int32_t sample_filtered(const float* x, int64_t vocab, const sample_params& p,
                                   u64 thread_best, u64 best, kernel_shared& sh) {
  keep_rule rule;
  rule.max_key = static_cast<uint32_t>(best >> 32);
  rule.max_logit = key_value(rule.max_key);
  rule.temperature = p.temperature;
  const float min_p = fminf(p.min_p, 1.0f);  // the best token (weight 1) always stays
  rule.min_weight = min_p > 0.0f ? min_p : 0.0f;
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  if (top_k) rule.min_key = kth_key_bound(static_cast<uint32_t>(thread_best >> 32), p.top_k, sh);
  // top_p alone: tokens lighter than (1 - top_p) * mass / (2 vocab) hold
  // less than half the mass top_p leaves out, so they lie below its cut;
  // mass >= the threads' best tokens' weights.
  const bool prune_top_p = !top_k && p.top_p < 0.999f;
  if (prune_top_p) {
    const float v = key_value(static_cast<uint32_t>(thread_best >> 32));
    const float w = thread_best != 0 && v == v ? rule.weight(v) : 0.0f;
    const float mass = block_sum_f32(w >= min_p ? w : 0.0f, sh.reduce);
    rule.min_weight = fmaxf(rule.min_weight, 0.5f * (1.0f - p.top_p) * mass / vocab);
  }
  if (rule.min_key == 0 && rule.min_weight == 0.0f) {
    return cut_and_race(row_source{x, vocab}, rule, p, 0, packed_id(best), sh);
  }
  u64 total = 0;  // min_p's kept weight, for top_p over the pruned candidates
  uint32_t lowest = 0xffffffffu;  // the lowest key that passes the bounds
  const int count = compact(x, vocab, [&](int64_t, float v) {
    const uint32_t key = order_key(v);
    float w;
    if (v != v || key < rule.min_key) return false;
    w = rule.weight(v);
    if (w < min_p) return false;
    if (prune_top_p) total += fixed_weight(w);
    if (w < rule.min_weight) return false;
    lowest = key < lowest ? key : lowest;
    return true;
  }, sh);
  if (prune_top_p) total = block_sum_u64(total, sh.reduce);
  // No kept token lies below: later passes skip those on the key alone.
  lowest = 0xffffffffu - static_cast<uint32_t>(block_max_u64(0xffffffffu - lowest, sh.reduce));
  rule.min_key = lowest > rule.min_key ? lowest : rule.min_key;
  if (count <= list_capacity) {
    return cut_and_race(list_source{sh.list_values, sh.list_ids, count, vocab}, rule, p, total,
                        packed_id(best), sh);
  }
  return cut_and_race(row_source{x, vocab}, rule, p, total, packed_id(best), sh);
}

__device__ int32_t choose_token(const float* __restrict__ raw, int64_t vocab,
                                const sample_params& p, const int32_t* __restrict__ ids,
                                float* row_scratch, kernel_shared& sh) {
  const float* x = raw;
  if (has_penalties(p) || has_processors(p)) {
    penalize(raw, vocab, p, ids, row_scratch);
    x = row_scratch;
  }
  u64 thread_best = argmax_packed(x, threadIdx.x, vocab, sample_block_threads);
  u64 best = block_max_u64(thread_best, sh.reduce);
  if (has_processors(p) && x[packed_id(best)] == -INFINITY) {
    // The processors ban every token: sampled as if they were off (the
    // CPU's apply_processors_or_keep_raw), penalties included.
    sample_params plain = p;
    plain.mask_begin = -1;
    plain.num_biases = 0;
    x = raw;
    if (has_penalties(plain)) {
      __syncthreads();
      penalize(raw, vocab, plain, ids, row_scratch);
      x = row_scratch;
    }
    thread_best = argmax_packed(x, threadIdx.x, vocab, sample_block_threads);
    best = block_max_u64(thread_best, sh.reduce);
    if (greedy_row(plain, vocab)) return packed_id(best);
    return sample_filtered(x, vocab, plain, thread_best, best, sh);
  }
  if (greedy_row(p, vocab)) return packed_id(best);
  return sample_filtered(x, vocab, p, thread_best, best, sh);
}

// ---- logprobs ----------------------------------------------------------------

// The top k of the source (k <= its candidates: keys in [bound, max_key]),
// best first, ties by lowest id, as logprobs: value - lse.
template <class Source>
__device__ void write_top(const Source& src, uint32_t bound, uint32_t max_key, int k, float lse,
                          sample_output& out, kernel_shared& sh) {
  auto key_of = [&](int64_t i, uint32_t& key) {
    key = order_key(src.value(i));
    return true;
  };
  const select_result r =
      radix_select<false>(src.n, bound, max_key, key_of, any_token, k, 0.0f, 0, sh.select);
  const order_cut cut = cut_at(src, r.key, k - r.above_count, r.eq_count, any_token, sh.select);
  if (threadIdx.x == 0) sh.top_count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < src.n; i += sample_block_threads) {
    const uint32_t key = order_key(src.value(i));
    if (key < bound || !cut.keeps(key, src.id(i))) continue;
    const int slot = atomicAdd(&sh.top_count, 1);
    if (slot < max_sample_logprobs) sh.top[slot] = pack_key_id(key, src.id(i));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int a = 1; a < k; ++a) {  // insertion sort, best first
      const u64 v = sh.top[a];
      int b = a;
      for (; b > 0 && sh.top[b - 1] < v; --b) sh.top[b] = sh.top[b - 1];
      sh.top[b] = v;
    }
    for (int a = 0; a < k; ++a) {
      out.top_ids[a] = packed_id(sh.top[a]);
      out.top_logprobs[a] = key_value(static_cast<uint32_t>(sh.top[a] >> 32)) - lse;
    }
  }
  __syncthreads();
}

// log_softmax of the raw row: the chosen token's logprob and rank, and the
// top k best first (ties: lowest id).
__device__ void write_logprobs(const float* __restrict__ raw, int64_t vocab, int32_t token,
                               int32_t num_logprobs, sample_output& out, kernel_shared& sh) {
  const int t = threadIdx.x;
  if (num_logprobs < 0) {
    if (t == 0) {
      out.token_id = token;
      out.rank = 0;
      out.logprob = 0.0f;
      out.num_top = 0;
    }
    return;
  }
  const float chosen = raw[token];
  float m = -INFINITY, s = 0.0f;  // this thread's running max and sum of exp(v - m)
  int greater = 0;
  for (int64_t i = t; i < vocab; i += sample_block_threads) {
    const float v = raw[i];
    greater += v > chosen;
    if (v == -INFINITY) continue;
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float max_all = block_max_f32(m, sh.reduce);
  const float sum = block_sum_f32(m == -INFINITY ? 0.0f : s * expf(m - max_all), sh.reduce);
  const float lse = max_all + logf(sum);
  greater = block_sum_i32(greater, sh.reduce);
  const int k = vocab < max_sample_logprobs && vocab < num_logprobs
                    ? static_cast<int>(vocab)
                    : min(num_logprobs, max_sample_logprobs);
  if (k > 0) {
    const uint32_t bound = kth_key_bound(order_key(m), k, sh);
    const int count = compact(raw, vocab, [&](int64_t, float v) { return order_key(v) >= bound; }, sh);
    const uint32_t max_key = order_key(max_all);
    if (count <= list_capacity) {
      write_top(list_source{sh.list_values, sh.list_ids, count, vocab}, bound, max_key, k, lse,
                out, sh);
    } else {
      write_top(row_source{raw, vocab}, bound, max_key, k, lse, out, sh);
    }
  }
  if (t == 0) {
    out.token_id = token;
    out.rank = 1 + greater;
    out.logprob = chosen - lse;
    out.num_top = k;
  }
}

// ---- rows sampled from the whole row, spread over blocks ----------------------

// The rows fast_row() accepts: their token is a maximum over the row (the
// argmax, or the race's best score given the row's maximum logit), which
// blocks of fast_threads
// compute chunk by chunk (fast_max_kernel, then fast_race_kernel) and
// sample_kernel combines. A maximum is the same whatever the partition, so
// the token is the one-block path's bit for bit. One 1024-thread block a
// row left a 64-row batch on 64 SMs and a single row on one.
constexpr int fast_chunk = 4096;  // tokens a block: a multiple of 4 (a Philox call's tokens)
constexpr int fast_threads = 256;
constexpr int64_t fast_max_chunks = 65535;  // gridDim.y

__device__ __forceinline__ u64 fast_block_max(u64 v) {
  __shared__ u64 wide[fast_threads / 32];
  return block_max_u64(v, wide);
}

// The maximum of a row's chunk partials (every thread of a block of
// `threads` gets it).
template <int threads, class Reduce>
__device__ __forceinline__ u64 max_of_chunks(const u64* partial, int64_t chunks, Reduce reduce) {
  u64 v = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += threads) v = partial[c] > v ? partial[c] : v;
  return reduce(v);
}

// partial_max[row, chunk] = the chunk's largest (key, id), as choose_token's.
__global__ void __launch_bounds__(fast_threads)
    fast_max_kernel(const float* __restrict__ logits, int64_t vocab,
                    const sample_params* __restrict__ params, u64* partial_max) {
  pdl_begin();  // the logits are the kernel ahead's (launch.cuh)
  const int64_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const sample_params p = params[row];
  if (!fast_row(p, vocab)) return;
  const float* raw = logits + static_cast<int64_t>(p.logits_row) * vocab;
  const int64_t begin = chunk * fast_chunk;
  const int64_t end = begin + fast_chunk < vocab ? begin + fast_chunk : vocab;
  const u64 best = fast_block_max(argmax_packed(raw, begin + threadIdx.x, end, fast_threads));
  if (threadIdx.x == 0) partial_max[row * chunks + chunk] = best;
}

// partial_race[row, chunk] = the chunk's best race score (key, id), as
// race(row_source) with no cut and no bound (sampled rows only).
__global__ void __launch_bounds__(fast_threads)
    fast_race_kernel(const float* __restrict__ logits, int64_t vocab,
                     const sample_params* __restrict__ params, const u64* partial_max,
                     u64* partial_race) {
  pdl_begin();  // partial_max is the kernel ahead's
  const int64_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const sample_params p = params[row];
  if (!fast_row(p, vocab) || greedy_row(p, vocab)) return;
  const float* raw = logits + static_cast<int64_t>(p.logits_row) * vocab;
  const u64 best = max_of_chunks<fast_threads>(partial_max + row * chunks, chunks,
                                               [](u64 v) { return fast_block_max(v); });
  keep_rule rule;
  rule.max_key = static_cast<uint32_t>(best >> 32);
  rule.max_logit = key_value(rule.max_key);
  rule.temperature = p.temperature;
  const int64_t first_group = chunk * fast_chunk / 4;
  u64 race_best = race_groups(row_source{raw, vocab}, rule, p, first_group + threadIdx.x,
                              first_group + fast_chunk / 4, fast_threads);
  race_best = fast_block_max(race_best);
  if (threadIdx.x == 0) partial_race[row * chunks + chunk] = race_best;
}

// The token of a fast row from the chunk partials (every thread gets it).
__device__ int32_t fast_token(const sample_params& p, int64_t vocab, const u64* partial_max,
                              const u64* partial_race, int64_t chunks, kernel_shared& sh) {
  auto reduce = [&](u64 v) { return block_max_u64(v, sh.reduce); };
  const u64 best = max_of_chunks<sample_block_threads>(partial_max, chunks, reduce);
  if (greedy_row(p, vocab)) return packed_id(best);
  const u64 race_best = max_of_chunks<sample_block_threads>(partial_race, chunks, reduce);
  return race_best == 0 ? packed_id(best) : packed_id(race_best);  // as cut_and_race
}

__global__ void __launch_bounds__(sample_block_threads)
    sample_kernel(const float* __restrict__ logits, int64_t vocab,
                  const sample_params* __restrict__ params, const int32_t* __restrict__ ids,
                  float* scratch, const u64* partial_max, const u64* partial_race, int64_t chunks,
                  int32_t* token_ids, sample_output* outputs) {
  __shared__ kernel_shared sh;
  const int64_t row = blockIdx.x;
  const sample_params p = params[row];
  const float* raw = logits + static_cast<int64_t>(p.logits_row) * vocab;
  int32_t token = p.forced_token;
  if (token < 0 && chunks > 0 && fast_row(p, vocab)) {
    token = fast_token(p, vocab, partial_max + row * chunks, partial_race + row * chunks, chunks,
                       sh);
  } else if (token < 0) {
    token = choose_token(raw, vocab, p, ids, scratch + row * vocab, sh);
  }
  if (token_ids != nullptr && threadIdx.x == 0) token_ids[row] = token;
  if (outputs != nullptr) write_logprobs(raw, vocab, token, p.num_logprobs, outputs[row], sh);
}

}  // namespace

namespace {

int64_t fast_chunks(int64_t vocab) {
  const int64_t chunks = (vocab + fast_chunk - 1) / fast_chunk;
  return chunks <= fast_max_chunks ? chunks : 0;  // 0: every row on the one-block path
}

// The penalized rows' copies, then the fast path's partials (16-byte aligned).
size_t rows_bytes(int64_t n, int64_t vocab) {
  return (static_cast<size_t>(n) * static_cast<size_t>(vocab) * sizeof(float) + 15) & ~size_t{15};
}

}  // namespace

size_t sample_scratch_bytes(int64_t n, int64_t vocab) {
  return rows_bytes(n, vocab) + 2 * static_cast<size_t>(n * fast_chunks(vocab)) * sizeof(u64);
}

void sample(const float* logits, int64_t vocab, const sample_params* params,
            const int32_t* penalty_ids, int64_t n, void* scratch, int32_t* token_ids,
            sample_output* outputs, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t chunks = fast_chunks(vocab);
  u64* partial_max = reinterpret_cast<u64*>(static_cast<char*>(scratch) + rows_bytes(n, vocab));
  u64* partial_race = partial_max + n * chunks;
  if (chunks > 0) {
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(chunks));
    launch_pdl(fast_max_kernel, grid, fast_threads, 0, stream, logits, vocab, params, partial_max);
    launch_pdl(fast_race_kernel, grid, fast_threads, 0, stream, logits, vocab, params,
               static_cast<const u64*>(partial_max), partial_race);
  }
  sample_kernel<<<static_cast<unsigned>(n), sample_block_threads, 0, stream>>>(
      logits, vocab, params, penalty_ids, static_cast<float*>(scratch), partial_max, partial_race,
      chunks, token_ids, outputs);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
