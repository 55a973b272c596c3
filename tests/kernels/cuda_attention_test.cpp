// Paged attention on the GPU (kernels/cuda/attention: the split-KV decode
// kernel, the tiled prefill kernel, and both in mixed batches) against the
// CPU reference (kernels/cpu/cpu_attention.cpp) on random inputs, float32,
// bfloat16 and float16, over shapes that hit the edges: head dims 16-256
// (20: no 16-byte rows in 16-bit types), GQA groups 1/3/4/8/16 (3: a
// partial head chunk, 16: two chunks), block sizes 8-128 (and 12, not a
// power of two), contexts on block boundaries (1, 15, 16, 17, 255-257, 1000,
// 4097), decode batches of 1-64 mixed lengths with forced and chosen split
// counts (including splits past the context: empty splits), prefill chunks
// starting at an offset with single-token queries mixed in. Each case also
// runs over an FP8 cache (kv_cache_dtype fp8: e4m3 codes, scales other than
// one; head dims of multiples of 16), against the reference on the decoded
// values, and against a cache of the compute type holding those values
// (power-of-two scales: bit for bit for prefills).
//
// Poisoned with NaN: the output (elements a kernel fails to write show),
// rows past the batch's last query token (must stay unwritten), the
// workspace, and every cache slot no sequence owns (the null block 0 that
// pads block tables and the slots past each sequence's length), so a read
// outside the visible keys shows. Skipped where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/device_info.h"
#include "model/quantization.h"
#include "model/weights.h"

namespace troupe {
namespace {

using cuda::element_type;

constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();

struct seq_shape {
  int32_t seq_len;    // context including this step's tokens
  int32_t query_len;  // this step's tokens (the last query_len positions)
};

struct attention_case {
  std::vector<seq_shape> seqs;
  int64_t head_dim = 128;
  int64_t num_kv_heads = 2;
  int64_t group = 4;  // query heads per KV head
  int64_t block_size = 16;
  float q_scale = 4.0f;  // q in [-q_scale, q_scale]: peaky softmax, so a wrong key shows
  uint32_t seed = 1;
  float k_scale = 0.37f, v_scale = 1.9f;  // FP8 caches: code * scale
};

// The suite's parameter: the compute type, and whether the cache holds FP8
// codes.
struct attention_param {
  element_type type;
  bool fp8;
};

std::string describe(const attention_case& c, int num_splits) {
  std::ostringstream s;
  s << "head_dim " << c.head_dim << ", kv heads " << c.num_kv_heads << ", group " << c.group
    << ", block_size " << c.block_size << ", splits " << num_splits << ", seqs";
  for (const seq_shape& q : c.seqs) s << " (" << q.seq_len << "," << q.query_len << ")";
  return s.str();
}

// The inputs of one case on the host (float32, already rounded to the
// element type) and the CPU reference's output.
struct host_case {
  std::vector<int32_t> query_start_loc{0}, seq_lens, block_tables;
  int64_t max_blocks = 0, max_query_len = 0, max_seq_len = 0, num_slots = 0;
  std::vector<float> q, k_cache, v_cache, want;
  std::vector<uint8_t> k_codes, v_codes;  // FP8 caches: k_cache = e4m3(code) * k_scale
};

class cuda_attention : public ::testing::TestWithParam<attention_param> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
  }
  element_type type() const { return GetParam().type; }
  bool fp8() const { return GetParam().fp8; }
  // Head dims an FP8 cache serves (rows of 8-code vectors).
  bool serves(int64_t head_dim) const { return !fp8() || head_dim % 16 == 0; }
  size_t elem() const { return type() == element_type::f32 ? 4 : 2; }

