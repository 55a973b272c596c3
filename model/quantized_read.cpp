// checkpoint::read_f32's quantized forms: a GPTQ / AWQ linear's packed
// tensors, or a block-FP8 weight with its scales, checked against the
// linear's [out, in] and dequantized exactly (model/quantization.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "model/weights.h"

namespace troupe {

namespace {

std::string text(int64_t v) { return std::to_string(v); }

// An I32 tensor's words (copied: the mapped data is 4-byte aligned only
// where the file put it so).
std::vector<int32_t> words_of(const tensor_info& t) {
  std::vector<int32_t> out(t.nbytes / 4);
  std::memcpy(out.data(), t.data, t.nbytes);
  return out;
}

std::vector<float> floats_of(const tensor_info& t) {
  std::vector<float> out(t.nbytes / stored_type_size(t.type));
  tensor_to_f32(t, out.data());
  return out;
}

}  // namespace

result<checkpoint::packed_tensors> checkpoint::read_packed_tensors(const std::string& prefix, int64_t out,
                                                                 int64_t in) const {
  const quant_config& q = quant_;
  const bool gptq = q.kind == quant_config::method::gptq;
  const std::string format = gptq ? "GPTQ " + text(q.bits) + "-bit" : std::string("AWQ 4-bit");
  const int64_t per_word = 32 / q.bits;
  if ((gptq ? in : out) % per_word != 0 || (gptq && out % per_word != 0)) {
    return make_error("'" + prefix + "': " + format + " needs the packed dimensions to be multiples of " +
                      text(per_word) + " (the linear is " + text(out) + " x " + text(in) + ")");
  }
  const int64_t group = q.group_size < 0 ? in : q.group_size;
  const int64_t groups = (in + group - 1) / group;
  const std::vector<int64_t> qweight_shape =
      gptq ? std::vector<int64_t>{in / per_word, out} : std::vector<int64_t>{in, out / 8};
  const std::vector<int64_t> zeros_shape = {groups, out / per_word};
  const std::string what = " (" + format + ", group size " + text(q.group_size) + ")";
  auto qweight = expect(prefix + ".qweight", qweight_shape, stored_type::i32);
  if (!qweight) return make_error(qweight.error_message() + what);
  auto qzeros = expect(prefix + ".qzeros", zeros_shape, stored_type::i32);
  if (!qzeros) return make_error(qzeros.error_message() + what);
  auto scales_t = expect(prefix + ".scales", {groups, out}, stored_type::f32);
  if (!scales_t) return make_error(scales_t.error_message() + what);
  packed_tensors t;
  t.scales = floats_of(**scales_t);
  t.qweight = words_of(**qweight);
  t.qzeros = words_of(**qzeros);
  if (!gptq) return t;
  if (find(prefix + ".g_idx") != nullptr) {
    auto g = expect(prefix + ".g_idx", {in}, stored_type::i32);
    if (!g) return std::move(g).take_error();
    t.g_idx = words_of(**g);
    for (int64_t i = 0; i < in; ++i) {
      if (t.g_idx[static_cast<size_t>(i)] < 0 || t.g_idx[static_cast<size_t>(i)] >= groups) {
        return make_error("tensor '" + prefix + ".g_idx' in " + (*g)->file + ": input " + text(i) + " is in group " +
                          text(t.g_idx[static_cast<size_t>(i)]) + ", outside [0, " + text(groups) + ")");
      }
    }
  } else if (q.desc_act) {  // act-order's groups are permuted: only g_idx says where
    return make_error("missing tensor '" + prefix + ".g_idx' (looked in " + file_list_ + "), which act-order "
                      "(desc_act) GPTQ needs");
  } else {
    t.g_idx.resize(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) t.g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i / group);
  }
  return t;
}

status checkpoint::read_packed(const std::string& prefix, int64_t out, int64_t in, float* w) const {
  auto t = read_packed_tensors(prefix, out, in);
  if (!t) return std::move(t).take_error();
  const quant_config& q = quant_;
  if (q.kind == quant_config::method::awq) {
    awq_dequantize(t->qweight.data(), t->qzeros.data(), t->scales.data(), in, out, q.group_size, w);
    return {};
  }
  gptq_dequantize(t->qweight.data(), t->qzeros.data(), t->scales.data(), t->g_idx.data(), in, out, q.bits,
                  q.zeros_minus_one, w);
  return {};
}

