#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "common/check.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/norm/norm.h"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/sampling/sampling.h"

namespace troupe {



std::string cuda_ops::op_profile() const {
  const impl& m = *impl_;
  if (m.op_stats.empty()) return {};
  std::vector<std::pair<std::string, impl::op_stat>> rows(m.op_stats.begin(), m.op_stats.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto& r : rows) total += r.second.ms;
  std::string out = "op profile (device time per op, eager steps):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-44s %8s %10s %6s %10s %9s\n", "op", "calls", "total ms",
                "share", "mean us", "GB/s");
  out += line;
  for (const auto& [name, st] : rows) {
    const double gbps = st.bytes > 0 && st.ms > 0 ? st.bytes / (st.ms * 1e6) : 0.0;
    std::snprintf(line, sizeof line, "  %-44s %8lld %10.3f %5.1f%% %10.2f %9.0f\n", name.c_str(),
                  static_cast<long long>(st.calls), st.ms, total > 0 ? 100.0 * st.ms / total : 0.0,
                  1000.0 * st.ms / static_cast<double>(st.calls), gbps);
    out += line;
  }
  return out;
}

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

cuda_ops::cuda_ops(int device, int64_t max_num_tokens) : impl_(std::make_unique<impl>()) {
  impl_->device = device;
  impl_->max_num_tokens = max_num_tokens;
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  TROUPE_CUBLAS_CHECK(cublasCreate(&impl_->blas));
  TROUPE_CUBLAS_CHECK(cublasSetStream(impl_->blas, impl_->stream));
  // Math mode per GEMM (linear): pedantic for float32 tensors (strict
  // float32, no TF32), the default (all tensor-core kernels) for bf16/f16.
  TROUPE_CUBLAS_CHECK(cublasSetMathMode(impl_->blas, CUBLAS_PEDANTIC_MATH));
  // A workspace of our own (32 MiB, NVIDIA's recommendation for Hopper):
  // cuBLAS then allocates nothing while a graph is captured.
  TROUPE_CUDA_CHECK(cudaMalloc(&impl_->blas_workspace, impl::blas_workspace_bytes));
  TROUPE_CUBLAS_CHECK(cublasSetWorkspace(impl_->blas, impl_->blas_workspace, impl::blas_workspace_bytes));
  for (int i = 0; i < impl::slots; ++i) {
    TROUPE_CUDA_CHECK(cudaEventCreate(&impl_->step_start[i]));
    TROUPE_CUDA_CHECK(cudaEventCreate(&impl_->work_end[i]));
  }
}

void cuda_ops::step_begin(int64_t step) {
  impl& m = *impl_;
  const int slot = static_cast<int>(step % impl::slots);
  TROUPE_CUDA_CHECK(cudaEventRecord(m.step_start[slot], m.stream));
  m.ended_by_download[slot] = false;
  m.current_step = step;
  ++m.active_steps;
}

void cuda_ops::step_launched(int64_t step) {
  impl& m = *impl_;
  const int slot = static_cast<int>(step % impl::slots);
  if (!m.ended_by_download[slot]) TROUPE_CUDA_CHECK(cudaEventRecord(m.work_end[slot], m.stream));
}

void cuda_ops::step_end(int64_t step) {
  impl& m = *impl_;
  const int slot = static_cast<int>(step % impl::slots);
  // work_end was recorded after the step's last launch (step_launched),
  // so this waits for step `step` only, not for one queued behind it.
  TROUPE_CUDA_CHECK(cudaEventSynchronize(m.work_end[slot]));
  float busy_ms = 0;
  TROUPE_CUDA_CHECK(cudaEventElapsedTime(&busy_ms, m.step_start[slot], m.work_end[slot]));
  if (m.last_ended >= 0 && m.last_ended == step - 1) {
    // The gap since the previous step's last result (its events are intact:
    // at most step + 1 has been begun).
    float idle_ms = 0;
    const int prev = static_cast<int>((step - 1) % impl::slots);
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&idle_ms, m.work_end[prev], m.step_start[slot]));
    m.line.idle_seconds += std::max(0.0f, idle_ms) / 1000.0;
  }
  m.last_ended = step;
  m.line.steps += 1;
  m.line.busy_seconds += busy_ms / 1000.0;
  m.active_steps = std::max(0, m.active_steps - 1);
  m.resolve_spans(step);
}

