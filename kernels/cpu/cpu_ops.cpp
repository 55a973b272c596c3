#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/cpu_moe.h"
#include "model/quantization.h"

namespace troupe {

std::string cpu_backend_description() {
  return std::string("OpenBLAS: ") + openblas_get_config() + "; OpenMP: " +
         std::to_string(omp_get_max_threads()) + " threads";
}

cpu_ops::cpu_ops() {
  // GEMMs are parallelised by OpenMP above OpenBLAS (see linear()).
  openblas_set_num_threads(1);
}

void cpu_ops::free_deleter::operator()(void* p) const { std::free(p); }

void* cpu_ops::allocate_bytes(size_t bytes) {
  // calloc: large KV caches stay lazily mapped until written.
  void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
  TROUPE_CHECK_MSG(p != nullptr, "out of host memory");
  buffers_.emplace_back(p);
  allocated_bytes_ += static_cast<int64_t>(bytes);
  return p;
}

tensor cpu_ops::alloc(dtype type, int64_t rows, int64_t cols) {
  // float32, or the FP8 KV cache's codes
  TROUPE_CHECK_MSG(type == dtype::f32 || type == dtype::fp8_e4m3, "the cpu backend computes in float32 only");
  tensor t;
  t.type = type;
  t.rows = rows;
  t.cols = cols;
  t.data = allocate_bytes(static_cast<size_t>(rows * cols) * dtype_size(type));
  return t;
}

int32_t* cpu_ops::alloc_ints(int64_t n) {
  return static_cast<int32_t*>(allocate_bytes(static_cast<size_t>(n) * sizeof(int32_t)));
}

void cpu_ops::upload(const float* host, const tensor& dst) {
  TROUPE_CHECK(dst.type == dtype::f32);
  std::memcpy(dst.data, host, static_cast<size_t>(dst.numel()) * sizeof(float));
}

void cpu_ops::upload_cols(const float* host, const tensor& dst, int64_t col0, int64_t cols) {
  TROUPE_CHECK(col0 >= 0 && col0 + cols <= dst.cols);
  for (int64_t r = 0; r < dst.rows; ++r) {
    std::memcpy(dst.f32() + r * dst.cols + col0, host + r * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

void cpu_ops::upload_ints(const int32_t* host, int32_t* dst, int64_t n) {
  std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(int32_t));
}

void cpu_ops::download_ints(const int32_t* src, int32_t* host, int64_t n) {
  std::memcpy(host, src, static_cast<size_t>(n) * sizeof(int32_t));
}

void cpu_ops::fill_dummy(const tensor& dst, uint64_t key, float scale, float offset) {
  TROUPE_CHECK(dst.type == dtype::f32);
  fill_dummy_f32(key, dst.f32(), static_cast<size_t>(dst.numel()), scale, offset);
}

void cpu_ops::download(const tensor& src, float* host) {
  TROUPE_CHECK(src.type == dtype::f32);  // (an FP8 KV cache is read through attention only)
  std::memcpy(host, src.data, static_cast<size_t>(src.numel()) * sizeof(float));
}

void cpu_ops::copy(const tensor& src, const tensor& dst) {
  TROUPE_CHECK(src.numel() == dst.numel() && src.type == dtype::f32 && dst.type == dtype::f32);
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.numel()) * sizeof(float));
}

void cpu_ops::embedding(const int32_t* token_ids, int64_t num_tokens, const tensor& table,
                        int64_t first_row, const tensor& out) {
  TROUPE_CHECK(out.cols == table.cols && out.rows >= num_tokens);
  for (int64_t i = 0; i < num_tokens; ++i) {
    TROUPE_CHECK(token_ids[i] >= 0);
    const int64_t row = token_ids[i] - first_row;
    float* dst = out.f32() + i * out.cols;
    if (row < 0 || row >= table.rows) {
      std::fill(dst, dst + out.cols, 0.0f);
    } else {
      std::memcpy(dst, table.f32() + row * table.cols, static_cast<size_t>(table.cols) * sizeof(float));
    }
  }
}

namespace {

void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  for (int64_t j = 0; j < n; ++j) out[j] = x[j] * inv * w[j];
}

}  // namespace

void cpu_ops::rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out) {
  TROUPE_CHECK(w.numel() == x.cols && out.cols == x.cols);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < x.rows; ++i) {
    rms_norm_row(x.f32() + i * x.cols, w.f32(), eps, x.cols, out.f32() + i * out.cols);
  }
}

