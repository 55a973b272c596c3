// cpu_ops against naive references written here (double precision), on
// seeded random inputs. Outputs are poisoned with NaN before each call so an
// element the op forgets to write fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace troupe {
namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class cpu_ops_test : public ::testing::Test {
 protected:
  tensor make(int64_t rows, int64_t cols, const std::vector<float>& host) {
    tensor t = ops_.alloc(dtype::f32, rows, cols);
    EXPECT_EQ(host.size(), static_cast<size_t>(rows * cols));
    ops_.upload(host.data(), t);
    return t;
  }
  tensor poisoned(int64_t rows, int64_t cols) {
    return make(rows, cols, std::vector<float>(static_cast<size_t>(rows * cols), nan_f));
  }
  std::vector<float> read(const tensor& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    ops_.download(t, host.data());
    return host;
  }
  int32_t* ints(const std::vector<int32_t>& host) {
    int32_t* p = ops_.alloc_ints(static_cast<int64_t>(host.size()));
    ops_.upload_ints(host.data(), p, static_cast<int64_t>(host.size()));
    return p;
  }

  cpu_ops ops_;
  std::mt19937 rng_{1234};
};

// |got - want| <= rtol * (|want| + scale); NaN never passes.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  double rtol = 1e-5, double scale = 1e-3) {
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double tol = rtol * (std::abs(want[i]) + scale);
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
      ++failures;
    }
  }
}

std::vector<double> rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w,
                                 int64_t rows, int64_t cols, double eps) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < cols; ++j) ss += double(x[i * cols + j]) * x[i * cols + j];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[i * cols + j] * inv * w[j];
  }
  return out;
}

TEST_F(cpu_ops_test, rms_norm_matches_reference) {
  for (int64_t cols : {1, 7, 64, 301}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 5;
    const auto x = random_vec(rng_, rows * cols, -3.0f, 3.0f);
    const auto w = random_vec(rng_, cols, 0.5f, 1.5f);
    const tensor out = poisoned(rows, cols);
    ops_.rms_norm(make(rows, cols, x), make(1, cols, w), 1e-6f, out);
    expect_close(read(out), rms_norm_ref(x, w, rows, cols, 1e-6));
  }
}

TEST_F(cpu_ops_test, rms_norm_eps_matters_for_small_rows) {
  const int64_t cols = 8;
  const std::vector<float> x(cols, 1e-3f);
  const std::vector<float> w(cols, 1.0f);
  const tensor out = poisoned(1, cols);
  ops_.rms_norm(make(1, cols, x), make(1, cols, w), 1e-5f, out);
  expect_close(read(out), rms_norm_ref(x, w, 1, cols, 1e-5));
}

TEST_F(cpu_ops_test, add_rms_norm_updates_residual_and_normalizes_it) {
  const int64_t rows = 6, cols = 96;
  const auto r = random_vec(rng_, rows * cols, -2.0f, 2.0f);
  const auto x = random_vec(rng_, rows * cols, -2.0f, 2.0f);
  const auto w = random_vec(rng_, cols, 0.5f, 1.5f);
  const tensor residual = make(rows, cols, r);
  const tensor out = poisoned(rows, cols);
  ops_.add_rms_norm(residual, make(rows, cols, x), make(1, cols, w), 1e-6f, out);
  std::vector<float> sum(r.size());
  for (size_t i = 0; i < r.size(); ++i) sum[i] = r[i] + x[i];
  EXPECT_EQ(read(residual), sum);
  expect_close(read(out), rms_norm_ref(sum, w, rows, cols, 1e-6));
}

TEST_F(cpu_ops_test, head_rms_norm_normalizes_each_head_separately) {
  for (int64_t head_dim : {16, 64, 128}) {
    SCOPED_TRACE(head_dim);
    const int64_t rows = 3, heads = 5, cols = heads * head_dim;
    auto x = random_vec(rng_, rows * cols, -2.0f, 2.0f);
    // Heads of very different scales: a whole-row norm would not match.
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < head_dim; ++j) x[i * cols + 2 * head_dim + j] *= 50.0f;
    }
    const auto w = random_vec(rng_, head_dim, 0.5f, 1.5f);
    const tensor t = make(rows, cols, x);
    ops_.head_rms_norm(t, head_dim, make(1, head_dim, w), 1e-6f);
    // Each head is a row of width head_dim in the reference.
    expect_close(read(t), rms_norm_ref(x, w, rows * heads, head_dim, 1e-6));
  }
}