ops::timeline cuda_ops::device_timeline() const { return impl_->line; }

void cuda_ops::begin_capture() {
  TROUPE_CUDA_CHECK(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal));
}

void cuda_ops::end_capture(int64_t id) {
  cudaGraph_t graph = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamEndCapture(impl_->stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TROUPE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  TROUPE_CUDA_CHECK(cudaGraphDestroy(graph));
  auto [it, fresh] = impl_->graphs.emplace(id, exec);
  if (!fresh) {
    TROUPE_CUDA_CHECK(cudaGraphExecDestroy(it->second));
    it->second = exec;
  }
}

bool cuda_ops::sample_async(const tensor& logits, const std::vector<sample_job>& jobs,
                            int64_t step, int64_t first) {
  TROUPE_CHECK(logits.type == dtype::f32);
  const auto n = static_cast<int64_t>(jobs.size());
  if (n == 0) return true;
  impl& m = *impl_;
  m.host_params.assign(jobs.size(), cuda::sample_params{});
  m.host_ids.clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const sampler_row& r = jobs[i].row;
    cuda::sample_params& p = m.host_params[i];
    p.temperature = r.temperature;
    p.top_p = r.top_p;
    p.top_k = r.top_k;
    p.min_p = r.min_p;
    p.presence_penalty = r.presence_penalty;
    p.frequency_penalty = r.frequency_penalty;
    p.repetition_penalty = r.repetition_penalty;
    p.num_logprobs = r.num_logprobs;
    p.seed = r.seed;
    p.step = r.step;
    p.logits_row = jobs[i].logits_row;
    p.forced_token = jobs[i].forced_token;
    // Only rows with penalties need their ids on the device.
    const bool repetition = r.repetition_penalty != 1.0f;
    const bool counts = r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f;
    if (jobs[i].forced_token < 0 && repetition && r.prompt_ids != nullptr) {
      p.prompt_begin = static_cast<int32_t>(m.host_ids.size());
      p.num_prompt_ids = static_cast<int32_t>(r.num_prompt_ids);
      m.host_ids.insert(m.host_ids.end(), r.prompt_ids, r.prompt_ids + r.num_prompt_ids);
    }
    if (jobs[i].forced_token < 0 && (repetition || counts) && r.output_ids != nullptr) {
      p.output_begin = static_cast<int32_t>(m.host_ids.size());
      p.num_output_ids = static_cast<int32_t>(r.num_output_ids);
      m.host_ids.insert(m.host_ids.end(), r.output_ids, r.output_ids + r.num_output_ids);
    }
    if (jobs[i].forced_token >= 0) continue;
    // Logits processors: the allowed mask's words, then (token, bias bits) pairs.
    if (r.allowed_mask != nullptr) {
      p.mask_begin = static_cast<int32_t>(m.host_ids.size());
      const size_t words = static_cast<size_t>((logits.cols + 31) / 32);
      for (size_t w = 0; w < words; ++w) m.host_ids.push_back(static_cast<int32_t>(r.allowed_mask[w]));
    }
    if (r.num_biases > 0) {
      p.bias_begin = static_cast<int32_t>(m.host_ids.size());
      p.num_biases = static_cast<int32_t>(r.num_biases);
      for (int64_t j = 0; j < r.num_biases; ++j) {
        int32_t bits = 0;
        std::memcpy(&bits, &r.bias_values[j], sizeof bits);
        m.host_ids.push_back(r.bias_ids[j]);
        m.host_ids.push_back(bits);
      }
    }
  }
  const size_t params_bytes = jobs.size() * sizeof(cuda::sample_params);
  const size_t ids_bytes = std::max<size_t>(1, m.host_ids.size()) * sizeof(int32_t);
  const size_t out_bytes = jobs.size() * sizeof(cuda::sample_output);
  op_scope scope(m, "sample (device)");
  void* dparams = m.ensure(m.sample_params, params_bytes);
  void* dids = m.ensure(m.sample_ids, ids_bytes);
  void* douts = m.ensure(m.sample_outputs, out_bytes);
  void* scratch = m.ensure(m.sample_scratch, cuda::sample_scratch_bytes(n, logits.cols));
  auto* tokens = static_cast<int32_t*>(m.ensure_keeping(
      m.sampled_tokens, static_cast<size_t>(first + n) * sizeof(int32_t),
      static_cast<size_t>(first) * sizeof(int32_t)));
  impl::pinned& slot = m.results[step % impl::slots];
  auto* results = static_cast<cuda::sample_output*>(
      m.ensure_pinned(slot, static_cast<size_t>(first + n) * sizeof(cuda::sample_output),
                      static_cast<size_t>(first) * sizeof(cuda::sample_output)));
  m.upload_bytes(dparams, m.host_params.data(), params_bytes);
  m.upload_bytes(dids, m.host_ids.data(), m.host_ids.size() * sizeof(int32_t));
  cuda::sample(logits.f32(), logits.cols, static_cast<const cuda::sample_params*>(dparams),
               static_cast<const int32_t*>(dids), n, scratch, tokens + first,
               static_cast<cuda::sample_output*>(douts), m.stream);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(results + first, douts, out_bytes, cudaMemcpyDeviceToHost,
                                    m.stream));
  return true;
}

