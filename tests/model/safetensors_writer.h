// Test helper: safetensors files written byte by byte (header length,
// JSON header, data), well-formed or exactly as given, for the loader's
// tests (weights_test, quantization_test).
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace troupe::safetensors_writing {

namespace fs = std::filesystem;

using bytes = std::vector<uint8_t>;

inline bytes u16_bytes(std::initializer_list<uint16_t> values) {
  bytes b;
  for (uint16_t v : values) b.insert(b.end(), {uint8_t(v & 0xFF), uint8_t(v >> 8)});
  return b;
}

inline bytes f32_bytes(std::initializer_list<float> values) {
  bytes b;
  for (float f : values) {
    const uint32_t v = std::bit_cast<uint32_t>(f);
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  return b;
}

struct raw_tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  bytes data;
};

// Writes header length, header and data exactly as given.
inline void write_raw(const fs::path& path, uint64_t header_len, const std::string& header, const bytes& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(char(header_len >> (8 * i)));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

// A well-formed file: tensors laid out back to back in the given order.
inline void write_safetensors(const fs::path& path, const std::vector<raw_tensor>& tensors) {
  std::string header = R"({"__metadata__": {"format": "pt"})";
  bytes data;
  for (const auto& t : tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    header += ", \"" + t.name + "\": {\"dtype\": \"" + t.dtype + "\", \"shape\": [" + shape +
              "], \"data_offsets\": [" + std::to_string(data.size()) + ", " +
              std::to_string(data.size() + t.data.size()) + "]}";
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  header += "}";
  write_raw(path, header.size(), header, data);
}

}  // namespace troupe::safetensors_writing
