// value: the data model of the chat-template interpreter, shaped after the
// Python objects that Jinja2 templates see: undefined (Jinja's Undefined,
// which carries the hint its error would print), none, bool, int (int64),
// float (double), str (UTF-8), list / tuple, dict with insertion-ordered
// string keys, callables, and native objects (namespace, loop, iterators
// and dict views).
//
// Values are cheap to copy: strings, lists and dicts are shared and
// immutable once built (the sandbox forbids mutating them); only native
// objects (namespace) are mutable, and they have reference semantics as in
// Python. Not thread-safe to mutate; a value tree built once can be read from
// many threads.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace troupe {

class value;
class value_object;
class value_function;  // callables: builtins, bound methods, macros
class value_native;    // namespace, loop, iterators, dict views (runtime.h)
using value_array = std::vector<value>;

class value {
 public:
  enum class kind : uint8_t {
    undefined, none, boolean, integer, floating, string, array, object, function, native
  };

  value() = default;  // undefined
  static value undefined(std::string hint);
  static value none();
  value(bool b) : kind_(kind::boolean), int_(b ? 1 : 0) {}
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  value(I i) : kind_(kind::integer), int_(static_cast<int64_t>(i)) {}
  value(double d) : kind_(kind::floating), double_(d) {}
  value(std::string s);
  value(std::string_view s) : value(std::string(s)) {}
  value(const char* s) : value(std::string(s)) {}
  value(value_array items, bool is_tuple = false);
  value(value_object items);
  value(std::shared_ptr<const value_function> f);
  value(std::shared_ptr<value_native> n);

  kind type() const { return kind_; }
  bool is_undefined() const { return kind_ == kind::undefined; }
  bool is_none() const { return kind_ == kind::none; }
  bool is_bool() const { return kind_ == kind::boolean; }
  bool is_int() const { return kind_ == kind::integer; }
  bool is_float() const { return kind_ == kind::floating; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == kind::string; }
  bool is_array() const { return kind_ == kind::array; }
  bool is_tuple() const { return kind_ == kind::array && tuple_; }
  bool is_object() const { return kind_ == kind::object; }
  bool is_function() const { return kind_ == kind::function; }
  bool is_native() const { return kind_ == kind::native; }

  // REQUIRES: the matching kind (as_int and as_double accept any number).
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const value_array& as_array() const;
  const value_object& as_object() const;
  std::shared_ptr<const value_function> as_function() const;
  std::shared_ptr<value_native> as_native() const;
  // The message an undefined value's error prints ("'x' is undefined").
  std::string undefined_hint() const;

  // Python truthiness (bool(x)); undefined is false.
  bool truthy() const;

  // Object helpers for building contexts: member() is undefined when absent.
  value member(std::string_view key) const;

 private:
  kind kind_ = kind::undefined;
  bool tuple_ = false;
  union {
    int64_t int_ = 0;
    double double_;
  };
  std::shared_ptr<const void> ptr_;  // string / array / object / function / native / hint
};

// A dict with insertion-ordered string keys (Python 3.7+ dict order).
class value_object {
 public:
  using entry = std::pair<std::string, value>;
  const value* find(std::string_view key) const;
  void set(std::string key, value v);  // replaces in place or appends
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<entry>& entries() const { return entries_; }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<entry> entries_;
};

// Python equality (1 == 1.0 == True, [1] != (1,), dict order ignored).
bool values_equal(const value& a, const value& b);

// str(x) as Jinja prints it: undefined -> "", none -> "None", True, 1.5, and
// Python reprs for containers ("['a', 1]", "{'k': None}", "(1,)").
std::string to_display_string(const value& v);
// repr(x): strings quoted as Python quotes them.
std::string to_repr(const value& v);
// Python's float repr: shortest round trip, "1.0", "1e+16", "1.5e-05".
std::string python_float_repr(double d);

// json.dumps options, as transformers' tojson filter passes them.
struct json_format {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // json.dumps uses "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(v) with Python's formatting. Undefined values and callables,
// which Python cannot serialise, are written as null; callers that must
// reject them check json_serializable() first.
std::string to_json(const value& v, const json_format& format = {});
bool json_serializable(const value& v);

// Parses a JSON document (simdjson DOM): integers become int (or float when
// beyond int64), keys keep their order.
result<value> parse_json_value(std::string_view json);

}  // namespace troupe