void cuda_ops::sample_results(int64_t step, int64_t first, int64_t n,
                              std::vector<sample_result>& out) {
  const impl::pinned& slot = impl_->results[step % impl::slots];
  TROUPE_CHECK(static_cast<size_t>(first + n) * sizeof(cuda::sample_output) <= slot.bytes);
  const auto* results = static_cast<const cuda::sample_output*>(slot.ptr) + first;
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const cuda::sample_output& o = results[i];
    sample_result& r = out[static_cast<size_t>(i)];
    r.token_id = o.token_id;
    // Meaningful where the job asked for logprobs (the caller knows which).
    r.logprobs.token_id = o.token_id;
    r.logprobs.logprob = o.logprob;
    r.logprobs.rank = o.rank;
    r.logprobs.top_ids.assign(o.top_ids, o.top_ids + o.num_top);
    r.logprobs.top_logprobs.assign(o.top_logprobs, o.top_logprobs + o.num_top);
  }
}

void cuda_ops::gather_sampled(int32_t* dst, const int32_t* rows, const int32_t* src, int64_t n) {
  if (n == 0) return;
  impl& m = *impl_;
  m.host_gather.assign(rows, rows + n);
  m.host_gather.insert(m.host_gather.end(), src, src + n);
  auto* index = static_cast<int32_t*>(m.ensure(m.gather_index, m.host_gather.size() * sizeof(int32_t)));
  if (index != m.uploaded_gather_ptr || m.host_gather != m.uploaded_gather) {
    m.upload_bytes(index, m.host_gather.data(), m.host_gather.size() * sizeof(int32_t));
    m.uploaded_gather = m.host_gather;
    m.uploaded_gather_ptr = index;
  }
  TROUPE_CHECK(m.sampled_tokens.ptr != nullptr);
  cuda::gather_tokens(dst, index, index + n, static_cast<const int32_t*>(m.sampled_tokens.ptr), n,
                      m.stream);
}

void cuda_ops::launch_graph(int64_t id) {
  op_scope scope(*impl_, [id] { return "graph replay, batch " + std::to_string(id); }, 0);
  const auto it = impl_->graphs.find(id);
  TROUPE_CHECK_MSG(it != impl_->graphs.end(), "launch_graph: no graph captured with this id");
  TROUPE_CUDA_CHECK(cudaGraphLaunch(it->second, impl_->stream));
}

cuda_ops::~cuda_ops() {
  cudaStreamSynchronize(impl_->stream);
  for (auto& [id, exec] : impl_->graphs) cudaGraphExecDestroy(exec);
  for (int i = 0; i < impl::slots; ++i) {
    cudaEventDestroy(impl_->step_start[i]);
    cudaEventDestroy(impl_->work_end[i]);
    cudaFreeHost(impl_->results[i].ptr);
  }
  for (const auto& s : impl_->spans) {
    cudaEventDestroy(s.begin);
    cudaEventDestroy(s.end);
  }
  for (cudaEvent_t e : impl_->free_events) cudaEventDestroy(e);
  for (auto* g : {&impl_->sample_params, &impl_->sample_ids, &impl_->sample_outputs,
                  &impl_->sample_scratch, &impl_->sampled_tokens, &impl_->gather_index}) {
    cudaFree(g->ptr);
  }
  for (auto& s : impl_->stage) cudaFreeHost(s.buf.ptr);
  for (void* p : impl_->retired_pinned) cudaFreeHost(p);
  cudaFree(impl_->blas_workspace);
  cudaFree(impl_->flush_buffer);
  cudaFree(impl_->attention_workspace);
  cudaFree(impl_->attention_split_counters);
  for (void* p : impl_->device_buffers) cudaFree(p);
  for (void* p : impl_->host_buffers) cudaFreeHost(p);
  impl_->lt_plans.clear();
  if (impl_->lt != nullptr) cublasLtDestroy(impl_->lt);
  cublasDestroy(impl_->blas);
  cudaStreamDestroy(impl_->stream);
}