TEST_F(cpu_ops_test, linear_matches_reference_with_and_without_bias) {
  struct shape { int64_t n, in, out; };
  for (const shape s : {shape{1, 1, 1}, shape{7, 13, 5}, shape{33, 64, 97}, shape{2, 129, 3}}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message() << s.n << "x" << s.in << "->" << s.out
                                      << " bias=" << with_bias);
      const auto x = random_vec(rng_, s.n * s.in);
      const auto w = random_vec(rng_, s.out * s.in);
      const auto b = random_vec(rng_, s.out, -5.0f, 5.0f);
      const tensor bias = make(1, s.out, b);
      const tensor out = poisoned(s.n, s.out);
      ops_.linear(make(s.n, s.in, x), make(s.out, s.in, w), with_bias ? &bias : nullptr, out);
      const auto got = read(out);
      for (int64_t i = 0; i < s.n; ++i) {
        for (int64_t o = 0; o < s.out; ++o) {
          double want = with_bias ? b[o] : 0.0, magnitude = std::abs(want);
          for (int64_t k = 0; k < s.in; ++k) {
            want += double(x[i * s.in + k]) * w[o * s.in + k];
            magnitude += std::abs(double(x[i * s.in + k]) * w[o * s.in + k]);
          }
          const float g = got[i * s.out + o];
          ASSERT_TRUE(std::abs(g - want) <= 1e-5 * (magnitude + 1e-3))
              << "row " << i << " col " << o << ": got " << g << ", want " << want;
        }
      }
    }
  }
}

TEST_F(cpu_ops_test, rope_rotates_pairs_like_complex_multiplication) {
  for (int64_t head_dim : {16, 64, 128}) {
    SCOPED_TRACE(head_dim);
    const int64_t half = head_dim / 2, max_pos = 300, n = 9, q_heads = 4, k_heads = 2;
    std::vector<double> inv_freq(half);
    for (int64_t j = 0; j < half; ++j) inv_freq[j] = std::pow(10000.0, -2.0 * j / head_dim);
    std::vector<float> cos_t(max_pos * half), sin_t(max_pos * half);
    for (int64_t p = 0; p < max_pos; ++p) {
      for (int64_t j = 0; j < half; ++j) {
        cos_t[p * half + j] = static_cast<float>(std::cos(p * inv_freq[j]));
        sin_t[p * half + j] = static_cast<float>(std::sin(p * inv_freq[j]));
      }
    }
    const rope_tables tables{make(max_pos, half, cos_t), make(max_pos, half, sin_t)};
    const std::vector<int32_t> positions = {0, 1, 2, 17, 5, 299, 100, 3, 250};
    const auto q = random_vec(rng_, n * q_heads * head_dim);
    const auto k = random_vec(rng_, n * k_heads * head_dim);
    const tensor qt = make(n, q_heads * head_dim, q), kt = make(n, k_heads * head_dim, k);
    ops_.rope(qt, kt, ints(positions), head_dim, tables);
    auto rotated = [&](const std::vector<float>& x, int64_t heads) {
      std::vector<double> out(x.size());
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = static_cast<size_t>((i * heads + h) * head_dim);
          for (int64_t j = 0; j < half; ++j) {
            const std::complex<double> z(x[base + j], x[base + j + half]);
            const std::complex<double> r = z * std::polar(1.0, positions[i] * inv_freq[j]);
            out[base + j] = r.real();
            out[base + j + half] = r.imag();
          }
        }
      }
      return out;
    };
    expect_close(read(qt), rotated(q, q_heads), 1e-5, 1.0);
    expect_close(read(kt), rotated(k, k_heads), 1e-5, 1.0);
  }
}

