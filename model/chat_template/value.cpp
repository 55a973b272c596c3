#include "model/chat_template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {

value value::undefined(std::string hint) {
  value v;
  v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

value value::none() {
  value v;
  v.kind_ = kind::none;
  return v;
}

value::value(std::string s)
    : kind_(kind::string), ptr_(std::make_shared<const std::string>(std::move(s))) {}

value::value(value_array items, bool is_tuple)
    : kind_(kind::array), tuple_(is_tuple), ptr_(std::make_shared<const value_array>(std::move(items))) {}

value::value(value_object items)
    : kind_(kind::object), ptr_(std::make_shared<const value_object>(std::move(items))) {}

value::value(std::shared_ptr<const value_function> f) : kind_(kind::function), ptr_(std::move(f)) {}

value::value(std::shared_ptr<value_native> n) : kind_(kind::native), ptr_(std::move(n)) {}

bool value::as_bool() const {
  TROUPE_CHECK(kind_ == kind::boolean);
  return int_ != 0;
}

int64_t value::as_int() const {
  TROUPE_CHECK(kind_ == kind::boolean || kind_ == kind::integer || kind_ == kind::floating);
  return kind_ == kind::floating ? static_cast<int64_t>(double_) : int_;
}

double value::as_double() const {
  TROUPE_CHECK(kind_ == kind::boolean || kind_ == kind::integer || kind_ == kind::floating);
  return kind_ == kind::floating ? double_ : static_cast<double>(int_);
}

const std::string& value::as_string() const {
  TROUPE_CHECK(kind_ == kind::string);
  return *static_cast<const std::string*>(ptr_.get());
}

const value_array& value::as_array() const {
  TROUPE_CHECK(kind_ == kind::array);
  return *static_cast<const value_array*>(ptr_.get());
}

const value_object& value::as_object() const {
  TROUPE_CHECK(kind_ == kind::object);
  return *static_cast<const value_object*>(ptr_.get());
}

std::shared_ptr<const value_function> value::as_function() const {
  TROUPE_CHECK(kind_ == kind::function);
  return std::static_pointer_cast<const value_function>(ptr_);
}

std::shared_ptr<value_native> value::as_native() const {
  TROUPE_CHECK(kind_ == kind::native);
  return std::const_pointer_cast<value_native>(std::static_pointer_cast<const value_native>(ptr_));
}

std::string value::undefined_hint() const {
  if (kind_ != kind::undefined || !ptr_) return "value is undefined";
  return *static_cast<const std::string*>(ptr_.get());
}

bool value::truthy() const {
  switch (kind_) {
    case kind::undefined:
    case kind::none: return false;
    case kind::boolean:
    case kind::integer: return int_ != 0;
    case kind::floating: return double_ != 0.0;
    case kind::string: return !as_string().empty();
    case kind::array: return !as_array().empty();
    case kind::object: return !as_object().empty();
    case kind::function: return true;
    case kind::native: return as_native()->truthy();
  }
  return false;
}

value value::member(std::string_view key) const {
  if (kind_ != kind::object) return value();
  const value* v = as_object().find(key);
  return v ? *v : value();
}

const value* value_object::find(std::string_view key) const {
  for (const entry& e : entries_) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

void value_object::set(std::string key, value v) {
  for (entry& e : entries_) {
    if (e.first == key) {
      e.second = std::move(v);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(v));
}

bool values_equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case value::kind::undefined:
    case value::kind::none: return true;
    case value::kind::string: return a.as_string() == b.as_string();
    case value::kind::array: {
      const value_array &x = a.as_array(), &y = b.as_array();
      if (a.is_tuple() != b.is_tuple() || x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case value::kind::object: {
      const value_object &x = a.as_object(), &y = b.as_object();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case value::kind::function: return a.as_function() == b.as_function();
    case value::kind::native: return a.as_native() == b.as_native();
    default: return false;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  int decpt = exponent + 1;
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return sign + out;
}

namespace {

void append_display(std::string& out, const value& v, bool repr);

void append_container(std::string& out, const value& v) {
  if (v.is_array()) {
    const value_array& items = v.as_array();
    out += v.is_tuple() ? '(' : '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      append_display(out, items[i], true);
    }
    if (v.is_tuple() && items.size() == 1) out += ',';
    out += v.is_tuple() ? ')' : ']';
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [k, item] : v.as_object()) {
    if (!first) out += ", ";
    first = false;
    out += unicode::python_repr(k);
    out += ": ";
    append_display(out, item, true);
  }
  out += '}';
}

void append_display(std::string& out, const value& v, bool repr) {
  switch (v.type()) {
    case value::kind::undefined: out += repr ? "Undefined" : ""; break;
    case value::kind::none: out += "None"; break;
    case value::kind::boolean: out += v.as_bool() ? "True" : "False"; break;
    case value::kind::integer: out += std::to_string(v.as_int()); break;
    case value::kind::floating: out += python_float_repr(v.as_double()); break;
    case value::kind::string: out += repr ? unicode::python_repr(v.as_string()) : v.as_string(); break;
    case value::kind::array:
    case value::kind::object: append_container(out, v); break;
    case value::kind::function: out += "<function " + v.as_function()->name() + ">"; break;
    case value::kind::native: out += v.as_native()->repr(); break;
  }
}

}  // namespace

std::string to_display_string(const value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_display(out, v, false);
  return out;
}

std::string to_repr(const value& v) {
  std::string out;
  append_display(out, v, true);
  return out;
}

}  // namespace troupe
