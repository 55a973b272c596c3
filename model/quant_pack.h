// GPTQ and AWQ linears in the one packed layout troupe's packed products
// read (kernels/cuda/quant), made on the host at load from a checkpoint's
// tensors (model/quantization.h has their formats), and its exact
// dequantization, the reference those kernels are held to:
//
//   words  uint32 [rows, cols * bits / 32]: row o's packed column j at
//          bits [bits * (j % per_word), bits * (j % per_word + 1)) of
//          word j / per_word (per_word = 32 / bits);
//   scales float16 bits [rows, groups]; zeros uint8 [rows, groups] (GPTQ
//          v1's stored zero minus one already added back);
//   perm   int32 [cols] or empty: packed column j holds input perm[j]
//          (act-order: the inputs sorted by their group, so that packed
//          column j's group is j / group_size);
//   W[o, perm[j]] = (q[o, j] - zeros[o, j / g]) * scales[o, j / g].
//
// The tensor-core layout (mma, 4-bit only; mma_layout_fits): the same
// codes with the words reordered for mma.sync m16n8k16's A fragments, so
// that each lane's 16-byte load holds its fragments of four 16 x 16
// tiles. Word ((b * C + c) * 32 + l) * 4 + t (row block b of 16 rows,
// column chunk c of C = cols / 64, lane l, tile t of the chunk's four 16
// columns) holds at nibble n the code of row 16 b + l / 4 + row_of[n] and
// column 64 c + 16 t + 2 (l % 4) + col_of[n], with row_of = {0, 8, 0, 8,
// 0, 8, 0, 8} and col_of = {0, 0, 8, 8, 1, 1, 9, 9}: shifted right by 4 i
// and masked with 0x000f000f, a word gives fragment register i's two
// codes (kernels/cuda/quant/qmma.cu). Scales, zeros and perm as above.
//
// rows = the linear's outputs, cols = its inputs (W is [out, in] as the
// float path stores it). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/quantization.h"

namespace troupe {

struct packed_linear {
  int bits = 4;
  int64_t group_size = 0;  // packed columns a group (cols: one group)
  int64_t rows = 0, cols = 0;
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
  std::vector<int32_t> perm;  // empty: the identity
  bool mma = false;           // words in the tensor-core layout

  int64_t groups() const { return (cols + group_size - 1) / group_size; }
  int64_t words_per_row() const { return cols * bits / 32; }
};

// Whether a [rows, cols] linear of `q` fits the layout the packed kernels
// read: GPTQ or AWQ, cols a multiple of 32 and the group size a multiple
// of 32 (or -1); FP8 (model/fp8_linear.h), cols a multiple of 128, blocks
// of 128 inputs or whole rows, rows a multiple of 16 and of the block's.
// Otherwise `why` says what does not (the model then dequantizes it to
// floats).
bool packable(const quant_config& q, int64_t rows, int64_t cols, std::string* why);
// Whether a [rows, cols] linear of `bits` with groups of `group_size`
// columns takes the tensor-core layout: 4 bits, rows a multiple of 16,
// cols a multiple of 64, groups of 64 times a power of two columns (32 and
// 96 do not) or the whole input.
inline bool mma_layout_fits(int bits, int64_t rows, int64_t cols, int64_t group_size) {
  const int64_t chunks = group_size / 64;
  return bits == 4 && rows % 16 == 0 && cols % 64 == 0 && group_size % 64 == 0 &&
         (group_size >= cols || (chunks & (chunks - 1)) == 0);
}
// p's words in the tensor-core layout (p in the row layout; mma_layout_fits).
packed_linear to_mma_layout(packed_linear p);
// The group size of q's packed layout for `cols` inputs (-1: cols).
inline int64_t packed_group_size(const quant_config& q, int64_t cols) {
  return q.group_size < 0 ? cols : q.group_size;
}
// Bytes a packed [rows, cols] linear of `q` takes (act-order's
// permutation included).
int64_t packed_bytes(const quant_config& q, int64_t rows, int64_t cols);

// From a GPTQ checkpoint's tensors (shapes as model/quantization.h; g_idx
// null: input i in group i / group_size). Act-order: g_idx must put
// exactly group_size inputs in each group (the last may be short), else
// the error says so naming `name`.
result<packed_linear> pack_gptq(const int32_t* qweight, const int32_t* qzeros, const float* scales,
                                const int32_t* g_idx, int64_t in, int64_t out, int bits,
                                int64_t group_size, bool zeros_minus_one, const std::string& name);
// From an AWQ checkpoint's tensors (4 bits).
packed_linear pack_awq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in,
                       int64_t out, int64_t group_size);
// W [rows, cols] (inputs in their own order) as float32, exactly.
void unpack_linear(const packed_linear& p, float* w);
// Round-to-nearest quantization of W [rows, cols] (dummy quantized
// weights): per row and group, the range [min(w, 0), max(w, 0)] in 2^bits
// - 1 steps, scale = range / (2^bits - 1) rounded to float16 (1 where the
// range is 0), zero = clamp(rint(-min / scale)), q = clamp(rint(w / scale)
// + zero), rint rounding half to even, each division correctly rounded.
packed_linear rtn_quantize(const float* w, int64_t rows, int64_t cols, int bits, int64_t group_size);

}  // namespace troupe