void cuda_ops::reserve_sampling(int64_t rows_per_call, int64_t rows_per_step, int64_t vocab) {
  impl& m = *impl_;
  const auto call = static_cast<size_t>(rows_per_call), step = static_cast<size_t>(rows_per_step);
  m.ensure(m.sample_params, call * sizeof(cuda::sample_params));
  m.ensure(m.sample_ids, size_t{1} << 20);  // penalty ids: 256k tokens before growing
  m.ensure(m.sample_outputs, call * sizeof(cuda::sample_output));
  m.ensure(m.sample_scratch, cuda::sample_scratch_bytes(rows_per_call, vocab));
  m.ensure(m.sampled_tokens, step * sizeof(int32_t));
  m.ensure(m.gather_index, 2 * step * sizeof(int32_t));
  for (impl::pinned& p : m.results) m.ensure_pinned(p, step * sizeof(cuda::sample_output), 0);
}

void cuda_ops::reserve_staging(size_t bytes) {
  for (impl::staging& s : impl_->stage) {
    if (s.buf.bytes >= bytes) continue;
    if (s.buf.ptr != nullptr) TROUPE_CUDA_CHECK(cudaFreeHost(s.buf.ptr));  // start-up: nothing in flight
    TROUPE_CUDA_CHECK(cudaMallocHost(&s.buf.ptr, bytes));
    s.buf.bytes = bytes;
    s.used = 0;
  }
}

void cuda_ops::bind_thread() { TROUPE_CUDA_CHECK(cudaSetDevice(impl_->device)); }

cudaStream_t cuda_ops::stream() const { return impl_->stream; }

void cuda_ops::reserve_attention_workspace(int64_t max_num_seqs, int64_t num_heads,
                                           int64_t head_dim) {
  TROUPE_CUDA_CHECK(cudaSetDevice(impl_->device));
  const size_t bytes = cuda::paged_attention_workspace_bytes(
      cuda::paged_attention_workspace_seq_splits(max_num_seqs), num_heads, head_dim);
  const int64_t counters = cuda::paged_attention_split_counters(max_num_seqs, num_heads);
  if (bytes <= impl_->attention_workspace_bytes &&
      counters <= impl_->attention_split_counters_count) {
    return;
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  if (bytes > impl_->attention_workspace_bytes) {
    TROUPE_CUDA_CHECK(cudaFree(impl_->attention_workspace));
    impl_->attention_workspace = nullptr;
    TROUPE_CUDA_CHECK(cudaMalloc(&impl_->attention_workspace, bytes));
    impl_->attention_workspace_bytes = bytes;
  }
  if (counters > impl_->attention_split_counters_count) {
    TROUPE_CUDA_CHECK(cudaFree(impl_->attention_split_counters));
    impl_->attention_split_counters = nullptr;
    const size_t counter_bytes = static_cast<size_t>(counters) * sizeof(int32_t);
    TROUPE_CUDA_CHECK(cudaMalloc(&impl_->attention_split_counters, counter_bytes));
    TROUPE_CUDA_CHECK(
        cudaMemsetAsync(impl_->attention_split_counters, 0, counter_bytes, impl_->stream));
    impl_->attention_split_counters_count = counters;
  }
}

tensor cuda_ops::alloc(dtype type, int64_t rows, int64_t cols) {
  tensor t{nullptr, type, rows, cols};
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * dtype_size(type);
  TROUPE_CUDA_CHECK(cudaMalloc(&t.data, bytes));
  TROUPE_CUDA_CHECK(cudaMemset(t.data, 0, bytes));
  impl_->device_buffers.push_back(t.data);
  return t;
}

tensor cuda_ops::alloc_host(dtype type, int64_t rows, int64_t cols) {
  tensor t{nullptr, type, rows, cols};
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * dtype_size(type);
  TROUPE_CUDA_CHECK(cudaMallocHost(&t.data, bytes));
  std::memset(t.data, 0, bytes);
  impl_->host_buffers.push_back(t.data);
  return t;
}

int32_t* cuda_ops::alloc_ints(int64_t n) {
  void* p = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(1, n)) * 4));
  impl_->device_buffers.push_back(p);
  return static_cast<int32_t*>(p);
}

