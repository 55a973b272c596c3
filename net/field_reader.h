// field_reader: optional fields of one parsed JSON request object, read
// with their types checked; each problem an api_error (400) naming the
// field. Absent or null leaves the target unchanged. A key given twice
// takes its last value (as Python's json and so vLLM do). Shared by the
// request parsers (openai_request.cpp, structured_request.cpp).
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/api_error.h"

namespace troupe {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;
using maybe_error = std::optional<api_error>;

inline api_error type_error(std::string_view key, std::string_view expected) {
  return bad_request(std::string(key) + ": expected " + std::string(expected), std::string(key));
}

inline api_error out_of_range(std::string_view key, const std::string& value) {
  return bad_request(std::string(key) + ": " + value + " is out of range", std::string(key));
}

inline std::string format_double(double d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", d);
  return text;
}

// REQUIRES: x.is_int64(). An id beyond int32_t is out of range, not wrapped
// (2^32 + 1 must not become token 1).
inline maybe_error push_token_id(std::string_view key, element x, std::vector<int32_t>& out) {
  const int64_t id = int64_t(x);
  if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
    return out_of_range(key, "token id " + std::to_string(id));
  }
  out.push_back(static_cast<int32_t>(id));
  return std::nullopt;
}

// Reads optional fields of one JSON object; absent or null leaves the target
// unchanged. A key given twice takes its last value, for every field (as
// Python's json and so vLLM do).
class field_reader {
 public:
  explicit field_reader(object obj) {
    for (auto [key, value] : obj) {
      if (fields_.count(key) == 0) order_.push_back(key);
      fields_[key] = value;  // later duplicates replace earlier
    }
  }

  // The first key not in `known` (in the body's order), or "".
  std::string first_unknown(const std::vector<std::string_view>& known) const {
    for (const auto& key : order_) {
      if (std::find(known.begin(), known.end(), key) == known.end()) return std::string(key);
    }
    return "";
  }

  bool has(std::string_view key) const {
    element e;
    return get(key, e);
  }
  bool get(std::string_view key, element& e) const {
    auto it = fields_.find(key);
    if (it == fields_.end() || it->second.is_null()) return false;
    e = it->second;
    return true;
  }

  maybe_error read_int(std::string_view key, int64_t& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (e.is_int64()) { out = int64_t(e); return std::nullopt; }
    if (e.is_uint64()) return out_of_range(key, std::to_string(uint64_t(e)));
    if (e.is_double()) {  // 16.0 is accepted as 16, as pydantic does
      const double d = double(e);
      if (d == std::trunc(d)) {
        // Casting a double outside [-2^63, 2^63) to int64_t is undefined.
        if (d < -0x1p63 || d >= 0x1p63) return out_of_range(key, format_double(d));
        out = static_cast<int64_t>(d);
        return std::nullopt;
      }
    }
    return type_error(key, "an integer");
  }
  template <class I>
  maybe_error read_small_int(std::string_view key, I& out) const {
    int64_t v = out;
    if (auto e = read_int(key, v)) return e;
    if (v < std::numeric_limits<I>::min() || v > std::numeric_limits<I>::max()) {
      return out_of_range(key, std::to_string(v));
    }
    out = static_cast<I>(v);
    return std::nullopt;
  }
  maybe_error read_float(std::string_view key, float& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (!e.is_number()) return type_error(key, "a number");
    out = static_cast<float>(double(e));
    return std::nullopt;
  }
  maybe_error read_bool(std::string_view key, bool& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (!e.is_bool()) return type_error(key, "a boolean");
    out = bool(e);
    return std::nullopt;
  }
  maybe_error read_string(std::string_view key, std::string& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (!e.is_string()) return type_error(key, "a string");
    out = std::string(std::string_view(e));
    return std::nullopt;
  }
  maybe_error read_ids(std::string_view key, std::vector<int32_t>& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (!e.is_array()) return type_error(key, "a list of integers");
    for (element x : e.get_array()) {
      if (!x.is_int64()) return type_error(key, "a list of integers");
      if (auto err = push_token_id(key, x, out)) return err;
    }
    return std::nullopt;
  }
  // A string or a list of strings.
  maybe_error read_strings(std::string_view key, std::vector<std::string>& out) const {
    element e;
    if (!get(key, e)) return std::nullopt;
    if (e.is_string()) { out.emplace_back(std::string_view(e)); return std::nullopt; }
    if (!e.is_array()) return type_error(key, "a string or a list of strings");
    for (element x : e.get_array()) {
      if (!x.is_string()) return type_error(key, "a string or a list of strings");
      out.emplace_back(std::string_view(x));
    }
    return std::nullopt;
  }

 private:
  std::unordered_map<std::string_view, element> fields_;  // views into the parsed document
  std::vector<std::string_view> order_;                    // keys in the body's order
};

}  // namespace troupe