  uint16_t to_bits(float x) const {
    if (type() == element_type::bf16) return f32_to_bf16(x);
    const __half h = __float2half_rn(x);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  float from_bits(uint16_t b) const {
    return type() == element_type::bf16 ? bf16_to_f32(b) : f16_to_f32(b);
  }
  float rounded(float x) const { return type() == element_type::f32 ? x : from_bits(to_bits(x)); }

  std::vector<float> random(size_t n, float scale, std::mt19937& rng) const {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = rounded(d(rng));
    return v;
  }
  void* device(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess);
    buffers_.push_back(p);
    return p;
  }
  void* upload(const std::vector<float>& v) {
    void* p = device(v.size() * elem());
    if (type() == element_type::f32) {
      EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = to_bits(v[i]);
      EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
  }
  int32_t* upload_ints(const std::vector<int32_t>& v) {
    auto* p = static_cast<int32_t*>(device(v.size() * 4));
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
  std::vector<float> download(const void* p, size_t n) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> v(n);
    if (type() == element_type::f32) {
      EXPECT_EQ(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::vector<uint16_t> h(n);
      EXPECT_EQ(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n; ++i) v[i] = from_bits(h[i]);
    }
    return v;
  }

  void* upload_codes(const std::vector<uint8_t>& v) {
    void* p = device(v.size());
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }

  // fp8: the caches as e4m3 codes of the random values over c's scales,
  // k_cache / v_cache their decoded values.
  host_case make_host_case(const attention_case& c, bool fp8) const;
  // The launch arguments of h, its caches as codes (fp8) or values, without
  // the output, workspace and split counters.
  cuda::paged_attention_args make_args(const attention_case& c, const host_case& h, bool fp8);
  // Runs c on the GPU once per split setting (0: the launcher's choice) and
  // compares with the CPU reference (over the suite's cache kind).
  // workspace_seq_splits < 0: room for the largest split count asked;
  // split_counters: hand the launcher its split counters. Returns the split
  // counts the launcher used.
  std::vector<int> check(const attention_case& c, const std::vector<int>& splits,
                         int64_t workspace_seq_splits = -1, bool split_counters = true);
  // Rows [0, n) within tolerance of the reference, rows past n still NaN.
  void expect_matches(const std::vector<float>& got, const std::vector<float>& want, int64_t n,
                      int64_t head_dim, int64_t cols, const std::string& what) const;

  std::vector<void*> buffers_;
};

host_case cuda_attention::make_host_case(const attention_case& c, bool fp8) const {
  host_case h;
  std::mt19937 rng(c.seed);
  const int64_t bs = c.block_size, kv_cols = c.num_kv_heads * c.head_dim;
  const int64_t heads = c.num_kv_heads * c.group;
  int64_t used_blocks = 0;
  for (const seq_shape& s : c.seqs) {
    h.query_start_loc.push_back(h.query_start_loc.back() + s.query_len);
    h.seq_lens.push_back(s.seq_len);
    h.max_blocks = std::max<int64_t>(h.max_blocks, (s.seq_len + bs - 1) / bs);
    h.max_query_len = std::max<int64_t>(h.max_query_len, s.query_len);
    h.max_seq_len = std::max<int64_t>(h.max_seq_len, s.seq_len);
    used_blocks += (s.seq_len + bs - 1) / bs;
  }
  // Block 0 is the null block that pads tables; 3 more blocks nobody owns.
  const int64_t num_blocks = 1 + used_blocks + 3;
  h.num_slots = num_blocks * bs;
  std::vector<int32_t> free_blocks;
  for (int32_t b = 1; b < num_blocks; ++b) free_blocks.push_back(b);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  h.block_tables.assign(c.seqs.size() * static_cast<size_t>(h.max_blocks), 0);
  std::vector<bool> owned(static_cast<size_t>(h.num_slots), false);
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    for (int64_t b = 0; b < (c.seqs[i].seq_len + bs - 1) / bs; ++b) {
      h.block_tables[i * h.max_blocks + b] = free_blocks.back();
      free_blocks.pop_back();
    }
    for (int64_t key = 0; key < c.seqs[i].seq_len; ++key) {
      const int64_t slot = h.block_tables[i * h.max_blocks + key / bs] * bs + key % bs;
      owned[static_cast<size_t>(slot)] = true;
    }
  }
  const int64_t n = h.query_start_loc.back();
  h.q = random(static_cast<size_t>(n * heads * c.head_dim), c.q_scale, rng);
  h.k_cache = random(static_cast<size_t>(h.num_slots * kv_cols), 1.0f, rng);
  h.v_cache = random(static_cast<size_t>(h.num_slots * kv_cols), 1.0f, rng);
  for (int64_t slot = 0; slot < h.num_slots; ++slot) {
    if (owned[static_cast<size_t>(slot)]) continue;
    std::fill_n(h.k_cache.begin() + slot * kv_cols, kv_cols, nan_value);
    std::fill_n(h.v_cache.begin() + slot * kv_cols, kv_cols, nan_value);
  }
  if (fp8) {  // (NaN codes where the values are NaN)
    auto encode = [](std::vector<float>& values, float scale, std::vector<uint8_t>& codes) {
      codes.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        codes[i] = f32_to_e4m3(values[i] / scale);
        values[i] = e4m3_to_f32(codes[i]) * scale;
      }
    };
    encode(h.k_cache, c.k_scale, h.k_codes);
    encode(h.v_cache, c.v_scale, h.v_codes);
  }
  h.want.assign(static_cast<size_t>(n * heads * c.head_dim), 0.0f);
  attention_metadata meta;
  meta.num_seqs = static_cast<int64_t>(c.seqs.size());
  meta.query_start_loc = h.query_start_loc.data();
  meta.seq_lens = h.seq_lens.data();
  meta.block_tables = h.block_tables.data();
  meta.max_blocks_per_seq = h.max_blocks;
  meta.block_size = bs;
  meta.max_query_len = h.max_query_len;
  meta.max_seq_len = h.max_seq_len;
  auto view = [](std::vector<float>& v, int64_t rows, int64_t cols) {
    return tensor{v.data(), dtype::f32, rows, cols};
  };
  cpu_ops ref;
  ref.paged_attention(view(h.q, n, heads * c.head_dim),
                      {view(h.k_cache, h.num_slots, kv_cols), view(h.v_cache, h.num_slots, kv_cols)},
                      meta, heads, c.num_kv_heads, c.head_dim,
                      1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                      view(h.want, n, heads * c.head_dim));
  return h;
}

