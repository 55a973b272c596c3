// cuda_ops' private state and the helpers its source files share
// (cuda_ops.cpp: memory, steps, sampling, the ops; cuda_gemm.cpp: the dense
// products and their start-up tuning; cuda_lora.cpp: the LoRA deltas). Not
// for use outside cuda_ops.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/sampling/sampling.h"

namespace troupe {

namespace cuda_detail {

inline cuda::element_type element_of(dtype t) {
  switch (t) {
    case dtype::f32: return cuda::element_type::f32;
    case dtype::bf16: return cuda::element_type::bf16;
    case dtype::f16: return cuda::element_type::f16;
    case dtype::fp8_e4m3: break;  // FP8 KV caches: their kernels take kv_dest_of / the cache flag
  }
  TROUPE_CHECK_MSG(false, "an FP8 tensor reached a CUDA kernel of the compute types");
  return cuda::element_type::f32;
}

// A layer's cache as the KV writers take it.
inline cuda::kv_dest kv_dest_of(const kv_cache_layer& c) {
  return {c.k.data, c.v.data, c.fp8(), c.k_scale, c.v_scale};
}

inline cudaDataType_t cublas_type_of(dtype t) {
  switch (t) {
    case dtype::f32: return CUDA_R_32F;
    case dtype::bf16: return CUDA_R_16BF;
    case dtype::f16: return CUDA_R_16F;
    case dtype::fp8_e4m3: break;
  }
  TROUPE_CHECK_MSG(false, "an FP8 tensor reached a cuBLAS product");
  return CUDA_R_32F;
}

#define TROUPE_CUBLAS_CHECK(call)                                                   \
  do {                                                                              \
    const cublasStatus_t troupe_cublas_status = (call);                             \
    TROUPE_CHECK_MSG(troupe_cublas_status == CUBLAS_STATUS_SUCCESS, #call);         \
  } while (0)

}  // namespace cuda_detail

using cuda_detail::cublas_type_of;
using cuda_detail::element_of;
using cuda_detail::kv_dest_of;

struct cuda_ops::impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> device_buffers;
  std::vector<void*> host_buffers;
  void* attention_workspace = nullptr;  // split-KV decode partials (owned, not in device_buffers)
  size_t attention_workspace_bytes = 0;
  int32_t* attention_split_counters = nullptr;  // zero between launches (owned)
  int64_t attention_split_counters_count = 0;
  int64_t max_num_tokens = 0;
  cublasMath_t blas_mode = CUBLAS_PEDANTIC_MATH;
  void* blas_workspace = nullptr;  // cuBLAS's, set explicitly so that capture never allocates
  static constexpr size_t blas_workspace_bytes = 32u << 20;  // (cuBLASLt's FP8 products use it too)
  std::map<int64_t, cudaGraphExec_t> graphs;
  // Decode products (gemm_choice): TROUPE_GEMV=auto (default: each shape
  // of up to gemv_max_rows rows timed at warm-up, GEMV variants against
  // cuBLAS), off (cuBLAS only) or v0..v8 (that variant wherever it runs).
  static constexpr int gemv_off = -2, gemv_auto = -1;
  int gemv_mode = [] {
    const char* v = std::getenv("TROUPE_GEMV");
    if (v == nullptr || std::strcmp(v, "auto") == 0 || *v == '\0') return gemv_auto;
    if (std::strcmp(v, "off") == 0) return gemv_off;
    if (v[0] == 'v' && v[1] >= '0' && v[1] <= '9') {
      char* end = nullptr;
      const long n = std::strtol(v + 1, &end, 10);
      if (*end == '\0' && n < cuda::gemv_num_variants()) return static_cast<int>(n);
    }
    std::fprintf(stderr, "troupe: TROUPE_GEMV='%s' ignored (expected auto, off or v0..v%d)\n", v,
                 cuda::gemv_num_variants() - 1);
    return gemv_auto;
  }();
  // TROUPE_GLU=off (or 0, false): gated_linear always as a product, then
  // silu_and_mul (comparisons).
  bool glu_on = cuda::env_switch("TROUPE_GLU");
  // TROUPE_ROPE_FUSION=off (or 0, false): the q/k/v product and
  // qkv_rope_cache as two kernels (comparisons).
  bool rope_fusion_on = cuda::env_switch("TROUPE_ROPE_FUSION");
  // TROUPE_GEMV_SPLIT=off (or 0, false): the tuning leaves out the GEMV
  // variants whose warps share a row's k; =only: it times only those
  // against cuBLAS where they are considered (comparisons).
  enum class split_mode { on, off, only };
  split_mode gemv_split = [] {
    const char* v = std::getenv("TROUPE_GEMV_SPLIT");
    if (v != nullptr && std::strcmp(v, "only") == 0) return split_mode::only;
    return cuda::env_switch("TROUPE_GEMV_SPLIT") ? split_mode::on : split_mode::off;
  }();
  // moe_mlp's scratch (reserve_moe; one buffer in device_buffers) and
  // TROUPE_MOE_GEMV_SLOTS: steps of up to this many slots (tokens x
  // top_k) run the decode GEMVs, larger ones the grouped GEMMs (0: always
  // the grouped GEMMs; unset: cuda_moe.cpp's rule by the expected number
  // of distinct experts).
  struct moe_scratch {
    moe_shape shape;
    dtype type = dtype::f32;
    void* data = nullptr;
  };
  moe_scratch moe;
  // Packed products' scratch (reserve_packed; one buffer in
  // device_buffers): a dequantized weight of up to packed_elements
  // elements, then act-order's permuted x for up to packed_kernel_rows
  // rows of packed_cols columns.
  struct packed_scratch {
    int64_t elements = 0, cols = 0;
    dtype type = dtype::f32;
    void* weight = nullptr;
    void* x = nullptr;
  };
  packed_scratch packed;
  // FP8 products (cuda_fp8.cpp): the quantized activations (reserve_fp8;
  // one buffer in device_buffers), cuBLASLt's handle, and its plan for
  // each (rows, outputs, inputs, output type, block scales), made by the
  // first product of that shape.
  struct fp8_scratch {
    int64_t rows = 0, cols = 0;
    uint8_t* codes = nullptr;
    float* scales = nullptr;
  };
  fp8_scratch fp8;
  struct lt_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;  // false: cuBLASLt has no algorithm for the shape
    lt_plan() = default;
    lt_plan(const lt_plan&) = delete;
    lt_plan& operator=(const lt_plan&) = delete;
    ~lt_plan() {
      if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
      if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
      if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
      if (op != nullptr) cublasLtMatmulDescDestroy(op);
    }
  };
  cublasLtHandle_t lt = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool>, std::unique_ptr<lt_plan>> lt_plans;
  // TROUPE_PACKED_KERNEL_ROWS (comparisons): products of more rows than
  // this run dequantized through cuBLAS (unset: as many as the packed
  // kernels take; 0: always).
  int64_t max_packed_kernel_rows = [] {
    const char* v = std::getenv("TROUPE_PACKED_KERNEL_ROWS");
    return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : int64_t{1} << 40;
  }();
  int64_t moe_gemv_slots = [] {
    const char* v = std::getenv("TROUPE_MOE_GEMV_SLOTS");
    return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : int64_t{-1};
  }();
  bool tuning_allowed = false;
  // keep_rows_consistent (batch invariance): products use GEMV variants
  // without a split only, gemv_max_rows rows at a time (one order of sums
  // for every row count), decode attention no key splits.
  bool rows_consistent = false;
  // (rows, n, k, weight type, output type, gated, RoPE q heads, RoPE head
  // dim (0: none)) -> gemm_choice's answer.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, bool, int64_t, int64_t>, int> gemm_choices;
  std::vector<std::string> tuning_lines;  // one per tuned shape
  double tuning_ms = 0;
  void* flush_buffer = nullptr;  // tuning scratch: an L2-flush region, a random x, an output
  size_t flush_bytes = 0;
  // Timeline events per step slot (step % slots: a step, the one before it
  // and the one after can be alive at once): the step's first launch, and
  // its last result (recorded by each download / device sampling; the last
  // one of a step counts).
  static constexpr int slots = 3;
  cudaEvent_t step_start[slots] = {}, work_end[slots] = {};
  int64_t current_step = -1;  // the last step begun
  // The step's work_end was recorded by a logits download (host sampling:
  // the GPU idles from there while the host samples).
  bool ended_by_download[slots] = {};
  int active_steps = 0;       // begun, not ended
  int64_t last_ended = -1;    // for the idle gap before the next step
  ops::timeline line;
  // The op profiler (TROUPE_PROFILE_OPS=1): an event pair per op of the
  // step, resolved at step_end into totals per op name.
  struct op_stat {
    int64_t calls = 0;
    double ms = 0;
    double bytes = 0;
  };
  struct op_span {
    std::string name;
    double bytes;
    cudaEvent_t begin, end;
    int64_t step;
  };
  bool profile = [] {
    const char* v = std::getenv("TROUPE_PROFILE_OPS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  std::vector<cudaEvent_t> free_events;
  std::vector<op_span> spans;
  std::map<std::string, op_stat> op_stats;
  cudaEvent_t next_event() {
    if (free_events.empty()) {
      cudaEvent_t e = nullptr;
      TROUPE_CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = free_events.back();
    free_events.pop_back();
    return e;
  }
  bool profiling() const {
    if (!profile || active_steps == 0) return false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TROUPE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    return status == cudaStreamCaptureStatusNone;
  }
  // Adds up the spans of steps up to `step` (their work is done).
  void resolve_spans(int64_t step) {
    std::vector<op_span> later;
    for (op_span& s : spans) {
      if (s.step > step) {
        later.push_back(std::move(s));
        continue;
      }
      TROUPE_CUDA_CHECK(cudaEventSynchronize(s.end));
      float ms = 0;
      TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, s.begin, s.end));
      op_stat& st = op_stats[s.name];
      st.calls += 1;
      st.ms += ms;
      st.bytes += s.bytes;
      free_events.push_back(s.begin);
      free_events.push_back(s.end);
    }
    spans = std::move(later);
  }
  // Sampling buffers, grown on demand (outside forward passes and graphs).
  struct growable {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  growable sample_params, sample_ids, sample_outputs, sample_scratch;
  growable sampled_tokens;  // token ids by job index of the last sampling step (kept on growth)
  growable gather_index;    // gather_sampled's (row, source) pairs
  std::vector<cuda::sample_params> host_params;
  std::vector<int32_t> host_ids;
  // Results per step slot, pinned (the device copies into them asynchronously).
  struct pinned {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  pinned results[slots];
  std::vector<int32_t> host_gather;
  // What gather_index holds (no kernel writes it): a decode step's pairs
  // repeat step after step, and then need no copy.
  std::vector<int32_t> uploaded_gather;
  void* uploaded_gather_ptr = nullptr;

  // Grows g keeping its first `keep` bytes.
  void* ensure_keeping(growable& g, size_t bytes, size_t keep) {
    if (bytes <= g.bytes) return g.ptr;
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    void* grown_ptr = nullptr;
    const size_t grown = std::max(bytes, g.bytes * 2);
    TROUPE_CUDA_CHECK(cudaMalloc(&grown_ptr, grown));
    if (keep > 0) TROUPE_CUDA_CHECK(cudaMemcpy(grown_ptr, g.ptr, keep, cudaMemcpyDeviceToDevice));
    TROUPE_CUDA_CHECK(cudaFree(g.ptr));
    g.ptr = grown_ptr;
    g.bytes = grown;
    return g.ptr;
  }
  void* ensure_pinned(pinned& p, size_t bytes, size_t keep) {
    if (bytes <= p.bytes) return p.ptr;
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));  // no copy is still writing the old one
    void* grown_ptr = nullptr;
    const size_t grown = std::max(bytes, p.bytes * 2);
    TROUPE_CUDA_CHECK(cudaMallocHost(&grown_ptr, grown));
    if (keep > 0) std::memcpy(grown_ptr, p.ptr, keep);
    TROUPE_CUDA_CHECK(cudaFreeHost(p.ptr));
    p.ptr = grown_ptr;
    p.bytes = grown;
    return p.ptr;
  }

  void* ensure(growable& g, size_t bytes) { return ensure_keeping(g, bytes, 0); }

  // A step's host-to-device inputs go through pinned staging, one buffer
  // per step slot, so that cudaMemcpyAsync never has to wait for the stream
  // to stage pageable memory (CUDA allows it to). A slot is reused three
  // steps later, when the step that last wrote it has ended (at most two
  // are launched and not ended). Outside steps (warm-up, graph capture):
  // plain copies from pageable memory.
  struct staging {
    pinned buf;
    int64_t step = -1;
    size_t used = 0;
  };
  staging stage[slots];
  std::vector<void*> retired_pinned;  // outgrown staging buffers, freed with the object
  void upload_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (active_steps == 0 || current_step < 0) {
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
      return;
    }
    staging& s = stage[current_step % slots];
    if (s.step != current_step) {
      // The step that used this slot last has ended (at most two steps are
      // launched and not ended, and slots are three).
      TROUPE_CHECK_MSG(s.step <= last_ended, "pinned staging slot reused while its step is in flight");
      s.step = current_step;
      s.used = 0;
    }
    size_t offset = (s.used + 15) & ~size_t{15};
    if (offset + bytes > s.buf.bytes) {
      // This step's earlier copies may still read the old buffer: keep it.
      if (s.buf.ptr != nullptr) retired_pinned.push_back(s.buf.ptr);
      const size_t grown = std::max({offset + bytes, s.buf.bytes * 2, size_t{1} << 20});
      TROUPE_CUDA_CHECK(cudaMallocHost(&s.buf.ptr, grown));
      s.buf.bytes = grown;
      offset = 0;
    }
    char* staged = static_cast<char*>(s.buf.ptr) + offset;
    std::memcpy(staged, src, bytes);
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream));
    s.used = offset + bytes;
  }
};

