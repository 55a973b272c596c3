#include "model/quant_pack.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/fp8_linear.h"
#include "model/weights.h"

namespace troupe {

namespace {

std::string text(int64_t v) { return std::to_string(v); }

packed_linear empty_packed(int bits, int64_t group_size, int64_t rows, int64_t cols) {
  packed_linear p;
  p.bits = bits;
  p.group_size = group_size;
  p.rows = rows;
  p.cols = cols;
  p.words.assign(static_cast<size_t>(rows * p.words_per_row()), 0);
  p.scales.assign(static_cast<size_t>(rows * p.groups()), 0);
  p.zeros.assign(static_cast<size_t>(rows * p.groups()), 0);
  return p;
}

void put_code(packed_linear& p, int64_t row, int64_t col, uint32_t q) {
  const int per_word = 32 / p.bits;
  p.words[static_cast<size_t>(row * p.words_per_row() + col / per_word)] |= q << (p.bits * (col % per_word));
}

}  // namespace

bool packable(const quant_config& q, int64_t rows, int64_t cols, std::string* why) {
  auto fail = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (q.kind == quant_config::method::fp8) {
    const int64_t block_in = q.fp8_block_in(cols);
    if (cols % 128 != 0) return fail("inputs (" + text(cols) + ") not a multiple of 128");
    if (block_in != 128 && block_in != cols) {
      return fail("FP8 blocks of " + text(block_in) + " inputs (the FP8 kernels take 128, or a whole row)");
    }
    if (q.block_out != 1 && q.block_out % 16 != 0) {
      return fail("FP8 blocks of " + text(q.block_out) + " outputs (the FP8 kernels take 1 or a multiple of 16)");
    }
    if (rows % 16 != 0 || rows % q.block_out != 0) {
      return fail("outputs (" + text(rows) + ") not a multiple of 16 and of the block's " + text(q.block_out));
    }
    return true;
  }
  if (!q.integer_codes()) {
    return fail(std::string(quant_method_name(q.kind)) + " weights are not packed");
  }
  if (rows <= 0 || cols % 32 != 0) return fail("inputs (" + text(cols) + ") not a multiple of 32");
  if (q.group_size > 0 && q.group_size % 32 != 0) {
    return fail("group size " + text(q.group_size) + " not a multiple of 32");
  }
  return true;
}

int64_t packed_bytes(const quant_config& q, int64_t rows, int64_t cols) {
  if (q.kind == quant_config::method::fp8) {
    return rows * cols + (rows + q.block_out - 1) / q.block_out * fp8_scale_stride(q, cols) * 4;
  }
  const int64_t group = packed_group_size(q, cols);
  const int64_t groups = (cols + group - 1) / group;
  return rows * cols * q.bits / 8 + rows * groups * 3 + (q.desc_act ? cols * 4 : 0);
}

result<packed_linear> pack_gptq(const int32_t* qweight, const int32_t* qzeros, const float* scales,
                                const int32_t* g_idx, int64_t in, int64_t out, int bits,
                                int64_t group_size, bool zeros_minus_one, const std::string& name) {
  const int64_t group = group_size < 0 ? in : group_size;
  const int64_t groups = (in + group - 1) / group;
  // Inputs by group, stably: the identity unless act-order permuted them.
  std::vector<int32_t> perm(static_cast<size_t>(in));
  std::iota(perm.begin(), perm.end(), 0);
  auto group_of = [&](int64_t i) { return g_idx != nullptr ? int64_t{g_idx[i]} : i / group; };
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return group_of(a) < group_of(b); });
  bool identity = true;
  for (int64_t j = 0; j < in; ++j) {
    const int32_t i = perm[static_cast<size_t>(j)];
    if (group_of(i) != j / group) {
      return make_error("'" + name + "': g_idx puts " + (group_of(i) < j / group ? "more" : "fewer") + " than " +
                        text(group) + " inputs in group " + text(std::min(group_of(i), j / group)) +
                        "; the packed kernels need groups of exactly the group size");
    }
    identity = identity && i == j;
  }
  packed_linear p = empty_packed(bits, group, out, in);
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const auto zword = static_cast<uint32_t>(qzeros[g * (out / per_word) + o / per_word]);
      uint32_t zero = (zword >> (bits * (o % per_word))) & mask;
      if (zeros_minus_one) zero = (zero + 1) & mask;
      p.zeros[static_cast<size_t>(o * groups + g)] = static_cast<uint8_t>(zero);
      p.scales[static_cast<size_t>(o * groups + g)] = f32_to_f16(scales[g * out + o]);
    }
  }
  for (int64_t j = 0; j < in; ++j) {
    const int64_t i = perm[static_cast<size_t>(j)];
    const auto* row = reinterpret_cast<const uint32_t*>(qweight) + (i / per_word) * out;
    const int shift = static_cast<int>(i % per_word) * bits;
    for (int64_t o = 0; o < out; ++o) put_code(p, o, j, (row[o] >> shift) & mask);
  }
  if (!identity) p.perm = std::move(perm);
  return p;
}