cuda::paged_attention_args cuda_attention::make_args(const attention_case& c, const host_case& h,
                                                     bool fp8) {
  constexpr int64_t padding_rows = 2;  // past the last query token: never written
  const int64_t n = h.query_start_loc.back(), num_seqs = static_cast<int64_t>(c.seqs.size());
  cuda::paged_attention_args a;
  a.q = upload(h.q);
  a.k_cache = fp8 ? upload_codes(h.k_codes) : upload(h.k_cache);
  a.v_cache = fp8 ? upload_codes(h.v_codes) : upload(h.v_cache);
  a.fp8_cache = fp8;
  a.k_scale = fp8 ? c.k_scale : 1.0f;
  a.v_scale = fp8 ? c.v_scale : 1.0f;
  a.query_start_loc = upload_ints(h.query_start_loc);
  a.seq_lens = upload_ints(h.seq_lens);
  a.block_tables = upload_ints(h.block_tables);
  a.num_tokens = n + padding_rows;
  a.num_seqs = num_seqs;
  a.max_query_len = h.max_query_len;
  a.max_seq_len = h.max_seq_len;
  a.max_blocks_per_seq = h.max_blocks;
  a.block_size = c.block_size;
  a.num_heads = c.num_kv_heads * c.group;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return a;
}

