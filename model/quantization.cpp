#include "model/quantization.h"

#include <simdjson.h>

#include <cctype>
#include <cmath>
#include <cstring>

#include "model/config_fields.h"

namespace troupe {

const char* quant_method_name(quant_config::method m) {
  switch (m) {
    case quant_config::method::gptq: return "gptq";
    case quant_config::method::awq: return "awq";
    case quant_config::method::fp8: return "fp8";
    default: return "none";
  }
}

namespace {

using config_fields::field_reader;

// "SOURCE: 'quantization_config.KEY': WHAT".
error problem(const field_reader& f, std::string_view key, const std::string& what) {
  return f.fail(f.quoted(key) + ": " + what);
}

result<quant_config> read_gptq_awq(const field_reader& f, quant_config c) {
  const bool gptq = c.kind == quant_config::method::gptq;
  MODEL_CONFIG_TRY(bits, f.get_int("bits"));
  if (!bits) return problem(f, "bits", "required");
  if (gptq ? *bits != 4 && *bits != 8 : *bits != 4) {
    return problem(f, "bits", std::to_string(*bits) + " is not supported (" + (gptq ? "GPTQ: 4 or 8" : "AWQ: 4") + ")");
  }
  c.bits = static_cast<int>(*bits);
  MODEL_CONFIG_TRY(group, f.get_int("group_size"));
  c.group_size = group.value_or(-1);
  if (c.group_size == 0 || c.group_size < -1) {
    return problem(f, "group_size", std::to_string(c.group_size) + " must be positive or -1");
  }
  if (gptq) {
    MODEL_CONFIG_TRY(desc_act, f.get_bool("desc_act"));
    c.desc_act = desc_act.value_or(false);
    MODEL_CONFIG_TRY(format, f.get_string("checkpoint_format"));
    const std::string name = format.value_or("gptq");
    if (name != "gptq" && name != "gptq_v2") {
      return problem(f, "checkpoint_format", "'" + name + "' is not supported (gptq, gptq_v2)");
    }
    c.zeros_minus_one = name == "gptq";
    return c;
  }
  MODEL_CONFIG_TRY(version, f.get_string("version"));
  std::string v = version.value_or("gemm");
  for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (v != "gemm") return problem(f, "version", "'" + v + "' is not supported (gemm)");
  MODEL_CONFIG_TRY(zero_point, f.get_bool("zero_point"));
  if (!zero_point.value_or(true)) {
    return problem(f, "zero_point", "false is not supported (AWQ with zero points only)");
  }
  return c;
}

result<quant_config> read_block_fp8(const field_reader& f, quant_config c) {
  MODEL_CONFIG_TRY(fmt, f.get_string("fmt"));
  if (fmt.value_or("e4m3") != "e4m3") return problem(f, "fmt", "'" + *fmt + "' is not supported (e4m3)");
  MODEL_CONFIG_TRY(scheme, f.get_string("activation_scheme"));
  if (scheme.value_or("dynamic") != "dynamic") {
    return problem(f, "activation_scheme", "'" + *scheme + "' is not supported (dynamic)");
  }
  MODEL_CONFIG_TRY(block, f.get_ints("weight_block_size"));
  if (!block) {
    return problem(f, "weight_block_size", "required (block FP8; per-tensor FP8 checkpoints are not supported yet)");
  }
  if (block->size() != 2 || (*block)[0] <= 0 || (*block)[1] <= 0) {
    return problem(f, "weight_block_size", "must be two positive integers");
  }
  c.block_out = (*block)[0];
  c.block_in = (*block)[1];
  return c;
}

result<quant_config> read_quant_config(simdjson::dom::object o, const std::string& source,
                                       const std::string& default_method) {
  const field_reader f(o, source, "quantization_config.");
  MODEL_CONFIG_TRY(method_key, f.get_string("quant_method"));
  const std::string method = method_key.value_or(default_method);
  quant_config c;
  if (method == "gptq" || method == "awq") {
    c.kind = method == "gptq" ? quant_config::method::gptq : quant_config::method::awq;
    return read_gptq_awq(f, c);
  }
  if (method == "fp8") {
    c.kind = quant_config::method::fp8;
    return read_block_fp8(f, c);
  }
  return problem(f, "quant_method",
                 (method.empty() ? std::string("required") : "'" + method + "' is not supported") + " (gptq, awq, fp8)");
}

}  // namespace

result<quant_config> parse_quant_config(const std::string& json_text, const std::string& source,
                                        const std::string& default_method) {
  simdjson::dom::parser parser;
  simdjson::dom::object o;
  if (parser.parse(json_text).get_object().get(o) != simdjson::SUCCESS) {
    return make_error(source + ": quantization_config must be a JSON object");
  }
  return read_quant_config(o, source, default_method);
}

result<quant_config> resolve_quantization(const std::string& requested, const quant_config& checkpoint,
                                          bool dummy) {
  using m = quant_config::method;
  if (requested.empty()) return checkpoint;
  const std::string has = checkpoint.kind == m::none
                              ? std::string("config.json has no quantization_config (a float checkpoint)")
                              : std::string("config.json's quantization_config is ") + quant_method_name(checkpoint.kind);
  const std::string key = "quantization: '" + requested + "'";
  if (requested == "gptq" || requested == "gptq_marlin" || requested == "awq" || requested == "awq_marlin") {
    const m want = requested.rfind("gptq", 0) == 0 ? m::gptq : m::awq;
    if (checkpoint.kind == want) return checkpoint;
    if (checkpoint.kind == m::none && dummy) {
      quant_config q;  // 4-bit, groups of 128 (GPTQ v1, symmetric; AWQ gemm)
      q.kind = want;
      q.bits = 4;
      q.group_size = 128;
      return q;
    }
    return make_error(key + " needs " + std::string(want == m::gptq ? "a GPTQ" : "an AWQ") + " checkpoint, and " + has +
                      (checkpoint.kind == m::none ? " (load_format: dummy makes quantized dummy weights)" : ""));
  }
  if (requested == "fp8") {
    if (checkpoint.kind == m::fp8) return checkpoint;
    if (checkpoint.kind == m::none) {
      quant_config q;  // online: e4m3 codes, a scale per output row, activations per token
      q.kind = m::fp8;
      q.block_out = 1;
      q.block_in = -1;
      q.online = true;
      return q;
    }
    return make_error(key + ": " + has + " (FP8 quantizes a float checkpoint at load, or reads a block-FP8 "
                      "one; not a GPTQ or AWQ one)");
  }
  return make_error(key + " is not supported (gptq, gptq_marlin, awq, awq_marlin, fp8, or leave it unset for the "
                    "checkpoint's own)");
}

float e4m3_to_f32(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xF, mant = v & 0x7;
  float x;
  if (exp == 0xF && mant == 0x7) {
    x = std::nanf("");
  } else if (exp == 0) {
    x = std::ldexp(static_cast<float>(mant) / 8.0f, -6);
  } else {
    x = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return sign ? -x : x;
}

uint8_t f32_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  if (a >= 448.0f) return sign | 0x7E;
  if (a < 0.015625f) {  // below 2^-6: subnormals, steps of 2^-9 (8 steps reach the smallest normal)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  int exp = e - 1 + 7;
  auto mant = static_cast<int>(std::nearbyint((f * 2.0f - 1.0f) * 8.0f));
  if (mant == 8) {
    mant = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && mant == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>(exp << 3 | mant);
}

void gptq_dequantize(const int32_t* qweight, const int32_t* qzeros, const float* scales,
                     const int32_t* g_idx, int64_t in, int64_t out, int bits, bool zeros_minus_one,
                     float* w) {
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t zero_words = out / per_word;
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = g_idx[i];
    const auto* row = reinterpret_cast<const uint32_t*>(qweight) + (i / per_word) * out;
    const int shift = static_cast<int>(i % per_word) * bits;
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t q = (row[o] >> shift) & mask;
      const uint32_t zword = static_cast<uint32_t>(qzeros[g * zero_words + o / per_word]);
      uint32_t zero = (zword >> (static_cast<int>(o % per_word) * bits)) & mask;
      if (zeros_minus_one) zero = (zero + 1) & mask;
      w[o * in + i] = (static_cast<float>(q) - static_cast<float>(zero)) * scales[g * out + o];
    }
  }
}

void awq_dequantize(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in,
                    int64_t out, int64_t group_size, float* w) {
  static constexpr int nibble_of_column[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  const int64_t words = out / 8;
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = group_size < 0 ? 0 : i / group_size;
    for (int64_t o = 0; o < out; ++o) {
      const int shift = 4 * nibble_of_column[o % 8];
      const uint32_t q = (static_cast<uint32_t>(qweight[i * words + o / 8]) >> shift) & 0xF;
      const uint32_t z = (static_cast<uint32_t>(qzeros[g * words + o / 8]) >> shift) & 0xF;
      w[o * in + i] = (static_cast<float>(q) - static_cast<float>(z)) * scales[g * out + o];
    }
  }
}

void fp8_block_dequantize(const uint8_t* q, const float* scale_inv, int64_t out, int64_t in,
                          int64_t block_out, int64_t block_in, float* w) {
  const int64_t scale_cols = (in + block_in - 1) / block_in;
  for (int64_t o = 0; o < out; ++o) {
    const float* srow = scale_inv + (o / block_out) * scale_cols;
    for (int64_t i = 0; i < in; ++i) w[o * in + i] = e4m3_to_f32(q[o * in + i]) * srow[i / block_in];
  }
}

}  // namespace troupe