void cpu_ops::add_rms_norm(const tensor& residual, const tensor& x, const tensor& w,
                           float eps, const tensor& out) {
  TROUPE_CHECK(residual.cols == x.cols && residual.rows == x.rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < x.rows; ++i) {
    float* r = residual.f32() + i * residual.cols;
    const float* xi = x.f32() + i * x.cols;
    for (int64_t j = 0; j < x.cols; ++j) r[j] += xi[j];
    rms_norm_row(r, w.f32(), eps, x.cols, out.f32() + i * out.cols);
  }
}

void cpu_ops::head_rms_norm(const tensor& x, int64_t head_dim, const tensor& w, float eps) {
  TROUPE_CHECK(x.cols % head_dim == 0 && w.numel() == head_dim);
  const int64_t heads = x.cols / head_dim;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < x.rows; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      float* seg = x.f32() + i * x.cols + h * head_dim;
      rms_norm_row(seg, w.f32(), eps, head_dim, seg);
    }
  }
}

void cpu_ops::linear(const tensor& x, const tensor& w, const tensor* bias, const tensor& out) {
  TROUPE_CHECK(x.cols == w.cols && out.cols == w.rows && out.rows >= x.rows);
  if (x.rows == 0) return;
  // OpenMP splits the output features; each thread runs a single-threaded
  // OpenBLAS GEMM on its slice of w. One threading system only: OpenBLAS's
  // own spinning threads would fight the OpenMP ones on a small machine.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t chunk = (w.rows + threads - 1) / threads;
    const int64_t begin = std::min<int64_t>(w.rows, chunk * omp_get_thread_num());
    const int64_t count = std::min<int64_t>(chunk, w.rows - begin);
    if (count > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(x.rows),
                  static_cast<int>(count), static_cast<int>(x.cols), 1.0f, x.f32(),
                  static_cast<int>(x.cols), w.f32() + begin * w.cols, static_cast<int>(w.cols),
                  0.0f, out.f32() + begin, static_cast<int>(out.cols));
    }
  }
  if (bias != nullptr) {
    TROUPE_CHECK(bias->numel() == w.rows);
    for (int64_t i = 0; i < x.rows; ++i) {
      float* o = out.f32() + i * out.cols;
      for (int64_t j = 0; j < w.rows; ++j) o[j] += bias->f32()[j];
    }
  }
}

void cpu_ops::lora_add(const tensor& x, const lora_stack* w, int count, const lora_batch& batch,
                       const tensor& scratch, const tensor& out, int64_t col0) {
  TROUPE_CHECK(count >= 1);
  const int64_t slots = w[0].slots, rank = w[0].rank;
  int64_t cols = 0;
  for (int m = 0; m < count; ++m) {
    TROUPE_CHECK(w[m].slots == slots && w[m].rank == rank && slots > 0 && rank > 0);
    TROUPE_CHECK(w[m].a.rows == slots * rank && w[m].a.cols == x.cols);
    TROUPE_CHECK(w[m].b.cols == slots * rank);
    cols += w[m].b.rows;
  }
  TROUPE_CHECK(out.rows >= x.rows && col0 >= 0 && col0 + cols <= out.cols);
  TROUPE_CHECK(scratch.type == dtype::f32 && scratch.rows >= x.rows && scratch.cols >= count * rank);
  // The reference: token by token (a token's sums in index order; tokens
  // are independent), by the token-slot array alone.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < x.rows; ++t) {
    const int32_t s = batch.token_slots[t];
    if (s < 0) continue;
    TROUPE_CHECK(s < slots);
    const float* xt = x.f32() + t * x.cols;
    int64_t c = col0;
    for (int m = 0; m < count; ++m) {
      float* u = scratch.f32() + t * scratch.cols + m * rank;
      for (int64_t r = 0; r < rank; ++r) {
        const float* a = w[m].a.f32() + (s * rank + r) * w[m].a.cols;
        float sum = 0;
        for (int64_t k = 0; k < x.cols; ++k) sum += a[k] * xt[k];
        u[r] = sum;
      }
      const int64_t out_cols = w[m].b.rows;
      float* o = out.f32() + t * out.cols + c;
      for (int64_t j = 0; j < out_cols; ++j) {
        const float* b = w[m].b.f32() + j * w[m].b.cols + s * rank;
        float sum = 0;
        for (int64_t r = 0; r < rank; ++r) sum += b[r] * u[r];
        o[j] += sum;
      }
      c += out_cols;
    }
  }
}

namespace {

// RoPE (rotate-half) of `heads` consecutive heads at x, at `pos`.
void rotate_heads(float* x, int64_t heads, int64_t head_dim, int32_t pos,
                  const rope_tables& tables) {
  const int64_t half = head_dim / 2;
  TROUPE_CHECK(pos >= 0 && pos < tables.cos.rows);
  const float* c = tables.cos.f32() + pos * half;
  const float* s = tables.sin.f32() + pos * half;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      const float x1 = xh[j];
      const float x2 = xh[j + half];
      xh[j] = x1 * c[j] - x2 * s[j];
      xh[j + half] = x2 * c[j] + x1 * s[j];
    }
  }
}

}  // namespace

