// JSON in and out of value: simdjson DOM parsing, and a writer that
// reproduces Python's json.dumps byte for byte (separators, indent,
// ensure_ascii, sort_keys, float repr, NaN / Infinity).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <simdjson.h>

#include "model/chat_template/unicode.h"
#include "model/chat_template/value.h"

namespace troupe {
namespace {

result<value> from_element(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return value::none();
    case element_type::BOOL: return value(e.get_bool().value_unsafe());
    case element_type::INT64: return value(e.get_int64().value_unsafe());
    case element_type::UINT64: return value(static_cast<double>(e.get_uint64().value_unsafe()));
    case element_type::DOUBLE: return value(e.get_double().value_unsafe());
    case element_type::STRING: return value(std::string(e.get_string().value_unsafe()));
    case element_type::ARRAY: {
      value_array items;
      simdjson::dom::array array;
      if (e.get_array().get(array)) return make_error("malformed JSON array");
      for (simdjson::dom::element child : array) {
        result<value> item = from_element(child);
        if (!item) return item;
        items.push_back(std::move(item).value());
      }
      return value(std::move(items));
    }
    case element_type::OBJECT: {
      value_object fields;
      simdjson::dom::object object;
      if (e.get_object().get(object)) return make_error("malformed JSON object");
      for (simdjson::dom::key_value_pair field : object) {
        result<value> item = from_element(field.value);
        if (!item) return item;
        fields.set(std::string(field.key), std::move(item).value());
      }
      return value(std::move(fields));
    }
  }
  return make_error("unsupported JSON element");
}

void append_json_escaped(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t cp = unicode::decode(s, pos);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f && cp < 0x10000)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (ensure_ascii && cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

class json_dumper {
 public:
  json_dumper(const json_format& f, std::string& out) : f_(f), out_(out) {}

  void dump(const value& v, int level) {
    switch (v.type()) {
      case value::kind::none:
      case value::kind::undefined:
      case value::kind::function:
      case value::kind::native: out_ += "null"; break;
      case value::kind::boolean: out_ += v.as_bool() ? "true" : "false"; break;
      case value::kind::integer: out_ += std::to_string(v.as_int()); break;
      case value::kind::floating: dump_float(v.as_double()); break;
      case value::kind::string: append_json_escaped(out_, v.as_string(), f_.ensure_ascii); break;
      case value::kind::array: dump_array(v.as_array(), level); break;
      case value::kind::object: dump_object(v.as_object(), level); break;
    }
  }

 private:
  void dump_float(double d) {
    if (std::isnan(d)) out_ += "NaN";
    else if (std::isinf(d)) out_ += d < 0 ? "-Infinity" : "Infinity";
    else out_ += python_float_repr(d);
  }

  void newline(int level) {
    if (!f_.indent) return;
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += *f_.indent;
  }

  void dump_array(const value_array& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += f_.item_separator;
      newline(level + 1);
      dump(items[i], level + 1);
    }
    newline(level);
    out_ += ']';
  }

  void dump_object(const value_object& fields, int level) {
    if (fields.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const value_object::entry*> order;
    for (const auto& e : fields) order.push_back(&e);
    if (f_.sort_keys) {
      std::stable_sort(order.begin(), order.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out_ += f_.item_separator;
      newline(level + 1);
      append_json_escaped(out_, order[i]->first, f_.ensure_ascii);
      out_ += f_.key_separator;
      dump(order[i]->second, level + 1);
    }
    newline(level);
    out_ += '}';
  }

  const json_format& f_;
  std::string& out_;
};

// simdjson rejects integers beyond 64 bits, which Python accepts (e.g.
// model_max_length 1000000000000000019884624838656): turn those into floats.
std::string widen_big_integers(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string || c == '"') {
      out += c;
      if (in_string && c == '\\' && i + 1 < json.size()) out += json[++i];
      else if (c == '"') in_string = !in_string;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) {
      out += c;
      continue;
    }
    size_t end = i + 1, digits = c == '-' ? 0 : 1;
    bool integer = true;
    for (; end < json.size(); ++end) {
      char d = json[end];
      if (d >= '0' && d <= '9') ++digits;
      else if (d == '.' || d == 'e' || d == 'E' || d == '+' || d == '-') integer = false;
      else break;
    }
    out.append(json.substr(i, end - i));
    if (integer && digits > 18) out += ".0";
    i = end - 1;
  }
  return out;
}

result<value> parse_document(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root); err) {
    return make_error(std::string("invalid JSON: ") + simdjson::error_message(err));
  }
  return from_element(root);
}

}  // namespace

result<value> parse_json_value(std::string_view json) {
  result<value> v = parse_document(json);
  if (v.ok() || v.error_message().find("number") == std::string::npos) return v;
  result<value> widened = parse_document(widen_big_integers(json));
  return widened.ok() ? std::move(widened) : std::move(v);
}

std::string to_json(const value& v, const json_format& format) {
  std::string out;
  json_dumper(format, out).dump(v, 0);
  return out;
}

bool json_serializable(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
    case value::kind::function:
    case value::kind::native: return false;
    case value::kind::array:
      return std::all_of(v.as_array().begin(), v.as_array().end(),
                         [](const value& item) { return json_serializable(item); });
    case value::kind::object:
      return std::all_of(v.as_object().begin(), v.as_object().end(),
                         [](const auto& e) { return json_serializable(e.second); });
    default: return true;
  }
}

}  // namespace troupe
