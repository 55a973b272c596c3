// safetensors reading (mmap + simdjson DOM header, error codes only: nothing
// here throws), sharded checkpoints, dtype conversions and dummy weights.
#include "model/weights.h"

#include "common/file_util.h"
#include "model/fp8_linear.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace troupe {
namespace {

namespace fs = std::filesystem;
using simdjson::dom::element;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A JSON array of non-negative integers.
bool read_uint_array(element e, std::vector<uint64_t>& out) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) != simdjson::SUCCESS) return false;
  for (element item : arr) {
    uint64_t v = 0;
    if (item.get_uint64().get(v) != simdjson::SUCCESS) return false;
    out.push_back(v);
  }
  return true;
}

// Describes one header entry; data points at the start of the data section.
status parse_tensor_entry(std::string_view name, element entry, const uint8_t* data,
                          size_t data_size, const std::string& file, tensor_info& info) {
  const std::string tensor = "tensor '" + std::string(name) + "'";
  auto corrupt = [&](const std::string& why) {
    return make_error(file + ": corrupt header (" + tensor + " " + why + ")");
  };
  if (!entry.is_object()) return corrupt("is not an object");
  std::string_view dtype_text;
  if (entry["dtype"].get_string().get(dtype_text) != simdjson::SUCCESS) return corrupt("has no dtype");
  bool known = false;
  for (stored_type t : {stored_type::f32, stored_type::bf16, stored_type::f16, stored_type::i32,
                        stored_type::f8_e4m3}) {
    if (dtype_text == stored_type_name(t)) {
      info.type = t;
      known = true;
    }
  }
  if (!known) {
    return make_error(file + ": " + tensor + " has unsupported dtype '" + std::string(dtype_text) +
                      "' (supported: F32, BF16, F16, and I32, F8_E4M3 in quantized checkpoints)");
  }
  std::vector<uint64_t> shape, offsets;
  element shape_e, offsets_e;
  if (entry["shape"].get(shape_e) != simdjson::SUCCESS || !read_uint_array(shape_e, shape)) {
    return corrupt("has an invalid shape");
  }
  if (entry["data_offsets"].get(offsets_e) != simdjson::SUCCESS ||
      !read_uint_array(offsets_e, offsets) || offsets.size() != 2) {
    return corrupt("has invalid data_offsets");
  }
  uint64_t needed = stored_type_size(info.type);
  for (uint64_t d : shape) {
    if (d > uint64_t(INT64_MAX) || __builtin_mul_overflow(needed, d, &needed)) {
      return corrupt("has an invalid shape");
    }
    info.shape.push_back(int64_t(d));
  }
  const uint64_t begin = offsets[0], end = offsets[1];
  if (begin > end || end > data_size) {
    return make_error(file + ": " + tensor + " has data_offsets [" + std::to_string(begin) + ", " +
                      std::to_string(end) + "] outside the data section (" +
                      std::to_string(data_size) + " bytes)");
  }
  if (end - begin != needed) {
    return make_error(file + ": " + tensor + " has " + std::to_string(end - begin) +
                      " bytes of data but shape " + shape_string(info.shape) + " of " +
                      std::string(dtype_text) + " needs " + std::to_string(needed));
  }
  info.name = std::string(name);
  info.data = data + begin;
  info.nbytes = size_t(needed);
  info.file = file;
  return {};
}