void cpu_ops::rope(const tensor& q, const tensor& k, const int32_t* positions,
                   int64_t head_dim, const rope_tables& tables) {
  TROUPE_CHECK(tables.cos.cols == head_dim / 2 && q.rows == k.rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < q.rows; ++i) {
    rotate_heads(q.f32() + i * q.cols, q.cols / head_dim, head_dim, positions[i], tables);
    rotate_heads(k.f32() + i * k.cols, k.cols / head_dim, head_dim, positions[i], tables);
  }
}

namespace {

// One token's K and V rows into the cache at `slot` (float32, or FP8 codes
// of the values over the layer's scales).
void store_kv_row(const kv_cache_layer& cache, int64_t slot, const float* k, const float* v) {
  const int64_t cols = cache.k.cols;
  if (!cache.fp8()) {
    std::memcpy(cache.k.f32() + slot * cols, k, static_cast<size_t>(cols) * sizeof(float));
    std::memcpy(cache.v.f32() + slot * cols, v, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  uint8_t* kc = static_cast<uint8_t*>(cache.k.data) + slot * cols;
  uint8_t* vc = static_cast<uint8_t*>(cache.v.data) + slot * cols;
  for (int64_t j = 0; j < cols; ++j) {
    kc[j] = f32_to_e4m3(k[j] / cache.k_scale);
    vc[j] = f32_to_e4m3(v[j] / cache.v_scale);
  }
}

}  // namespace

void cpu_ops::qkv_rope_cache(const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                             int64_t head_dim, const tensor* q_norm, const tensor* k_norm,
                             float eps, const int32_t* positions, const rope_tables& tables,
                             const int32_t* slot_mapping, const kv_cache_layer& cache,
                             const tensor& q_out) {
  const int64_t q_cols = num_heads * head_dim, kv_cols = num_kv_heads * head_dim;
  TROUPE_CHECK(qkv.cols == q_cols + 2 * kv_cols && q_out.cols == q_cols && q_out.rows >= qkv.rows);
  TROUPE_CHECK(cache.k.cols == kv_cols && cache.v.cols == kv_cols);
  TROUPE_CHECK(tables.cos.cols == head_dim / 2);
  auto norm_heads = [&](float* x, int64_t heads, const tensor* w) {
    if (w == nullptr) return;
    for (int64_t h = 0; h < heads; ++h) {
      rms_norm_row(x + h * head_dim, w->f32(), eps, head_dim, x + h * head_dim);
    }
  };
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < qkv.rows; ++i) {
    const float* row = qkv.f32() + i * qkv.cols;
    float* q = q_out.f32() + i * q_out.cols;
    std::memcpy(q, row, static_cast<size_t>(q_cols) * sizeof(float));
    norm_heads(q, num_heads, q_norm);
    rotate_heads(q, num_heads, head_dim, positions[i], tables);
    const int32_t slot = slot_mapping[i];
    if (slot < 0) continue;  // padding
    TROUPE_CHECK(slot < cache.k.rows);
    thread_local std::vector<float> k;
    k.assign(row + q_cols, row + q_cols + kv_cols);
    norm_heads(k.data(), num_kv_heads, k_norm);
    rotate_heads(k.data(), num_kv_heads, head_dim, positions[i], tables);
    store_kv_row(cache, slot, k.data(), row + q_cols + kv_cols);
  }
}

void cpu_ops::write_kv_cache(const tensor& k, const tensor& v, const int32_t* slot_mapping,
                             const kv_cache_layer& cache) {
  TROUPE_CHECK(k.cols == cache.k.cols && v.cols == cache.v.cols);
  for (int64_t i = 0; i < k.rows; ++i) {
    const int32_t slot = slot_mapping[i];
    if (slot < 0) continue;  // padding
    TROUPE_CHECK(slot < cache.k.rows);
    store_kv_row(cache, slot, k.f32() + i * k.cols, v.f32() + i * v.cols);
  }
}

void cpu_ops::silu_and_mul(const tensor& gate_up, const tensor& out) {
  const int64_t d = gate_up.cols / 2;
  TROUPE_CHECK(out.cols == d);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < gate_up.rows; ++i) {
    const float* g = gate_up.f32() + i * gate_up.cols;
    const float* u = g + d;
    float* o = out.f32() + i * out.cols;
    for (int64_t j = 0; j < d; ++j) o[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
  }
}

void cpu_ops::add_sigmoid_gated(const tensor& x, const tensor& gate, const tensor& out) {
  TROUPE_CHECK(x.rows == out.rows && x.cols == out.cols && gate.rows >= x.rows && gate.cols >= 1);
  for (int64_t i = 0; i < x.rows; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-gate.f32()[i * gate.cols]));
    const float* xi = x.f32() + i * x.cols;
    float* o = out.f32() + i * out.cols;
    for (int64_t j = 0; j < x.cols; ++j) o[j] += s * xi[j];
  }
}