// The fused attention input equals the separate ops on the split columns:
// q/k head norms (when given), RoPE, q out, k and v into the cache (slot -1
// skipped), bit for bit.
TEST_F(cpu_ops_test, qkv_rope_cache_equals_norm_rope_and_cache_write) {
  for (bool norms : {false, true}) {
    SCOPED_TRACE(norms);
    const int64_t head_dim = 16, half = 8, q_heads = 4, kv_heads = 2, n = 5, max_pos = 64;
    const int64_t q_cols = q_heads * head_dim, kv_cols = kv_heads * head_dim;
    const int64_t cols = q_cols + 2 * kv_cols, num_slots = 12;
    const rope_tables tables{make(max_pos, half, random_vec(rng_, max_pos * half)),
                             make(max_pos, half, random_vec(rng_, max_pos * half))};
    const std::vector<int32_t> positions = {0, 9, 63, 4, 4}, slots = {3, -1, 11, 0, 7};
    const auto qkv = random_vec(rng_, n * cols);
    const tensor qn = make(head_dim, 1, random_vec(rng_, head_dim, 0.5f, 1.5f));
    const tensor kn = make(head_dim, 1, random_vec(rng_, head_dim, 0.5f, 1.5f));
    const std::vector<float> fill(num_slots * kv_cols, -7.0f);
    // Separate ops.
    std::vector<float> q(n * q_cols), k(n * kv_cols), v(n * kv_cols);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(qkv.begin() + i * cols, q_cols, q.begin() + i * q_cols);
      std::copy_n(qkv.begin() + i * cols + q_cols, kv_cols, k.begin() + i * kv_cols);
      std::copy_n(qkv.begin() + i * cols + q_cols + kv_cols, kv_cols, v.begin() + i * kv_cols);
    }
    const tensor qt = make(n, q_cols, q), kt = make(n, kv_cols, k);
    if (norms) {
      ops_.head_rms_norm(qt, head_dim, qn, 1e-6f);
      ops_.head_rms_norm(kt, head_dim, kn, 1e-6f);
    }
    ops_.rope(qt, kt, ints(positions), head_dim, tables);
    const kv_cache_layer want{make(num_slots, kv_cols, fill), make(num_slots, kv_cols, fill)};
    ops_.write_kv_cache(kt, make(n, kv_cols, v), ints(slots), want);
    // Fused.
    const kv_cache_layer got{make(num_slots, kv_cols, fill), make(num_slots, kv_cols, fill)};
    const tensor q_out = poisoned(n, q_cols);
    ops_.qkv_rope_cache(make(n, cols, qkv), q_heads, kv_heads, head_dim, norms ? &qn : nullptr,
                        norms ? &kn : nullptr, 1e-6f, ints(positions), tables, ints(slots), got,
                        q_out);
    EXPECT_EQ(read(q_out), read(qt));
    EXPECT_EQ(read(got.k), read(want.k));
    EXPECT_EQ(read(got.v), read(want.v));
  }
}

TEST_F(cpu_ops_test, write_kv_cache_writes_slots_and_skips_padding) {
  const int64_t num_slots = 40, cols = 24, n = 6;
  const std::vector<int32_t> slots = {5, -1, 39, 0, -1, 16};
  const auto k = random_vec(rng_, n * cols), v = random_vec(rng_, n * cols);
  const float sentinel = -12345.0f;
  const std::vector<float> fill(num_slots * cols, sentinel);
  const kv_cache_layer cache{make(num_slots, cols, fill), make(num_slots, cols, fill)};
  ops_.write_kv_cache(make(n, cols, k), make(n, cols, v), ints(slots), cache);
  std::vector<float> want_k = fill, want_v = fill;
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] < 0) continue;
    std::copy_n(k.begin() + i * cols, cols, want_k.begin() + slots[i] * cols);
    std::copy_n(v.begin() + i * cols, cols, want_v.begin() + slots[i] * cols);
  }
  EXPECT_EQ(read(cache.k), want_k);
  EXPECT_EQ(read(cache.v), want_v);
}

