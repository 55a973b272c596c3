// Attribute, item and slice access with the fallbacks of Jinja's sandboxed
// environment: x.name tries the Python attribute (methods) and then the
// item; x[key] tries the item and then, for string keys, the attribute; a
// miss gives an undefined carrying Jinja's hint, a miss on an undefined
// object raises it.
#include <cmath>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {
namespace {

value missing_attribute(const value& obj, const std::string& name) {
  return value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

value missing_element(const value& obj, const value& key) {
  if (key.is_string()) return missing_attribute(obj, key.as_string());
  return value::undefined(object_type_repr(obj) + " has no element " + to_repr(key));
}

// Python index normalisation; false when out of range.
bool normalize_index(int64_t& i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  return i >= 0 && i < static_cast<int64_t>(size);
}

value string_at(const std::string& s, int64_t i) {
  if (unicode::is_ascii(s)) {
    if (!normalize_index(i, s.size())) return value();
    return value(s.substr(static_cast<size_t>(i), 1));
  }
  std::vector<size_t> offsets = unicode::code_point_offsets(s);
  if (!normalize_index(i, offsets.size() - 1)) return value();
  size_t k = static_cast<size_t>(i);
  return value(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
}

int64_t slice_bound(const value& v, int64_t fallback) {
  if (v.is_none() || v.is_undefined()) return fallback;
  if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None or have an __index__ method");
  return v.as_int();
}

// The positions a Python slice selects (PySlice_AdjustIndices).
std::vector<size_t> slice_positions(size_t length, const value& start_v, const value& stop_v,
                                    const value& step_v) {
  int64_t len = static_cast<int64_t>(length);
  int64_t step = slice_bound(step_v, 1);
  if (step == 0) fail("slice step cannot be zero");
  auto adjust = [&](const value& v, int64_t fallback) {
    if (v.is_none() || v.is_undefined()) return fallback;
    int64_t i = slice_bound(v, 0);
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? len - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : len);
  std::vector<size_t> positions;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) positions.push_back(static_cast<size_t>(i));
  return positions;
}

}  // namespace

value get_attribute(const value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_native()) return obj.as_native()->get_attr(name);
  if (std::optional<value> method = method_attribute(obj, name)) return *method;
  if (obj.is_object()) {
    if (const value* v = obj.as_object().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

value get_item(const value& obj, const value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_object() && key.is_string()) {
    if (const value* v = obj.as_object().find(key.as_string())) return *v;
  } else if (obj.is_array() && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (normalize_index(i, obj.as_array().size())) return obj.as_array()[static_cast<size_t>(i)];
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    value v = string_at(obj.as_string(), key.as_int());
    if (!v.is_undefined()) return v;
  }
  if (key.is_string()) {
    if (obj.is_native()) return obj.as_native()->get_attr(key.as_string());
    if (std::optional<value> method = method_attribute(obj, key.as_string())) return *method;
  }
  return missing_element(obj, key);
}

value slice_value(const value& obj, const value& start, const value& stop, const value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_array()) {
    const value_array& items = obj.as_array();
    value_array out;
    for (size_t i : slice_positions(items.size(), start, stop, step)) out.push_back(items[i]);
    return value(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::vector<size_t> offsets = unicode::code_point_offsets(s);
    std::string out;
    for (size_t i : slice_positions(offsets.size() - 1, start, stop, step)) {
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return out;
  }
  // Jinja indexes slices directly (no environment fallback): Python's errors.
  if (obj.is_object()) fail("unhashable type: 'slice'");
  if (obj.is_native()) fail("'" + obj.as_native()->type_name() + "' object is not subscriptable");
  fail("'" + python_type_name(obj) + "' object is not subscriptable");
}

}  // namespace troupe