void cpu_ops::moe_mlp(const tensor& x, const tensor& router_logits, const tensor& gate_up, const tensor& down,
                      int64_t num_experts, int64_t top_k, bool renormalize, const tensor& out,
                      const moe_counts& counts) {
  const int64_t inter = down.cols;
  TROUPE_CHECK(router_logits.cols == num_experts && router_logits.rows >= x.rows);
  TROUPE_CHECK(top_k >= 1 && top_k <= num_experts);
  TROUPE_CHECK(gate_up.rows == num_experts * 2 * inter && gate_up.cols == x.cols);
  TROUPE_CHECK(down.rows == num_experts * x.cols && out.cols == x.cols && out.rows >= x.rows);
  moe_mlp_f32(x.f32(), x.rows, x.cols, router_logits.f32(), gate_up.f32(), down.f32(), num_experts, inter,
              top_k, renormalize, out.f32(), out.cols, reinterpret_cast<uint32_t*>(counts.counts),
              counts.token_slots);
}

void cpu_ops::gather_rows(const tensor& x, const int32_t* indices, int64_t n,
                          const tensor& out) {
  TROUPE_CHECK(out.cols == x.cols && out.rows >= n);
  for (int64_t i = 0; i < n; ++i) {
    TROUPE_CHECK(indices[i] >= 0 && indices[i] < x.rows);
    std::memcpy(out.f32() + i * out.cols, x.f32() + indices[i] * x.cols,
                static_cast<size_t>(x.cols) * sizeof(float));
  }
}

void cpu_ops::copy_kv_blocks(const kv_cache_layer& src, const kv_cache_layer& dst,
                             const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                             int64_t block_size) {
  TROUPE_CHECK(src.k.cols == dst.k.cols && src.v.cols == dst.v.cols && src.k.type == dst.k.type);
  const size_t element = dtype_size(src.k.type);
  const size_t bytes = static_cast<size_t>(block_size * src.k.cols) * element;
  auto at = [&](const tensor& t, int64_t block) {
    return static_cast<char*>(t.data) + static_cast<size_t>(block * block_size * t.cols) * element;
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_blocks[i], d = dst_blocks[i];
    TROUPE_CHECK((s + 1) * block_size <= src.k.rows && (d + 1) * block_size <= dst.k.rows);
    std::memcpy(at(dst.k, d), at(src.k, s), bytes);
    std::memcpy(at(dst.v, d), at(src.v, s), bytes);
  }
}

bool cpu_ops::sample_async(const tensor& logits, const std::vector<sample_job>& jobs,
                           int64_t step, int64_t first) {
  std::vector<sample_result>& slot = results_[step % result_slots];
  const size_t end = static_cast<size_t>(first) + jobs.size();
  if (first == 0) slot.clear();
  if (slot.size() < end) slot.resize(end);
  if (sampled_ids_.size() < end) sampled_ids_.resize(end);
  const int64_t vocab = logits.cols;
  for (const sample_job& job : jobs) TROUPE_CHECK(job.logits_row >= 0 && job.logits_row < logits.rows);
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < jobs.size(); ++i) {
    const sample_job& job = jobs[i];
    const float* row = logits.f32() + int64_t{job.logits_row} * vocab;
    sample_result& r = slot[static_cast<size_t>(first) + i];
    if (job.forced_token >= 0) {
      r.token_id = job.forced_token;
      r.logprobs = logprobs_of(row, vocab, job.forced_token, job.row.num_logprobs);
    } else {
      r = sample_row(row, vocab, job.row);
    }
    sampled_ids_[static_cast<size_t>(first) + i] = r.token_id;
  }
  return true;
}

void cpu_ops::sample_results(int64_t step, int64_t first, int64_t n,
                             std::vector<sample_result>& out) {
  const std::vector<sample_result>& slot = results_[step % result_slots];
  TROUPE_CHECK(first >= 0 && static_cast<size_t>(first + n) <= slot.size());
  out.assign(slot.begin() + first, slot.begin() + first + n);
}

void cpu_ops::gather_sampled(int32_t* dst, const int32_t* rows, const int32_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    TROUPE_CHECK(src[i] >= 0 && static_cast<size_t>(src[i]) < sampled_ids_.size());
    dst[rows[i]] = sampled_ids_[static_cast<size_t>(src[i])];
  }
}

}  // namespace troupe