// Parses the JSON header of a mapped file into tensors.
status parse_header(const uint8_t* map, size_t map_size, const std::string& file,
                    std::map<std::string, tensor_info>& tensors) {
  if (map_size < 8) {
    return make_error(file + ": corrupt header (file is " + std::to_string(map_size) +
                      " bytes, too short for the header length)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map[i];  // little-endian
  if (header_len > map_size - 8) {
    return make_error(file + ": corrupt header (header length " + std::to_string(header_len) +
                      " exceeds file size " + std::to_string(map_size) + ")");
  }
  simdjson::dom::parser parser;
  element root;
  simdjson::dom::object header;
  if (parser.parse(reinterpret_cast<const char*>(map + 8), size_t(header_len)).get(root) !=
      simdjson::SUCCESS) {
    return make_error(file + ": corrupt header (not valid JSON)");
  }
  if (root.get_object().get(header) != simdjson::SUCCESS) {
    return make_error(file + ": corrupt header (not a JSON object)");
  }
  const uint8_t* data = map + 8 + header_len;
  const size_t data_size = map_size - 8 - size_t(header_len);
  for (auto field : header) {
    if (field.key == "__metadata__") continue;
    tensor_info info;
    if (auto s = parse_tensor_entry(field.key, field.value, data, data_size, file, info); !s) {
      return s;
    }
    tensors[info.name] = std::move(info);
  }
  return {};
}


// The weight_map of model.safetensors.index.json: tensor name -> shard file.
result<std::map<std::string, std::string>> read_weight_map(const fs::path& index_path) {
  const std::string source = index_path.string();
  auto read = read_text_file(index_path);
  if (!read) return std::move(read).take_error();
  const std::string& text = read.value();
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS) {
    return make_error(source + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  simdjson::dom::object weight_map;
  if (root["weight_map"].get_object().get(weight_map) != simdjson::SUCCESS) {
    return make_error(source + ": missing 'weight_map' (an object of tensor name -> file)");
  }
  std::map<std::string, std::string> out;
  for (auto field : weight_map) {
    std::string_view shard;
    if (field.value.get_string().get(shard) != simdjson::SUCCESS) {
      return make_error(source + ": 'weight_map." + std::string(field.key) + "' must be a string");
    }
    out[std::string(field.key)] = std::string(shard);
  }
  return out;
}

// The .safetensors files of a folder without an index: model.safetensors,
// else every *.safetensors, sorted.
std::vector<fs::path> find_safetensors(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "model.safetensors", ec)) return {dir / "model.safetensors"};
  std::vector<fs::path> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

}  // namespace

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
    case dtype::fp8_e4m3: return "F8_E4M3";
  }
  return "?";
}

size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::bf16:
    case dtype::f16: return 2;
    case dtype::fp8_e4m3: return 1;
  }
  return 4;
}

const char* stored_type_name(stored_type t) {
  switch (t) {
    case stored_type::f32: return "F32";
    case stored_type::bf16: return "BF16";
    case stored_type::f16: return "F16";
    case stored_type::i32: return "I32";
    case stored_type::f8_e4m3: return "F8_E4M3";
  }
  return "?";
}

size_t stored_type_size(stored_type t) {
  switch (t) {
    case stored_type::f32: case stored_type::i32: return 4;
    case stored_type::bf16: case stored_type::f16: return 2;
    case stored_type::f8_e4m3: return 1;
  }
  return 1;
}

bool is_float_type(stored_type t) {
  return t == stored_type::f32 || t == stored_type::bf16 || t == stored_type::f16;
}

void tensor_to_f32(const tensor_info& t, float* out) {
  const auto* src = static_cast<const uint8_t*>(t.data);
  const size_t n = t.nbytes / stored_type_size(t.type);
  if (t.type == stored_type::f32) {
    if (n) std::memcpy(out, src, t.nbytes);  // the data may be unaligned
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    out[i] = t.type == stored_type::bf16 ? bf16_to_f32(v) : f16_to_f32(v);
  }
}

result<std::shared_ptr<safetensors_file>> safetensors_file::open(const fs::path& path) {
  const std::string file = path.filename().string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open '" + path.string() + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error("cannot stat '" + path.string() + "': " + std::strerror(err));
  }
  std::shared_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = path;
  f->map_size_ = size_t(st.st_size);
  if (f->map_size_ > 0) {
    void* m = ::mmap(nullptr, f->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return make_error("cannot map '" + path.string() + "': " + std::strerror(err));
    }
    f->map_ = m;
  }
  ::close(fd);  // the mapping keeps the file alive
  if (auto s = parse_header(static_cast<const uint8_t*>(f->map_), f->map_size_, file, f->tensors_); !s) {
    return std::move(s).take_error();
  }
  return f;
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, map_size_);
}