// Brackets one op with events when the profiler is on (see impl::op_span).
class op_scope {
 public:
  op_scope(cuda_ops::impl& m, const char* name, double bytes = 0) : m_(m) {
    if (!m.profiling()) return;
    active_ = true;
    span_.name = name;
    span_.bytes = bytes;
    span_.begin = m.next_event();
    span_.end = m.next_event();
    span_.step = m.current_step;
    TROUPE_CUDA_CHECK(cudaEventRecord(span_.begin, m.stream));
  }
  // For names composed per call (shapes): `name()` runs only when profiling,
  // so the hot path builds no strings.
  template <class F, class = decltype(std::declval<F>()())>
  op_scope(cuda_ops::impl& m, F&& name, double bytes) : op_scope(m, "", bytes) {
    if (active_) span_.name = name();
  }
  ~op_scope() {
    if (!active_) return;
    TROUPE_CUDA_CHECK(cudaEventRecord(span_.end, m_.stream));
    m_.spans.push_back(std::move(span_));
  }
  // A product of x and w with `outputs` columns: "op MxK -> N" and the
  // bytes it moves (weights, x, the output).
  op_scope(cuda_ops::impl& m, const char* op, const tensor& x, const tensor& w, int64_t outputs)
      : op_scope(
            m,
            [&] {
              return std::string(op) + " " + std::to_string(x.rows) + "x" +
                     std::to_string(w.cols) + " -> " + std::to_string(outputs);
            },
            static_cast<double>((w.numel() + x.numel() + outputs * x.rows) * dtype_size(w.type))) {}
  op_scope(const op_scope&) = delete;
  op_scope& operator=(const op_scope&) = delete;

 private:
  cuda_ops::impl& m_;
  bool active_ = false;
  cuda_ops::impl::op_span span_{};
};

}  // namespace troupe
