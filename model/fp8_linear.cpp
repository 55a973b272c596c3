#include "model/fp8_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/quantization.h"

namespace troupe {

void fp8_quantize_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_out, int64_t block_in,
                         uint8_t* codes, float* scales) {
  const int64_t scale_cols = (cols + block_in - 1) / block_in;
  for (int64_t r0 = 0; r0 < rows; r0 += block_out) {
    const int64_t r1 = std::min(rows, r0 + block_out);
    for (int64_t c0 = 0; c0 < cols; c0 += block_in) {
      const int64_t c1 = std::min(cols, c0 + block_in);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const float scale = fp8_scale_of(amax);
      scales[(r0 / block_out) * scale_cols + c0 / block_in] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) codes[r * cols + c] = f32_to_e4m3(w[r * cols + c] / scale);
      }
    }
  }
}

void fp8_quantize_activations(const float* x, int64_t rows, int64_t cols, int64_t group, uint8_t* codes,
                              float* scales) {
  fp8_quantize_blocks(x, rows, cols, 1, group, codes, scales);
}

void fp8_w8a8_linear(const uint8_t* xq, const float* xs, int64_t rows, const uint8_t* wq, const float* ws,
                     int64_t n, int64_t k, int64_t block_out, int64_t block_in, float* out) {
  const int64_t groups = (k + block_in - 1) / block_in;
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(i)] = e4m3_to_f32(xq[r * k + i]);
    for (int64_t o = 0; o < n; ++o) {
      double total = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        double sum = 0.0;
        for (int64_t i = g * block_in; i < std::min(k, (g + 1) * block_in); ++i) {
          sum += static_cast<double>(x[static_cast<size_t>(i)]) * e4m3_to_f32(wq[o * k + i]);
        }
        total += sum * xs[r * groups + g] * ws[(o / block_out) * groups + g];
      }
      out[r * n + o] = static_cast<float>(total);
    }
  }
}

bool fp8_quantizes(const std::string& name) {
  static const char* const suffixes[] = {"q_proj.weight",    "k_proj.weight",  "v_proj.weight",
                                         "o_proj.weight",    "gate_proj.weight", "up_proj.weight",
                                         "down_proj.weight", ".w1.weight",      ".w2.weight",
                                         ".w3.weight"};
  for (const char* s : suffixes) {
    const std::string suffix(s);
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<float> fp8_padded_scales(const std::vector<float>& scales, int64_t blocks_out, int64_t blocks_in,
                                     int64_t stride) {
  std::vector<float> padded(static_cast<size_t>(blocks_out * stride), 0.0f);
  for (int64_t r = 0; r < blocks_out; ++r) {
    std::copy_n(scales.data() + r * blocks_in, blocks_in, padded.data() + r * stride);
  }
  return padded;
}

void fp8_round_trip(float* w, int64_t rows, int64_t cols, const quant_config& q) {
  const int64_t block_in = q.fp8_block_in(cols);
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(((rows + q.block_out - 1) / q.block_out) *
                                                ((cols + block_in - 1) / block_in)));
  fp8_quantize_blocks(w, rows, cols, q.block_out, block_in, codes.data(), scales.data());
  fp8_block_dequantize(codes.data(), scales.data(), rows, cols, q.block_out, block_in, w);
}

}  // namespace troupe