std::vector<int> cuda_attention::check(const attention_case& c, const std::vector<int>& splits,
                                       int64_t workspace_seq_splits, bool split_counters) {
  const host_case h = make_host_case(c, fp8());
  const int64_t heads = c.num_kv_heads * c.group, cols = heads * c.head_dim;
  const int64_t n = h.query_start_loc.back(), num_seqs = static_cast<int64_t>(c.seqs.size());
  constexpr int64_t padding_rows = 2;
  cuda::paged_attention_args a = make_args(c, h, fp8());
  if (workspace_seq_splits < 0) {
    const int most = std::max(1, *std::max_element(splits.begin(), splits.end()));
    workspace_seq_splits =
        std::max(num_seqs * most, cuda::paged_attention_workspace_seq_splits(num_seqs));
  }
  a.workspace_bytes = cuda::paged_attention_workspace_bytes(workspace_seq_splits, heads, c.head_dim);
  a.workspace = a.workspace_bytes > 0 ? device(a.workspace_bytes) : nullptr;

  // Split counters for the decode kernel's merge: zero, and zero again after
  // every launch (checked below).
  const int64_t counters = cuda::paged_attention_split_counters(num_seqs, heads);
  auto* counter_buf = static_cast<int32_t*>(device(static_cast<size_t>(counters) * 4));
  EXPECT_EQ(cudaMemset(counter_buf, 0, static_cast<size_t>(counters) * 4), cudaSuccess);
  if (split_counters) {
    a.split_counters = counter_buf;
    a.split_counters_count = counters;
  }

  std::vector<float> want = h.want;
  want.resize(static_cast<size_t>((n + padding_rows) * cols), nan_value);
  std::vector<int> used;
  for (int num_splits : splits) {
    a.num_splits = num_splits;
    used.push_back(cuda::paged_attention_num_splits(type(), a));
    const std::string what = describe(c, used.back());
    if (a.workspace != nullptr) {
      EXPECT_EQ(cudaMemset(a.workspace, 0xff, a.workspace_bytes), cudaSuccess);  // NaN floats
    }
    a.out = upload(std::vector<float>(want.size(), nan_value));
    cuda::paged_attention(type(), a, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
    expect_matches(download(a.out, want.size()), want, n, c.head_dim, cols, what);
    if (HasFatalFailure()) break;
    std::vector<int32_t> left(static_cast<size_t>(counters));
    EXPECT_EQ(cudaMemcpy(left.data(), counter_buf, left.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::count(left.begin(), left.end(), 0), counters) << what << ": counters not reset";
  }
  return used;
}

void cuda_attention::expect_matches(const std::vector<float>& got, const std::vector<float>& want,
                                    int64_t n, int64_t head_dim, int64_t cols,
                                    const std::string& what) const {
  ASSERT_EQ(got.size(), want.size());
  const float rel = type() == element_type::f32    ? 1e-4f
                    : type() == element_type::bf16 ? 1.6e-2f
                                                   : 4e-3f;
  const float abs = type() == element_type::f32    ? 2e-5f
                    : type() == element_type::bf16 ? 1e-2f
                                                   : 2e-3f;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
    if (row >= n) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": padding row " << row << " was written";
      continue;
    }
    ASSERT_FALSE(std::isnan(got[i]))
        << what << ": token " << row << " head " << col / head_dim << " dim " << col % head_dim
        << " is NaN (not written, or read a poisoned slot)";
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i]))
        << what << ": token " << row << " head " << col / head_dim << " dim " << col % head_dim;
  }
}

const std::vector<int32_t> boundary_contexts = {1, 15, 16, 17, 255, 256, 257, 1000, 4097};

std::vector<seq_shape> decodes(const std::vector<int32_t>& contexts) {
  std::vector<seq_shape> seqs;
  for (int32_t len : contexts) seqs.push_back({len, 1});
  return seqs;
}