result<checkpoint> checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error("model folder '" + dir.string() + "' does not exist");
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<fs::path> paths;
  if (fs::exists(index_path, ec)) {
    auto wm = read_weight_map(index_path);
    if (!wm) return std::move(wm).take_error();
    weight_map = std::move(wm.value());
    std::set<std::string> shards;
    for (const auto& [name, shard] : weight_map) shards.insert(shard);
    for (const auto& shard : shards) {
      if (!fs::is_regular_file(dir / shard, ec)) {
        return make_error("shard '" + shard + "' listed in " + index_path.string() + " does not exist");
      }
      paths.push_back(dir / shard);
    }
    if (paths.empty()) return make_error(index_path.string() + ": 'weight_map' is empty");
  } else {
    paths = find_safetensors(dir);
    if (paths.empty()) return make_error("no .safetensors files in '" + dir.string() + "'");
  }

  checkpoint ckpt;
  for (const auto& path : paths) {
    auto file = safetensors_file::open(path);
    if (!file) return std::move(file).take_error();
    ckpt.files_.push_back(std::move(file.value()));
    const auto& f = *ckpt.files_.back();
    for (const auto& [name, info] : f.tensors()) {
      auto [it, inserted] = ckpt.by_name_.emplace(name, &info);
      if (!inserted) {
        return make_error("tensor '" + name + "' is in both " + it->second->file + " and " + info.file);
      }
    }
    ckpt.file_list_ += (ckpt.file_list_.empty() ? "" : ", ") + path.filename().string();
  }
  for (const auto& [name, shard] : weight_map) {
    const tensor_info* t = ckpt.find(name);
    if (!t || t->file != fs::path(shard).filename().string()) {
      return make_error(index_path.string() + ": tensor '" + name + "' is mapped to '" + shard +
                        "', which does not contain it");
    }
  }
  return ckpt;
}

const tensor_info* checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, info] : by_name_) out.push_back(name);
  return out;
}

status checkpoint::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                            float* out) const {
  const tensor_info* t = find(name);
  const std::string suffix = ".weight";
  if (t == nullptr && shape.size() == 2 && name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string prefix = name.substr(0, name.size() - suffix.size());
    if (find(prefix + ".qweight") != nullptr) {
      if (quant_.integer_codes()) {
        return read_packed(prefix, shape[0], shape[1], out);
      }
      return make_error("tensor '" + prefix + ".qweight' is a packed (GPTQ / AWQ) weight, but config.json has "
                        "no GPTQ or AWQ quantization_config");
    }
  }
  if (t != nullptr && t->type == stored_type::f8_e4m3 && shape.size() == 2 && t->shape == shape) {
    return read_fp8(*t, shape[0], shape[1], out);
  }
  auto checked = expect(name, shape, stored_type::f32);
  if (!checked) return std::move(checked).take_error();
  tensor_to_f32(**checked, out);
  if (quant_.kind == quant_config::method::fp8 && quant_.online && shape.size() == 2 && fp8_quantizes(name)) {
    fp8_round_trip(out, shape[0], shape[1], quant_);  // the weights online FP8 computes with
  }
  return {};
}

result<const tensor_info*> checkpoint::expect(const std::string& name, const std::vector<int64_t>& shape,
                                              stored_type type) const {
  const tensor_info* t = find(name);
  if (!t) return make_error("missing tensor '" + name + "' (looked in " + file_list_ + ")");
  if (t->shape != shape) {
    return make_error("tensor '" + name + "' in " + t->file + " has shape " + shape_string(t->shape) +
                      ", expected " + shape_string(shape));
  }
  const bool ok = type == stored_type::f32 ? is_float_type(t->type) : t->type == type;
  if (!ok) {
    return make_error("tensor '" + name + "' in " + t->file + " is " + stored_type_name(t->type) + ", expected " +
                      (type == stored_type::f32 ? std::string("a float tensor (F32, BF16, F16)")
                                                : std::string(stored_type_name(type))));
  }
  return t;
}

uint64_t dummy_key(int64_t seed, const std::string& name) {
  return splitmix64(uint64_t(seed) ^ fnv1a(name));
}

uint64_t dummy_key_at(uint64_t key, int64_t first) {
  return key + uint64_t(first) * 0xD1B54A32D192ED03ull;
}

void fill_dummy_f32(uint64_t key, float* out, size_t n, float scale, float offset) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = splitmix64(dummy_key_at(key, static_cast<int64_t>(i)));
    // 24 random bits -> u in [0, 1] with both ends reachable, then [-scale, scale].
    const float u = float(bits >> 40) / float((1u << 24) - 1);
    const float v = (2.0f * u - 1.0f) * scale;
    out[i] = v + offset;
  }
}

void fill_dummy_f32(int64_t seed, const std::string& name, float* out, size_t n, float scale) {
  fill_dummy_f32(dummy_key(seed, name), out, n, scale, 0.0f);
}

float bf16_to_f32(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f16_to_f32(uint16_t v) {
  const uint32_t sign = uint32_t(v & 0x8000u) << 16;
  uint32_t exp = (v >> 10) & 0x1Fu;
  uint32_t mant = v & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: shift the mantissa up until its leading one is the implicit bit.
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

uint16_t f32_to_f16(float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

}  // namespace troupe
