// cuda_ops' packed GPTQ / AWQ weights (ops::packs_weights,
// model/quant_pack.h): loading, dummy codes, and the products
// (kernels/cuda/quant/qgemm.h). Nothing here synchronises or allocates
// after reserve_packed, so decode steps capture into CUDA graphs.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/quant/qgemm.h"

namespace troupe {

static_assert(cuda::packed_mma_rows == packed_kernel_rows && cuda::packed_gemv_rows <= packed_kernel_rows,
              "ops.h's packed_scratch_bytes counts the kernels' rows of permuted x");

namespace {

cuda::packed_weight_args args_of(const tensor& w) {
  cuda::packed_weight_args a;
  a.words = w.packed.words;
  a.scales = w.packed.scales;
  a.zeros = w.packed.zeros;
  a.bits = w.packed.bits;
  a.group_size = w.packed.group_size;
  a.rows = w.rows;
  a.cols = w.cols;
  a.mma = w.packed.mma;
  return a;
}

}  // namespace

bool cuda_ops::packs_for_tensor_cores() const {
  // TROUPE_PACKED_LAYOUT=rows (comparisons): the row layout everywhere.
  static const bool rows = [] {
    const char* v = std::getenv("TROUPE_PACKED_LAYOUT");
    return v != nullptr && std::strcmp(v, "rows") == 0;
  }();
  return !rows;
}

bool cuda_ops::packs_weights(const quant_config& q, dtype /*type*/) const {
  // Every bit width GPTQ and AWQ configs accept (4, 8); float32 models
  // run the dequantized weight through cuBLAS. FP8: W8A8 in every type
  // (cuda_fp8.cpp).
  return q.integer_codes() || q.kind == quant_config::method::fp8;
}

void cuda_ops::upload_bytes(const void* host, void* dst, size_t bytes) {
  if (bytes == 0) return;
  TROUPE_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}

void cuda_ops::fill_dummy_packed(const tensor& dst, uint64_t key, float scale) {
  TROUPE_CHECK(dst.is_packed());
  if (dst.packed.fp8) return fill_dummy_fp8(dst, key, scale);
  cuda::packed_weight_args a = args_of(dst);
  if (!a.mma) return cuda::packed_fill_dummy(element_of(dst.type), a, key, scale, impl_->stream);
  // The codes in the row layout first (load time: a buffer of its own).
  uint32_t* rows = nullptr;
  const size_t bytes = static_cast<size_t>(dst.rows * dst.packed.words_per_row(dst.cols)) * 4;
  TROUPE_CUDA_CHECK(cudaMalloc(&rows, bytes));
  a.words = rows;
  a.mma = false;
  cuda::packed_fill_dummy(element_of(dst.type), a, key, scale, impl_->stream);
  cuda::packed_to_mma_layout(a, dst.packed.words, impl_->stream);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  TROUPE_CUDA_CHECK(cudaFree(rows));
}

void cuda_ops::reserve_packed(int64_t max_elements, int64_t max_cols, dtype type) {
  impl::packed_scratch& p = impl_->packed;
  // Once at load (before any capture); a larger second call (tests)
  // allocates anew and keeps the old buffer until the object goes.
  if (p.weight != nullptr && max_elements <= p.elements && max_cols <= p.cols && type == p.type) return;
  const int64_t bytes = packed_scratch_bytes(max_elements, max_cols, type);
  void* base = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&base, static_cast<size_t>(bytes)));
  impl_->device_buffers.push_back(base);
  p.elements = max_elements;
  p.cols = max_cols;
  p.type = type;
  p.weight = base;
  // The permuted x after the weight, 16-byte aligned (the GEMV's loads).
  const int64_t weight_bytes = max_elements * static_cast<int64_t>(dtype_size(type));
  p.x = static_cast<char*>(base) + (weight_bytes + 255) / 256 * 256;
}