namespace {

// n host floats as `type` will hold them: the floats themselves for f32,
// else converted into `bits`.
const void* host_bits(const float* host, size_t n, dtype type, std::vector<uint16_t>& bits) {
  TROUPE_CHECK_MSG(type != dtype::fp8_e4m3, "an FP8 KV cache is written by its kernels only");
  if (type == dtype::f32) return host;
  bits.resize(n);
  for (size_t i = 0; i < n; ++i) bits[i] = type == dtype::bf16 ? f32_to_bf16(host[i]) : f32_to_f16(host[i]);
  return bits.data();
}

}  // namespace

void cuda_ops::upload(const float* host, const tensor& dst) {
  const size_t n = static_cast<size_t>(dst.numel());
  std::vector<uint16_t> bits;
  const void* src = host_bits(host, n, dst.type, bits);
  // cudaMemcpyDefault: dst may be pinned host memory (an offloaded layer's
  // arena), which unified addressing tells apart.
  TROUPE_CUDA_CHECK(cudaMemcpy(dst.data, src, n * dtype_size(dst.type), cudaMemcpyDefault));
}

void cuda_ops::upload_cols(const float* host, const tensor& dst, int64_t col0, int64_t cols) {
  TROUPE_CHECK(col0 >= 0 && col0 + cols <= dst.cols);
  const size_t n = static_cast<size_t>(dst.rows * cols), esize = dtype_size(dst.type);
  std::vector<uint16_t> bits;
  const void* src = host_bits(host, n, dst.type, bits);
  TROUPE_CUDA_CHECK(cudaMemcpy2D(static_cast<char*>(dst.data) + col0 * esize, dst.cols * esize, src,
                                 cols * esize, cols * esize, dst.rows, cudaMemcpyDefault));
}

void cuda_ops::fill_dummy(const tensor& dst, uint64_t key, float scale, float offset) {
  cuda::fill_dummy(element_of(dst.type), dst.data, dst.numel(), key, scale, offset, impl_->stream);
}

void cuda_ops::upload_ints(const int32_t* host, int32_t* dst, int64_t n) {
  op_scope scope(*impl_, "upload_ints");
  if (n == 0) return;
  impl_->upload_bytes(dst, host, static_cast<size_t>(n) * 4);
}