packed_linear pack_awq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in,
                       int64_t out, int64_t group_size) {
  static constexpr int nibble_of_column[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  const int64_t group = group_size < 0 ? in : group_size;
  packed_linear p = empty_packed(4, group, out, in);
  const int64_t words = out / 8, groups = p.groups();
  auto code = [&](const int32_t* t, int64_t r, int64_t o) {
    return (static_cast<uint32_t>(t[r * words + o / 8]) >> (4 * nibble_of_column[o % 8])) & 0xF;
  };
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      p.zeros[static_cast<size_t>(o * groups + g)] = static_cast<uint8_t>(code(qzeros, g, o));
      p.scales[static_cast<size_t>(o * groups + g)] = f32_to_f16(scales[g * out + o]);
    }
  }
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) put_code(p, o, i, code(qweight, i, o));
  }
  return p;
}

namespace {

// Where the code of (row, col) sits in the tensor-core layout: its word
// and nibble. Nibble n holds row offset 8 (n & 1) and column offset
// 8 ((n >> 1) & 1) + (n >> 2) (quant_pack.h's row_of and col_of), so a
// tile's (r, k) is nibble (r / 8) + 2 (k / 8) + 4 (k % 2) of lane
// (r % 8) * 4 + (k % 8) / 2.
std::pair<int64_t, int> mma_place(int64_t cols, int64_t row, int64_t col) {
  const int64_t b = row / 16, c = col / 64, t = (col % 64) / 16;
  const int r = static_cast<int>(row % 16), k = static_cast<int>(col % 16);
  const int lane = (r % 8) * 4 + (k % 8) / 2;
  return {((b * (cols / 64) + c) * 32 + lane) * 4 + t, r / 8 + 2 * (k / 8) + 4 * (k % 2)};
}

}  // namespace

packed_linear to_mma_layout(packed_linear p) {
  const std::vector<uint32_t> rows = std::move(p.words);
  p.words.assign(rows.size(), 0u);
  const int64_t wpr = p.words_per_row();
  for (int64_t o = 0; o < p.rows; ++o) {
    for (int64_t j = 0; j < p.cols; ++j) {
      const uint32_t q = (rows[static_cast<size_t>(o * wpr + j / 8)] >> (4 * (j % 8))) & 0xFu;
      const auto [word, nibble] = mma_place(p.cols, o, j);
      p.words[static_cast<size_t>(word)] |= q << (4 * nibble);
    }
  }
  p.mma = true;
  return p;
}

void unpack_linear(const packed_linear& p, float* w) {
  const int per_word = 32 / p.bits;
  const uint32_t mask = (1u << p.bits) - 1;
  const int64_t groups = p.groups(), wpr = p.words_per_row();
  for (int64_t o = 0; o < p.rows; ++o) {
    for (int64_t j = 0; j < p.cols; ++j) {
      const auto [word, nibble] =
          p.mma ? mma_place(p.cols, o, j) : std::pair<int64_t, int>{o * wpr + j / per_word, static_cast<int>(j % per_word)};
      const uint32_t q = (p.words[static_cast<size_t>(word)] >> (p.bits * nibble)) & mask;
      const size_t g = static_cast<size_t>(o * groups + j / p.group_size);
      const int64_t i = p.perm.empty() ? j : p.perm[static_cast<size_t>(j)];
      w[o * p.cols + i] = (static_cast<float>(q) - static_cast<float>(p.zeros[g])) * f16_to_f32(p.scales[g]);
    }
  }
}

packed_linear rtn_quantize(const float* w, int64_t rows, int64_t cols, int bits, int64_t group_size) {
  const int64_t group = group_size < 0 ? cols : group_size;
  packed_linear p = empty_packed(bits, group, rows, cols);
  const auto max_code = static_cast<float>((1 << bits) - 1);
  const int64_t groups = p.groups();
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      float lo = 0.0f, hi = 0.0f;
      for (int64_t j = begin; j < end; ++j) {
        lo = std::min(lo, w[o * cols + j]);
        hi = std::max(hi, w[o * cols + j]);
      }
      const uint16_t s16 = hi > lo ? f32_to_f16((hi - lo) / max_code) : f32_to_f16(1.0f);
      const float s = f16_to_f32(s16) > 0.0f ? f16_to_f32(s16) : 1.0f;
      const float zero = std::clamp(std::nearbyint(-lo / s), 0.0f, max_code);
      p.scales[static_cast<size_t>(o * groups + g)] = f32_to_f16(s);
      p.zeros[static_cast<size_t>(o * groups + g)] = static_cast<uint8_t>(zero);
      for (int64_t j = begin; j < end; ++j) {
        const float q = std::clamp(std::nearbyint(w[o * cols + j] / s) + zero, 0.0f, max_code);
        put_code(p, o, j, static_cast<uint32_t>(q));
      }
    }
  }
  return p;
}

}  // namespace troupe