TEST_F(cpu_ops_test, silu_and_mul_matches_reference) {
  const int64_t rows = 5, d = 37;
  auto gu = random_vec(rng_, rows * 2 * d, -8.0f, 8.0f);
  gu[0] = 30.0f;
  gu[1] = -30.0f;
  const tensor out = poisoned(rows, d);
  ops_.silu_and_mul(make(rows, 2 * d, gu), out);
  std::vector<double> want(rows * d);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const double g = gu[i * 2 * d + j], u = gu[i * 2 * d + d + j];
      want[i * d + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  expect_close(read(out), want);
}

// add_sigmoid_gated (Qwen2-MoE's shared expert): out += sigmoid(gate[:, 0])
// x, row by row, the gate read from its first column, extreme logits
// included.
TEST_F(cpu_ops_test, add_sigmoid_gated_matches_reference) {
  const int64_t rows = 4, cols = 21;
  auto x = random_vec(rng_, rows * cols, -3.0f, 3.0f);
  auto base = random_vec(rng_, rows * cols, -3.0f, 3.0f);
  std::vector<float> gate = {0.0f, 7.0f, 40.0f, -2.5f, -40.0f, 1.0f, 0.5f, 9.0f};  // [4, 2]
  const tensor out = make(rows, cols, base);
  ops_.add_sigmoid_gated(make(rows, cols, x), make(rows, 2, gate), out);
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[i * 2])));
    for (int64_t j = 0; j < cols; ++j) want[i * cols + j] = base[i * cols + j] + s * x[i * cols + j];
  }
  expect_close(read(out), want);
}

// lora_add: each token's adapter slot (or none) adds B_s (A_s x) of two
// modules into their columns [col0, col0 + 10) and [col0 + 10, col0 + 15)
// of a wider output; the rest is untouched.
TEST_F(cpu_ops_test, lora_add_adds_each_tokens_adapter_delta) {
  const int64_t n = 5, in = 24, rank = 4, slots = 3, width = 21, col0 = 4;
  const int64_t outs[2] = {10, 5};
  const auto x = random_vec(rng_, n * in), base = random_vec(rng_, n * width);
  std::vector<float> a[2], b[2];
  lora_stack w[2];
  for (int m = 0; m < 2; ++m) {
    a[m] = random_vec(rng_, slots * rank * in);
    b[m] = random_vec(rng_, outs[m] * slots * rank);
    w[m] = {make(slots * rank, in, a[m]), make(outs[m], slots * rank, b[m]), slots, rank};
  }
  const std::vector<int32_t> token_slots = {2, -1, 0, 2, 1};
  const tensor tx = make(n, in, x), to = make(n, width, base);
  const tensor scratch = ops_.alloc(dtype::f32, n, 2 * rank);
  lora_batch batch;
  batch.token_slots = ints(token_slots);  // (the reference reads the slots alone)
  ops_.lora_add(tx, w, 2, batch, scratch, to, col0);
  std::vector<double> want(base.begin(), base.end());
  for (int64_t t = 0; t < n; ++t) {
    const int64_t s = token_slots[static_cast<size_t>(t)];
    if (s < 0) continue;
    int64_t c = col0;
    for (int m = 0; m < 2; ++m) {
      for (int64_t j = 0; j < outs[m]; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < rank; ++r) {
          double u = 0;
          for (int64_t k = 0; k < in; ++k) u += double(a[m][(s * rank + r) * in + k]) * x[t * in + k];
          sum += double(b[m][j * slots * rank + s * rank + r]) * u;
        }
        want[t * width + c + j] += sum;
      }
      c += outs[m];
    }
  }
  const std::vector<float> got = read(to);
  expect_close(got, want, 1e-5, 1.0);  // (terms of magnitude ~1 cancel to small sums)
  for (int64_t j = 0; j < width; ++j) EXPECT_EQ(got[width + j], base[width + j]);  // slot -1
}