void cuda_ops::download_ints(const int32_t* src, int32_t* host, int64_t n) {
  bind_thread();  // (an actor's thread may have another rank's device current)
  if (n > 0) {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(host, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, impl_->stream));
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void cuda_ops::download(const tensor& src, float* host) {
  const size_t n = static_cast<size_t>(src.numel());
  impl& m = *impl_;
  if (m.active_steps > 0 && m.current_step >= 0) {
    // The device's part of the step ends here; host sampling follows.
    const int slot = static_cast<int>(m.current_step % impl::slots);
    TROUPE_CUDA_CHECK(cudaEventRecord(m.work_end[slot], m.stream));
    m.ended_by_download[slot] = true;
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  TROUPE_CHECK_MSG(src.type != dtype::fp8_e4m3, "an FP8 KV cache is read through attention only");
  if (src.type == dtype::f32) {
    TROUPE_CUDA_CHECK(cudaMemcpy(host, src.data, n * 4, cudaMemcpyDeviceToHost));
    return;
  }
  std::vector<uint16_t> bits(n);
  TROUPE_CUDA_CHECK(cudaMemcpy(bits.data(), src.data, n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    host[i] = src.type == dtype::bf16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
  }
}

void cuda_ops::synchronize() { TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

void cuda_ops::copy(const tensor& src, const tensor& dst) {
  op_scope scope(*impl_, "copy");
  TROUPE_CHECK(src.numel() == dst.numel() && src.type == dst.type);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data,
                                    static_cast<size_t>(src.numel()) * dtype_size(src.type),
                                    cudaMemcpyDefault, impl_->stream));  // src may be pinned host memory
}

void cuda_ops::embedding(const int32_t* token_ids, int64_t num_tokens, const tensor& table,
                         int64_t first_row, const tensor& out) {
  op_scope scope(*impl_, "embedding");
  cuda::embedding(element_of(table.type), token_ids, num_tokens, table.data, first_row,
                  table.rows, table.cols, out.data, impl_->stream);
}

void cuda_ops::rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out) {
  op_scope scope(*impl_, "rms_norm");
  cuda::rms_norm(element_of(x.type), x.data, w.data, eps, x.rows, x.cols, out.data, impl_->stream);
}

void cuda_ops::add_rms_norm(const tensor& residual, const tensor& x, const tensor& w, float eps,
                            const tensor& out) {
  op_scope scope(*impl_, "add_rms_norm");
  cuda::add_rms_norm(element_of(x.type), residual.data, x.data, w.data, eps, x.rows, x.cols,
                     out.data, impl_->stream);
}

void cuda_ops::head_rms_norm(const tensor& x, int64_t head_dim, const tensor& w, float eps) {
  op_scope scope(*impl_, "head_rms_norm");
  cuda::head_rms_norm(element_of(x.type), x.data, w.data, eps, x.rows, x.cols, head_dim,
                      impl_->stream);
}

void cuda_ops::linear(const tensor& x, const tensor& w, const tensor* bias, const tensor& out) {
  TROUPE_CHECK(x.cols == w.cols && out.cols == w.rows && out.rows >= x.rows);
  TROUPE_CHECK(x.type == w.type);
  if (x.rows == 0) return;
  if (w.is_packed()) {
    packed_linear(x, w, out);
  } else {
    op_scope scope(*impl_, "linear", x, w, w.rows);
    gemm(x, w, out);
  }
  if (bias != nullptr) {
    TROUPE_CHECK(bias->type == out.type);
    cuda::add_bias(element_of(out.type), out.data, bias->data, x.rows, out.cols, impl_->stream);
  }
}

void cuda_ops::rope(const tensor& q, const tensor& k, const int32_t* positions, int64_t head_dim,
                    const rope_tables& tables) {
  op_scope scope(*impl_, "rope");
  TROUPE_CHECK(tables.cos.type == dtype::f32);
  cuda::rope(element_of(q.type), q.data, q.cols / head_dim, k.data, k.cols / head_dim, head_dim,
             positions, q.rows, tables.cos.f32(), tables.sin.f32(), impl_->stream);
}

namespace {

// The shapes qkv_rope_cache's kernel and the q/k/v product's RoPE epilogue
// rely on, for `rows` tokens.
void check_qkv_rope_cache(const tensor& qkv, int64_t rows, int64_t num_heads,
                          int64_t num_kv_heads, int64_t head_dim, const rope_tables& tables,
                          const kv_cache_layer& cache, const tensor& q_out) {
  TROUPE_CHECK(qkv.cols == (num_heads + 2 * num_kv_heads) * head_dim);
  TROUPE_CHECK(q_out.cols == num_heads * head_dim && q_out.rows >= rows);
  TROUPE_CHECK(tables.cos.type == dtype::f32 && cache.k.cols == num_kv_heads * head_dim);
}

}  // namespace

void cuda_ops::qkv_rope_cache(const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                              int64_t head_dim, const tensor* q_norm, const tensor* k_norm,
                              float eps, const int32_t* positions, const rope_tables& tables,
                              const int32_t* slot_mapping, const kv_cache_layer& cache,
                              const tensor& q_out) {
  op_scope scope(*impl_, "qkv_rope_cache");
  TROUPE_CHECK_MSG(head_dim % 2 == 0 && head_dim <= 256, "qkv_rope_cache: head_dim must be even and <= 256");
  check_qkv_rope_cache(qkv, qkv.rows, num_heads, num_kv_heads, head_dim, tables, cache, q_out);
  cuda::qkv_rope_cache(element_of(qkv.type), qkv.data, qkv.rows, num_heads, num_kv_heads, head_dim,
                       q_norm != nullptr ? q_norm->data : nullptr,
                       k_norm != nullptr ? k_norm->data : nullptr, eps, positions,
                       tables.cos.f32(), tables.sin.f32(), slot_mapping, q_out.data,
                       kv_dest_of(cache), impl_->stream);
}

void cuda_ops::qkv_linear_rope_cache(const tensor& x, const tensor& w, const tensor* bias,
                                     const tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                                     int64_t head_dim, const tensor* q_norm,
                                     const tensor* k_norm, float eps, const int32_t* positions,
                                     const rope_tables& tables, const int32_t* slot_mapping,
                                     const kv_cache_layer& cache, const tensor& q_out,
                                     const lora_delta* lora) {
  TROUPE_CHECK(x.cols == w.cols && qkv.cols == w.rows && x.type == w.type);
  const tensor rows_out{qkv.data, qkv.type, x.rows, qkv.cols};
  // The GEMV variant with the epilogue (and the LoRA deltas inside it)
  // where tuning (timed with the epilogue) chose one; the separate steps
  // where that is cuBLAS, with q/k norms, with LoRA deltas the GEMV cannot
  // take (the product with them, then the epilogue), or when
  // TROUPE_ROPE_FUSION is off.
  const rope_heads heads{num_heads, num_kv_heads, head_dim};
  const bool lora_gemv_ok = lora == nullptr || lora_in_gemv(x, w, *lora);
  const int choice = impl_->rope_fusion_on && lora_gemv_ok && q_norm == nullptr && k_norm == nullptr &&
                             !w.is_packed() &&
                             x.rows > 0 && qkv.type == w.type &&
                             cuda::gemv_rope_supported(element_of(w.type), x.rows, x.cols,
                                                       head_dim, x.data, w.data)
                         ? gemm_choice(x, w, rows_out, false, &heads)
                         : -1;
  if (choice < 0) {
    ops::qkv_linear_rope_cache(x, w, bias, qkv, num_heads, num_kv_heads, head_dim, q_norm, k_norm,
                               eps, positions, tables, slot_mapping, cache, q_out, lora);
    return;
  }
  check_qkv_rope_cache(qkv, x.rows, num_heads, num_kv_heads, head_dim, tables, cache, q_out);
  if (bias != nullptr) TROUPE_CHECK(bias->type == w.type && bias->rows * bias->cols == w.rows);
  cuda::gemv_lora tail;
  if (lora != nullptr) lora_gemv(x, *lora, tail);
  op_scope scope(*impl_, lora != nullptr ? "qkv_linear_rope_cache (+ LoRA deltas)" : "qkv_linear_rope_cache",
                 x, w, w.rows);
  cuda::gemv_qkv_rope_cache(element_of(w.type), choice, x.data, x.rows,
                            w.data, bias != nullptr ? bias->data : nullptr, w.cols, num_heads,
                            num_kv_heads, head_dim, positions, tables.cos.f32(),
                            tables.sin.f32(), slot_mapping, q_out.data, kv_dest_of(cache),
                            impl_->stream, lora != nullptr ? &tail : nullptr);
}

void cuda_ops::write_kv_cache(const tensor& k, const tensor& v, const int32_t* slot_mapping,
                              const kv_cache_layer& cache) {
  op_scope scope(*impl_, "write_kv_cache");
  cuda::write_kv_cache(element_of(k.type), k.data, v.data, slot_mapping, k.rows, k.cols,
                       kv_dest_of(cache), impl_->stream);
}

void cuda_ops::paged_attention(const tensor& q, const kv_cache_layer& cache,
                               const attention_metadata& meta, int64_t num_heads,
                               int64_t num_kv_heads, int64_t head_dim, float scale,
                               const tensor& out) {
  op_scope scope(*impl_, meta.max_query_len == 1 ? "attention (decode)" : "attention (prefill)");
  TROUPE_CHECK(q.rows <= impl_->max_num_tokens);
  cuda::paged_attention_args a;
  a.q = q.data;
  a.k_cache = cache.k.data;
  a.v_cache = cache.v.data;
  a.fp8_cache = cache.fp8();
  a.k_scale = cache.k_scale;
  a.v_scale = cache.v_scale;
  a.out = out.data;
  a.query_start_loc = meta.query_start_loc;
  a.seq_lens = meta.seq_lens;
  a.block_tables = meta.block_tables;
  a.num_tokens = q.rows;
  a.num_seqs = meta.num_seqs;
  a.max_query_len = meta.max_query_len;
  a.max_seq_len = meta.max_seq_len;
  a.max_blocks_per_seq = meta.max_blocks_per_seq;
  a.block_size = meta.block_size;
  a.num_heads = num_heads;
  a.num_kv_heads = num_kv_heads;
  a.head_dim = head_dim;
  a.scale = scale;
  a.workspace = impl_->attention_workspace;
  a.workspace_bytes = impl_->attention_workspace_bytes;
  a.split_counters = impl_->attention_split_counters;
  a.split_counters_count = impl_->attention_split_counters_count;
  // Batch invariance: the split count depends on the batch, a split
  // sequence's sums on the count.
  if (impl_->rows_consistent) a.num_splits = 1;
  cuda::paged_attention(element_of(q.type), a, impl_->stream);
}

void cuda_ops::silu_and_mul(const tensor& gate_up, const tensor& out) {
  op_scope scope(*impl_, "silu_and_mul");
  cuda::silu_and_mul(element_of(gate_up.type), gate_up.data, gate_up.rows, out.cols, out.data,
                     impl_->stream);
}

void cuda_ops::add_sigmoid_gated(const tensor& x, const tensor& gate, const tensor& out) {
  TROUPE_CHECK(x.rows == out.rows && x.cols == out.cols && gate.rows >= x.rows && gate.cols >= 1 &&
               x.type == out.type && gate.type == out.type);
  op_scope scope(*impl_, "add_sigmoid_gated");
  cuda::add_sigmoid_gated(element_of(out.type), x.data, gate.data, gate.cols, x.rows, x.cols,
                          out.data, impl_->stream);
}

void cuda_ops::gated_linear(const tensor& x, const tensor& w, const tensor& gate_up,
                            const tensor& out, const lora_delta* lora) {
  TROUPE_CHECK(x.cols == w.cols && w.rows % 2 == 0 && out.cols == w.rows / 2 &&
               out.rows >= x.rows && out.type == w.type && x.type == w.type);
  if (x.rows == 0) return;
  // With a packed weight or LoRA deltas the GEMV cannot take: the product
  // (with the deltas), then SiLU-and-mul.
  const bool lora_gemv_ok = lora == nullptr || lora_in_gemv(x, w, *lora);
  const int choice = !lora_gemv_ok || w.is_packed() ? -1 : gemm_choice(x, w, out, /*gated=*/true);
  if (choice < 0) {
    const tensor rows_out{gate_up.data, gate_up.type, x.rows, gate_up.cols};
    if (lora != nullptr) {
      linear_lora(x, w, nullptr, *lora, rows_out);
    } else {
      linear(x, w, nullptr, rows_out);
    }
    silu_and_mul(rows_out, tensor{out.data, out.type, x.rows, out.cols});
    return;
  }
  cuda::gemv_lora tail;
  if (lora != nullptr) lora_gemv(x, *lora, tail);
  op_scope scope(*impl_, lora != nullptr ? "gated_linear (+ LoRA deltas)" : "gated_linear", x, w, out.cols);
  cuda::gemv_glu(element_of(w.type), choice, x.data, x.rows, w.data, out.cols, w.cols, out.data,
                 impl_->stream, lora != nullptr ? &tail : nullptr);
}

void cuda_ops::gather_rows(const tensor& x, const int32_t* indices, int64_t n, const tensor& out) {
  op_scope scope(*impl_, "gather_rows");
  cuda::gather_rows(element_of(x.type), x.data, indices, n, x.cols, out.data, impl_->stream);
}

void cuda_ops::copy_kv_blocks(const kv_cache_layer& src, const kv_cache_layer& dst,
                              const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                              int64_t block_size) {
  op_scope scope(*impl_, "copy_kv_blocks");
  cuda::copy_kv_blocks(dtype_size(src.k.type), src.k.data, src.v.data, dst.k.data, dst.v.data,
                       src_blocks, dst_blocks, n, block_size, src.k.cols, impl_->stream);
}

}  // namespace troupe
