// json_writer: a small streaming JSON writer (objects, arrays, strings with
// full escaping, integers, floats that round-trip). Used for command output
// and, later, HTTP responses. Not thread-safe; one writer per document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view k);
  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(int64_t v);
  json_writer& value(int32_t v) { return value(static_cast<int64_t>(v)); }
  json_writer& value(uint64_t v);
  json_writer& value(double v);  // NaN / inf are written as null
  json_writer& value(float v) { return value(static_cast<double>(v)); }
  json_writer& value(bool v);
  json_writer& null();
  template <class T>
  json_writer& array(const std::vector<T>& items) {
    begin_array();
    for (const T& item : items) value(item);
    return end_array();
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

// Appends s to out as a quoted JSON string.
void append_json_string(std::string& out, std::string_view s);

}  // namespace troupe
