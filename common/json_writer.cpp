#include "common/json_writer.h"

#include <cmath>
#include <cstdio>

namespace troupe {

void append_json_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out.push_back(hex[(c >> 4) & 0xf]);
          out.push_back(hex[c & 0xf]);
        } else {
          out.push_back(c);  // UTF-8 passes through unchanged
        }
    }
  }
  out.push_back('"');
}

void json_writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  separate();
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_object() {
  out_.push_back('}');
  first_.pop_back();
  return *this;
}

json_writer& json_writer::begin_array() {
  separate();
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_array() {
  out_.push_back(']');
  first_.pop_back();
  return *this;
}

json_writer& json_writer::key(std::string_view k) {
  separate();
  append_json_string(out_, k);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  separate();
  append_json_string(out_, s);
  return *this;
}

json_writer& json_writer::value(int64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}

json_writer& json_writer::value(uint64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}

json_writer& json_writer::value(double v) {
  separate();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  out_ += buf;
  return *this;
}

json_writer& json_writer::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
  return *this;
}

json_writer& json_writer::null() {
  separate();
  out_ += "null";
  return *this;
}

}  // namespace troupe