// A lora_batch's host side: tokens grouped by slot in their order, the
// base's (-1) last, and each slot's first place.
TEST(sort_tokens_by_slot, groups_tokens_stably_base_last) {
  std::vector<int32_t> sorted, starts;
  sort_tokens_by_slot({2, -1, 0, 2, 1, -1, 0}, 3, sorted, starts);
  EXPECT_EQ(sorted, (std::vector<int32_t>{2, 6, 4, 0, 3, 1, 5}));
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 2, 3, 5}));
  sort_tokens_by_slot({-1, -1}, 2, sorted, starts);
  EXPECT_EQ(sorted, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 0}));
  sort_tokens_by_slot({}, 1, sorted, starts);
  EXPECT_TRUE(sorted.empty());
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0}));
}

TEST_F(cpu_ops_test, gather_rows_and_embedding_copy_the_indexed_rows) {
  const int64_t rows = 11, cols = 19;
  const auto table = random_vec(rng_, rows * cols);
  const tensor t = make(rows, cols, table);
  const std::vector<int32_t> idx = {10, 0, 3, 3, 7};
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<float> want(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(table.begin() + idx[i] * cols, cols, want.begin() + i * cols);
  }
  const tensor gathered = poisoned(n, cols), embedded = poisoned(n, cols);
  ops_.gather_rows(t, ints(idx), n, gathered);
  ops_.embedding(ints(idx), n, t, 0, embedded);
  EXPECT_EQ(read(gathered), want);
  EXPECT_EQ(read(embedded), want);
}

// A vocabulary-parallel rank's part: the table holds rows 5..15 of the
// vocabulary; other ids read as zeros.
TEST_F(cpu_ops_test, embedding_of_a_vocabulary_slice_reads_zeros_elsewhere) {
  const int64_t rows = 11, cols = 19, first_row = 5;
  const auto table = random_vec(rng_, rows * cols);
  const std::vector<int32_t> ids = {4, 5, 15, 16, 9};
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> want(n * cols, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i] - first_row;
    if (row >= 0 && row < rows) std::copy_n(table.begin() + row * cols, cols, want.begin() + i * cols);
  }
  const tensor embedded = poisoned(n, cols);
  ops_.embedding(ints(ids), n, make(rows, cols, table), first_row, embedded);
  EXPECT_EQ(read(embedded), want);
}

// ---- paged attention ------------------------------------------------------

struct attention_case {
  int64_t num_heads, num_kv_heads, head_dim;
};

class paged_attention_test : public cpu_ops_test,
                             public ::testing::WithParamInterface<attention_case> {};

// Dense causal attention of one sequence from contiguous K/V: query token i
// (of query_len) sits at position seq_len - query_len + i.
std::vector<double> dense_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t seq_len,
                                    int64_t query_len, const attention_case& c, double scale) {
  const int64_t d = c.head_dim, q_cols = c.num_heads * d, kv_cols = c.num_kv_heads * d;
  const int64_t group = c.num_heads / c.num_kv_heads;
  std::vector<double> out(static_cast<size_t>(query_len * q_cols));
  for (int64_t i = 0; i < query_len; ++i) {
    const int64_t pos = seq_len - query_len + i;
    for (int64_t h = 0; h < c.num_heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> scores(static_cast<size_t>(pos + 1));
      for (int64_t t = 0; t <= pos; ++t) {
        double s = 0;
        for (int64_t x = 0; x < d; ++x) {
          s += double(q[i * q_cols + h * d + x]) * k[t * kv_cols + kvh * d + x];
        }
        scores[t] = s * scale;
      }
      const double m = *std::max_element(scores.begin(), scores.end());
      double z = 0;
      for (double& s : scores) z += (s = std::exp(s - m));
      for (int64_t x = 0; x < d; ++x) {
        double acc = 0;
        for (int64_t t = 0; t <= pos; ++t) acc += scores[t] * v[t * kv_cols + kvh * d + x];
        out[i * q_cols + h * d + x] = acc / z;
      }
    }
  }
  return out;
}