result<packed_linear> checkpoint::read_packed_linear(const std::string& name, int64_t out, int64_t in) const {
  const std::string suffix = ".weight";
  const std::string prefix =
      name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
          ? name.substr(0, name.size() - suffix.size())
          : name;
  if (std::string why; !packable(quant_, out, in, &why)) return make_error("'" + prefix + "': not packable: " + why);
  auto t = read_packed_tensors(prefix, out, in);
  if (!t) return std::move(t).take_error();
  const quant_config& q = quant_;
  if (q.kind == quant_config::method::awq) {
    return pack_awq(t->qweight.data(), t->qzeros.data(), t->scales.data(), in, out, q.group_size);
  }
  return pack_gptq(t->qweight.data(), t->qzeros.data(), t->scales.data(), t->g_idx.data(), in, out, q.bits,
                   q.group_size, q.zeros_minus_one, prefix);
}

result<fp8_codes> checkpoint::read_fp8_linear(const std::string& name, int64_t out, int64_t in) const {
  const quant_config& q = quant_;
  TROUPE_CHECK(q.kind == quant_config::method::fp8);
  if (q.online) {  // a float checkpoint
    auto w = expect(name, {out, in}, stored_type::f32);
    if (!w) return std::move(w).take_error();
    const int64_t b0 = q.block_out, b1 = q.fp8_block_in(in);
    fp8_codes r;
    r.codes.resize(static_cast<size_t>(out * in));
    r.scales.resize(static_cast<size_t>(((out + b0 - 1) / b0) * ((in + b1 - 1) / b1)));
    const std::vector<float> f = floats_of(**w);
    fp8_quantize_blocks(f.data(), out, in, b0, b1, r.codes.data(), r.scales.data());
    return r;
  }
  auto w = expect(name, {out, in}, stored_type::f8_e4m3);
  if (!w) return std::move(w).take_error();
  return read_fp8_codes(**w, out, in);
}

result<fp8_codes> checkpoint::read_fp8_codes(const tensor_info& weight, int64_t out, int64_t in) const {
  if (quant_.kind != quant_config::method::fp8) {
    return make_error("tensor '" + weight.name + "' in " + weight.file +
                      " is F8_E4M3, but config.json has no FP8 quantization_config");
  }
  const int64_t b0 = quant_.block_out, b1 = quant_.fp8_block_in(in);
  auto scale = expect(weight.name + "_scale_inv", {(out + b0 - 1) / b0, (in + b1 - 1) / b1}, stored_type::f32);
  if (!scale) {
    return make_error(scale.error_message() + " (block FP8, blocks of " + text(b0) + " x " + text(b1) + ")");
  }
  fp8_codes r;
  const auto* codes = static_cast<const uint8_t*>(weight.data);
  r.codes.assign(codes, codes + out * in);
  // A corrupt file: NaN codes (e4m3fn's 0x7F, 0xFF), or scales that are
  // not finite or negative (0 is a block of zeros).
  for (int64_t i = 0; i < out * in; ++i) {
    if ((r.codes[static_cast<size_t>(i)] & 0x7F) == 0x7F) {
      return make_error("tensor '" + weight.name + "' in " + weight.file + " holds a NaN code at [" +
                        text(i / in) + ", " + text(i % in) + "] (a corrupt FP8 checkpoint?)");
    }
  }
  r.scales = floats_of(**scale);
  for (size_t i = 0; i < r.scales.size(); ++i) {
    if (!std::isfinite(r.scales[i]) || r.scales[i] < 0.0f) {
      const int64_t cols = (in + b1 - 1) / b1;
      return make_error("tensor '" + weight.name + "_scale_inv' in " + (*scale)->file + " holds " +
                        std::to_string(r.scales[i]) + " at [" + text(static_cast<int64_t>(i) / cols) + ", " +
                        text(static_cast<int64_t>(i) % cols) + "] (scales are finite and not negative)");
    }
  }
  return r;
}

status checkpoint::read_fp8(const tensor_info& weight, int64_t out, int64_t in, float* w) const {
  auto f = read_fp8_codes(weight, out, in);
  if (!f) return std::move(f).take_error();
  fp8_block_dequantize(f->codes.data(), f->scales.data(), out, in, quant_.block_out, quant_.fp8_block_in(in), w);
  return {};
}

}  // namespace troupe