TEST_P(cuda_attention, decode_over_head_dims_and_groups) {
  for (int64_t head_dim : {16, 20, 48, 64, 128, 256}) {
    if (!serves(head_dim)) continue;
    for (int64_t group : {1, 3, 4, 8, 16}) {
      attention_case c;
      c.seqs = decodes(boundary_contexts);
      c.head_dim = head_dim;
      c.group = group;
      c.seed = static_cast<uint32_t>(head_dim * 100 + group);
      check(c, {0, 1, 7});
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(cuda_attention, decode_over_block_sizes) {
  for (int64_t block_size : {8, 12, 32, 128}) {
    attention_case c;
    c.seqs = decodes(boundary_contexts);
    c.block_size = block_size;
    c.seed = static_cast<uint32_t>(block_size);
    check(c, {0, 3});
    if (HasFatalFailure()) return;
  }
}

// Llama-3.1-8B's shape (8 KV heads, group 4, head_dim 128, block 16) at the
// batch sizes of decode buckets, mixed random lengths; the chosen split
// count, one split, and more splits than short sequences have tiles.
TEST_P(cuda_attention, decode_batches_of_mixed_lengths) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> length(1, 4097);
  for (int batch : {1, 2, 3, 8, 64}) {
    std::vector<int32_t> contexts;
    for (int i = 0; i < batch; ++i) contexts.push_back(length(rng));
    attention_case c;
    c.seqs = decodes(contexts);
    c.num_kv_heads = 8;
    c.seed = static_cast<uint32_t>(batch);
    check(c, {0, 1, 64, 128});
    if (HasFatalFailure()) return;
  }
}

TEST_P(cuda_attention, decode_splits_bounded_by_the_workspace) {
  attention_case c;
  c.seqs = decodes({3000, 17, 4097, 1000, 256, 1, 2048, 777});
  const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
  EXPECT_EQ(check(c, {16}, 3 * num_seqs), std::vector<int>{3});
  EXPECT_EQ(check(c, {16, 0}, 0), (std::vector<int>{1, 1}));  // no workspace: one split
  EXPECT_EQ(check(c, {16, 0}, -1, false), (std::vector<int>{1, 1}));  // no counters: one split
  // The heuristic splits a lone long decode to fill the GPU.
  attention_case one;
  one.seqs = decodes({4096});
  one.num_kv_heads = 8;
  EXPECT_GT(check(one, {0}).front(), 1);
}

// Prefill chunks at offsets (prefix-cache hits, chunked prefill), fresh
// prompts around the 64-row query tile and the key tiles, a 2-token query,
// and single-token queries in the same batch (the decode kernel's).
const std::vector<seq_shape> mixed_batch = {
    {15, 15},  {16, 16},   {17, 17},  {64, 64}, {65, 65},     {130, 2}, {300, 37},
    {100, 1},  {1000, 130}, {257, 200}, {1, 1},  {4097, 70}, {129, 128}};

TEST_P(cuda_attention, prefill_over_head_dims_and_groups) {
  for (int64_t head_dim : {16, 20, 48, 64, 128, 256}) {
    if (!serves(head_dim)) continue;
    for (int64_t group : {1, 4, 8}) {
      attention_case c;
      c.seqs = mixed_batch;
      c.head_dim = head_dim;
      c.group = group;
      c.seed = static_cast<uint32_t>(head_dim * 10 + group);
      check(c, {0, 5});
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(cuda_attention, prefill_over_block_sizes) {
  for (int64_t block_size : {8, 12, 32, 128}) {
    attention_case c;
    c.seqs = mixed_batch;
    c.num_kv_heads = 8;
    c.block_size = block_size;
    c.seed = static_cast<uint32_t>(block_size);
    check(c, {0});
    if (HasFatalFailure()) return;
  }
}

// A step as the engine builds it: chunks of 8 prompts after prefix-cache
// hits of random lengths (not block-aligned), one long fresh prompt, decodes.
TEST_P(cuda_attention, prefill_chunks_after_prefix_hits) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> prefix(0, 900), chunk(2, 300);
  attention_case c;
  for (int i = 0; i < 8; ++i) {
    const int32_t q = chunk(rng);
    c.seqs.push_back({prefix(rng) + q, q});
  }
  c.seqs.push_back({1024, 1024});
  for (int32_t len : {5, 3000, 64}) c.seqs.push_back({len, 1});
  c.num_kv_heads = 8;
  check(c, {0, 4});
}

// An FP8 cache against a cache of the compute type holding its decoded
// values, over power-of-two scales (folding them into the softmax scale
// and the output's factor is then exact): the same bits for prefills (the
// tiles widened to the compute type), one split and several. Decodes over
// FP8 map dims to lanes their own way (16 codes a load; float32: 8 a
// vector), so their sums run in another order, and bf16's multiply in
// float16: they are held to the reference's tolerance instead (the other
// tests).
TEST_P(cuda_attention, fp8_cache_equals_a_cache_of_its_decoded_values) {
  if (!fp8()) GTEST_SKIP() << "FP8 caches only";
  attention_case c;
  c.seqs = mixed_batch;
  for (int32_t len : {3000, 1, 17}) c.seqs.push_back({len, 1});
  c.num_kv_heads = 8;
  c.k_scale = 0.5f;
  c.v_scale = 2.0f;
  const host_case h = make_host_case(c, true);
  const int64_t heads = c.num_kv_heads * c.group, cols = heads * c.head_dim;
  const int64_t n = h.query_start_loc.back(), num_seqs = static_cast<int64_t>(c.seqs.size());

  for (int num_splits : {1, 8}) {
    std::vector<float> outputs[2];
    for (bool codes : {false, true}) {
      cuda::paged_attention_args a = make_args(c, h, codes);
      a.num_splits = num_splits;
      a.workspace_bytes = cuda::paged_attention_workspace_bytes(num_seqs * num_splits, heads, c.head_dim);
      a.workspace = device(a.workspace_bytes);
      const int64_t counters = cuda::paged_attention_split_counters(num_seqs, heads);
      a.split_counters = static_cast<int32_t*>(device(static_cast<size_t>(counters) * 4));
      a.split_counters_count = counters;
      EXPECT_EQ(cudaMemset(a.split_counters, 0, static_cast<size_t>(counters) * 4), cudaSuccess);
      a.out = upload(std::vector<float>(static_cast<size_t>(a.num_tokens * cols), nan_value));
      cuda::paged_attention(type(), a, nullptr);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      outputs[codes ? 1 : 0] = download(a.out, static_cast<size_t>(a.num_tokens * cols));
    }
    for (int64_t s = 0; s < num_seqs; ++s) {
      const bool decode = c.seqs[static_cast<size_t>(s)].query_len == 1;
      if (decode) continue;
      for (int64_t i = h.query_start_loc[static_cast<size_t>(s)] * cols;
           i < h.query_start_loc[static_cast<size_t>(s) + 1] * cols; ++i) {
        ASSERT_EQ(outputs[0][static_cast<size_t>(i)], outputs[1][static_cast<size_t>(i)])
            << (decode ? "decode" : "prefill") << " sequence " << s << ", element " << i
            << ", splits " << num_splits;
      }
    }
    for (int64_t i = n * cols; i < static_cast<int64_t>(outputs[1].size()); ++i) {
      ASSERT_TRUE(std::isnan(outputs[1][static_cast<size_t>(i)])) << "padding written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(types, cuda_attention,
                         ::testing::Values(attention_param{element_type::f32, false},
                                           attention_param{element_type::bf16, false},
                                           attention_param{element_type::f16, false},
                                           attention_param{element_type::f32, true},
                                           attention_param{element_type::bf16, true},
                                           attention_param{element_type::f16, true}),
                         [](const auto& info) {
                           const element_type t = info.param.type;
                           return std::string(t == element_type::f32    ? "f32"
                                              : t == element_type::bf16 ? "bf16"
                                                                        : "f16") +
                                  (info.param.fp8 ? "_fp8_cache" : "");
                         });

}  // namespace
}  // namespace troupe