TEST_P(paged_attention_test, matches_dense_causal_attention) {
  const attention_case c = GetParam();
  const int64_t block_size = 16, d = c.head_dim;
  const int64_t q_cols = c.num_heads * d, kv_cols = c.num_kv_heads * d;
  // (seq_len, query_len): prefills, chunked prefills and decodes around block edges.
  const std::vector<std::pair<int64_t, int64_t>> seqs = {
      {15, 15}, {16, 1}, {17, 5}, {33, 33}, {1, 1}, {33, 17}, {32, 2}};
  const int64_t num_seqs = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> nblocks;
  int64_t total_blocks = 0, max_blocks = 0, num_tokens = 0;
  for (auto [len, qlen] : seqs) {
    nblocks.push_back((len + block_size - 1) / block_size);
    total_blocks += nblocks.back();
    max_blocks = std::max(max_blocks, nblocks.back());
    num_tokens += qlen;
  }
  // Shuffled, non-contiguous block ids; 0 (null) and a few others unused.
  const int64_t cache_blocks = total_blocks + 6;
  std::vector<int32_t> ids(static_cast<size_t>(cache_blocks - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng_);
  // The cache starts as NaN: reading any slot that was not written shows.
  std::vector<float> k_cache(cache_blocks * block_size * kv_cols, nan_f), v_cache = k_cache;
  std::vector<int32_t> block_tables(num_seqs * max_blocks, 0), seq_lens, query_start = {0};
  std::vector<float> q_all;
  std::vector<double> want;
  const double scale = 1.0 / std::sqrt(double(d)) * 2.0;  // sharper than usual
  size_t next_id = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto [len, qlen] = seqs[s];
    for (int64_t b = 0; b < nblocks[s]; ++b) block_tables[s * max_blocks + b] = ids[next_id++];
    const auto k = random_vec(rng_, len * kv_cols), v = random_vec(rng_, len * kv_cols);
    const auto q = random_vec(rng_, qlen * q_cols);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t block = block_tables[s * max_blocks + t / block_size];
      const int64_t slot = block * block_size + t % block_size;
      std::copy_n(k.begin() + t * kv_cols, kv_cols, k_cache.begin() + slot * kv_cols);
      std::copy_n(v.begin() + t * kv_cols, kv_cols, v_cache.begin() + slot * kv_cols);
    }
    q_all.insert(q_all.end(), q.begin(), q.end());
    const auto ref = dense_attention(q, k, v, len, qlen, c, scale);
    want.insert(want.end(), ref.begin(), ref.end());
    seq_lens.push_back(static_cast<int32_t>(len));
    query_start.push_back(query_start.back() + static_cast<int32_t>(qlen));
  }
  const int64_t slots = cache_blocks * block_size;
  const kv_cache_layer cache{make(slots, kv_cols, k_cache), make(slots, kv_cols, v_cache)};
  attention_metadata meta;
  meta.num_seqs = num_seqs;
  meta.query_start_loc = ints(query_start);
  meta.seq_lens = ints(seq_lens);
  meta.block_tables = ints(block_tables);
  meta.max_blocks_per_seq = max_blocks;
  meta.block_size = block_size;
  meta.max_query_len = 33;
  meta.max_seq_len = 33;
  const tensor out = poisoned(num_tokens, q_cols);
  ops_.paged_attention(make(num_tokens, q_cols, q_all), cache, meta, c.num_heads,
                       c.num_kv_heads, d, static_cast<float>(scale), out);
  expect_close(read(out), want, 1e-5, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    cpu_ops, paged_attention_test,
    ::testing::Values(attention_case{2, 2, 16}, attention_case{8, 2, 16}, attention_case{8, 1, 16},
                      attention_case{3, 3, 48}, attention_case{8, 2, 48}, attention_case{8, 1, 48},
                      attention_case{4, 4, 64}, attention_case{8, 2, 64}, attention_case{16, 2, 64},
                      attention_case{2, 2, 128}, attention_case{8, 2, 128},
                      attention_case{8, 1, 128}),
    [](const ::testing::TestParamInfo<attention_case>& info) {
      return "h" + std::to_string(info.param.num_heads) + "_kv" +
             std::to_string(info.param.num_kv_heads) + "_d" + std::to_string(info.param.head_dim);
    });

}  // namespace
}  // namespace troupe
