// cuda_ops' FP8 products (W8A8; model/fp8_linear.h, kernels/cuda/quant/
// fp8.h): x quantized into the scratch, then the float8 mma kernel or
// cuBLASLt's FP8 GEMM with block scales (weights BLK128x128 and
// activations VEC128 for block-FP8 checkpoints; a scale a row and a token,
// OUTER_VEC, for online FP8). Layouts found on an H200 with cuBLASLt 13.1
// (each alternative gave wrong sums): the weights' block scales [out
// blocks][in blocks, padded to 4] and the activations' VEC128 scales
// group-major, [in blocks][rows]; the scale pointers must be set before
// the algorithm heuristic, which otherwise finds none. Nothing here
// synchronises or allocates after reserve_fp8, so decode steps capture
// into CUDA graphs.
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/quant/fp8.h"

namespace troupe {

namespace {

cuda::fp8_weight_args fp8_args_of(const tensor& w) {
  cuda::fp8_weight_args a;
  a.codes = reinterpret_cast<const uint8_t*>(w.packed.words);
  a.scales = w.packed.fp8_scales;
  a.rows = w.rows;
  a.cols = w.cols;
  a.block_out = w.packed.block_out;
  a.block_in = w.packed.block_in;
  a.scale_stride = w.packed.scale_stride;
  return a;
}

#define TROUPE_LT_CHECK(call)                                                   \
  do {                                                                          \
    const cublasStatus_t lt_status_ = (call);                                   \
    TROUPE_CHECK_MSG(lt_status_ == CUBLAS_STATUS_SUCCESS,                       \
                     cublasGetStatusString(lt_status_));                        \
  } while (0)

}  // namespace

void cuda_ops::reserve_fp8(int64_t max_rows, int64_t max_cols) {
  impl& m = *impl_;
  if (m.fp8.codes != nullptr && max_rows <= m.fp8.rows && max_cols <= m.fp8.cols) return;
  void* base = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&base, static_cast<size_t>(fp8_scratch_bytes(max_rows, max_cols))));
  m.device_buffers.push_back(base);
  m.fp8.rows = max_rows;
  m.fp8.cols = max_cols;
  m.fp8.codes = static_cast<uint8_t*>(base);
  m.fp8.scales = reinterpret_cast<float*>(static_cast<char*>(base) + (max_rows * max_cols + 255) / 256 * 256);
  if (m.lt == nullptr) TROUPE_LT_CHECK(cublasLtCreate(&m.lt));
}

void cuda_ops::fill_dummy_fp8(const tensor& dst, uint64_t key, float scale) {
  cuda::fp8_fill_dummy(element_of(dst.type), fp8_args_of(dst), key, scale, impl_->stream);
}