void cuda_ops::packed_linear(const tensor& x, const tensor& w, const tensor& out) {
  if (w.packed.fp8) return fp8_linear(x, w, out);
  impl& m = *impl_;
  const impl::packed_scratch& s = m.packed;
  TROUPE_CHECK_MSG(s.weight != nullptr && w.cols <= s.cols && s.type == w.type,
                   "a packed product before reserve_packed");
  TROUPE_CHECK(out.type == w.type && out.cols == w.rows);
  const cuda::element_type et = element_of(w.type);
  const size_t element = dtype_size(w.type);
  const packed_parts& p = w.packed;
  // Act-order products stacked from parts with their own permutations run
  // part by part (rows [begin, end), their outputs' columns).
  const int parts = p.perm != nullptr ? p.parts : 1;
  auto part_rows = [&](int i) {
    const int64_t begin = i == 0 ? 0 : p.part_end[i - 1];
    return std::pair<int64_t, int64_t>{begin, parts == 1 ? w.rows : p.part_end[i] - begin};
  };
  auto part_args = [&](int i) {
    const auto [begin, rows] = part_rows(i);
    return args_of(w.row_slice(begin, rows));
  };
  const int64_t kernel_rows = p.mma ? cuda::packed_mma_rows : cuda::packed_gemv_rows;
  auto kernel_runs = [&](int64_t rows) {
    if (rows > m.max_packed_kernel_rows) return false;
    const cuda::packed_weight_args a = part_args(0);
    return p.mma ? cuda::packed_mma_supported(et, rows, a, x.data) : cuda::packed_gemv_supported(et, rows, a, x.data);
  };
  // Batch invariance: every row through the packed kernels, whose sums for
  // a row do not depend on the other rows, in launches of up to
  // kernel_rows rows.
  if (x.rows > kernel_rows && m.rows_consistent && kernel_runs(kernel_rows)) {
    for (int64_t r0 = 0; r0 < x.rows; r0 += kernel_rows) {
      const int64_t rows = std::min(kernel_rows, x.rows - r0);
      packed_linear(x.row_slice(r0, rows), w, out.row_slice(r0, rows));
    }
    return;
  }
  const double bytes = static_cast<double>(w.rows * w.cols * p.bits / 8 +
                                           (x.numel() + x.rows * w.rows) * static_cast<int64_t>(element));
  if (kernel_runs(x.rows)) {
    op_scope scope(m, [&] { return std::string(p.mma ? "packed linear (mma) " : "packed linear (gemv) ") +
                                   std::to_string(x.rows) + "x" + std::to_string(w.cols) + " -> " +
                                   std::to_string(w.rows); }, bytes);
    for (int i = 0; i < parts; ++i) {
      const void* xin = x.data;
      if (p.perm != nullptr) {  // act-order: x in the part's packed column order
        cuda::packed_gather_cols(et, x.data, x.rows, x.cols, p.perm + i * w.cols, s.x, m.stream);
        xin = s.x;
      }
      void* dst = static_cast<char*>(out.data) + part_rows(i).first * static_cast<int64_t>(element);
      if (p.mma) {
        cuda::packed_mma(et, xin, x.rows, part_args(i), dst, out.cols, m.stream);
      } else {
        cuda::packed_gemv(et, xin, x.rows, part_args(i), dst, out.cols, m.stream);
      }
    }
    return;
  }
  TROUPE_CHECK_MSG(w.numel() <= s.elements, "a packed weight larger than reserve_packed's");
  op_scope scope(m, [&] { return "packed linear (dequantized) " + std::to_string(x.rows) + "x" +
                                 std::to_string(w.cols) + " -> " + std::to_string(w.rows); }, bytes);
  for (int i = 0; i < parts; ++i) {
    const int64_t begin = part_rows(i).first;
    cuda::packed_dequantize(et, part_args(i), p.perm != nullptr ? p.perm + i * w.cols : nullptr,
                            static_cast<char*>(s.weight) + begin * w.cols * static_cast<int64_t>(element), m.stream);
  }
  gemm_cublas(x, tensor{s.weight, w.type, w.rows, w.cols}, out);
}

}  // namespace troupe