bool cuda_ops::fp8_cublaslt(const tensor& x, const tensor& w, const tensor& out) {
  impl& m = *impl_;
  const packed_parts& p = w.packed;
  const bool blocks = p.block_out == 128 && p.block_in == 128;
  const bool per_row = p.block_out == 1 && p.block_in == w.cols;
  if (m.lt == nullptr || !(blocks || per_row)) return false;
  // The scales' pointers: this product's (set before the heuristic too,
  // which finds no algorithm for block scales without them).
  auto set_scales = [&](impl::lt_plan& l) {
    const float* a_scale = p.fp8_scales;
    const float* b_scale = m.fp8.scales;
    TROUPE_LT_CHECK(
        cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    TROUPE_LT_CHECK(
        cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  };
  auto& plan = m.lt_plans[{x.rows, w.rows, w.cols, static_cast<int>(out.type), blocks}];
  if (plan == nullptr) {
    auto made = std::make_unique<impl::lt_plan>();
    impl::lt_plan& l = *made;
    TROUPE_LT_CHECK(cublasLtMatmulDescCreate(&l.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major: D [n, m] (out, row-major [m, n]) = A^T B, A the
    // weight's codes as [k, n] (row-major [n, k]), B x's as [k, m].
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    TROUPE_LT_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    TROUPE_LT_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cublasLtMatmulMatrixScale_t sa = blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const cublasLtMatmulMatrixScale_t sb = blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    TROUPE_LT_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &sa, sizeof(sa)));
    TROUPE_LT_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &sb, sizeof(sb)));
    set_scales(l);
    TROUPE_LT_CHECK(cublasLtMatrixLayoutCreate(&l.a, CUDA_R_8F_E4M3, w.cols, w.rows, w.cols));
    TROUPE_LT_CHECK(cublasLtMatrixLayoutCreate(&l.b, CUDA_R_8F_E4M3, w.cols, x.rows, w.cols));
    TROUPE_LT_CHECK(cublasLtMatrixLayoutCreate(&l.d, cublas_type_of(out.type), w.rows, x.rows, out.cols));
    cublasLtMatmulPreference_t pref = nullptr;
    TROUPE_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t workspace = impl::blas_workspace_bytes;
    TROUPE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                         sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(m.lt, l.op, l.a, l.b, l.d, l.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    l.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (l.ok) {
      l.algo = result.algo;
    } else {
      std::fprintf(stderr, "troupe: cuBLASLt has no FP8 GEMM for %lld x %lld x %lld (%s); the FP8 mma kernel runs it\n",
                   static_cast<long long>(x.rows), static_cast<long long>(w.rows), static_cast<long long>(w.cols),
                   cublasGetStatusString(st));
    }
    plan = std::move(made);
  }
  impl::lt_plan& l = *plan;
  if (!l.ok) return false;
  set_scales(l);
  const float alpha = 1.0f, beta = 0.0f;
  TROUPE_LT_CHECK(cublasLtMatmul(m.lt, l.op, &alpha, p.words, l.a, m.fp8.codes, l.b, &beta, out.data, l.d, out.data,
                                 l.d, &l.algo, m.blas_workspace, impl::blas_workspace_bytes, m.stream));
  return true;
}

void cuda_ops::fp8_linear(const tensor& x, const tensor& w, const tensor& out) {
  impl& m = *impl_;
  TROUPE_CHECK_MSG(m.fp8.codes != nullptr && x.rows <= m.fp8.rows && w.cols <= m.fp8.cols,
                   "an FP8 product before reserve_fp8 (or larger than it)");
  TROUPE_CHECK(out.type == w.type && x.type == w.type && out.cols == w.rows && x.cols == w.cols);
  if (x.rows == 0) return;
  const cuda::fp8_weight_args a = fp8_args_of(w);
  const cuda::element_type et = element_of(w.type);
  const double bytes = static_cast<double>(w.rows * w.cols + (x.numel() + x.rows * w.rows) *
                                                                   static_cast<int64_t>(dtype_size(w.type)));
  const bool kernel = x.rows <= std::min(packed_kernel_rows, m.max_packed_kernel_rows) || m.rows_consistent;
  op_scope scope(m, [&] { return std::string(kernel ? "fp8 linear (mma) " : "fp8 linear (cublasLt) ") +
                                 std::to_string(x.rows) + "x" + std::to_string(w.cols) + " -> " +
                                 std::to_string(w.rows); }, bytes);
  // Rows [begin, begin + rows) quantized (scales group-major for those
  // rows alone), then through cuBLASLt or the mma kernel.
  auto run = [&](int64_t begin, int64_t rows, bool lt) {
    const tensor xr = x.row_slice(begin, rows), outr = out.row_slice(begin, rows);
    cuda::fp8_quantize_activations(et, xr.data, rows, x.cols, a.block_in, m.fp8.codes, m.fp8.scales, m.stream);
    if (lt && fp8_cublaslt(xr, w, outr)) return;
    cuda::fp8_mma(et, m.fp8.codes, m.fp8.scales, rows, a, outr.data, out.cols, m.stream);
  };
  // cuBLASLt's group-major activation scales want rows in fours (16-byte
  // rows of scales): the last x.rows % 4 rows run on the mma kernel.
  const int64_t lt_rows = kernel ? 0 : x.rows / 4 * 4;
  if (lt_rows > 0) run(0, lt_rows, true);
  if (lt_rows < x.rows) run(lt_rows, x.rows - lt_rows, false);
}

}  // namespace troupe
