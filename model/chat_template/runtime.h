// runtime: the interpreter's internal plumbing shared by the evaluator,
// filters, tests and methods (not part of the public interface).
//
// Evaluation errors unwind as template_error exceptions from deep inside
// expression evaluation; chat_template::render catches them and returns a
// result error, so nothing ever throws out of the public API.
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/chat_template/value.h"

namespace troupe {

struct template_error {
  std::string message;
  bool raised_by_template = false;  // raise_exception(): message is verbatim
};

[[noreturn]] void fail(std::string message);
// Jinja's UndefinedError for an operation on an undefined value.
[[noreturn]] void fail_undefined(const value& v);

struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> named;
};

// Binds call arguments to a Python-like signature: positional first, then by
// name; unknown names or too many positionals fail naming `function`.
class bound_args {
 public:
  bound_args(const call_args& args, std::string_view function,
             std::initializer_list<std::string_view> params);
  bool has(size_t i) const { return given_[i]; }
  const value& get(size_t i) const { return values_[i]; }
  value get_or(size_t i, value fallback) const { return given_[i] ? values_[i] : fallback; }

 private:
  std::vector<value> values_;
  std::vector<bool> given_;
};

class evaluator;

class value_native;

// Per-render state visible to builtins (strftime_now's clock, macro calls).
struct render_state {
  std::optional<std::tm> now;
  evaluator* eval = nullptr;
  // The namespaces made during the render, the only mutable objects and so
  // the only way to build a reference cycle (ns.self = ns); released at the
  // end of the render.
  std::vector<std::shared_ptr<value_native>> natives;
};

class value_function {
 public:
  virtual ~value_function() = default;
  virtual value call(const call_args& args, render_state& state) const = 0;
  virtual std::string name() const = 0;
};

class value_native {
 public:
  virtual ~value_native() = default;
  // Undefined (with a hint) when the attribute does not exist.
  virtual value get_attr(std::string_view name) const = 0;
  // False when the object does not accept attribute assignment.
  virtual bool set_attr(const std::string&, value) { return false; }
  virtual std::string repr() const = 0;
  virtual std::string type_name() const = 0;  // Jinja's object_type_repr
  virtual bool truthy() const { return true; }
  // Drops what the object holds (end of render: breaks reference cycles).
  virtual void release() {}
  // Python iteration (an iterator is consumed by it); nullopt when the
  // object is not iterable. iterable() answers without consuming.
  virtual std::optional<value_array> iterate() { return std::nullopt; }
  virtual bool iterable() const { return false; }
  // len(); nullopt when the object has none.
  virtual std::optional<int64_t> length() const { return std::nullopt; }
};

// A Python iterator (the generators Jinja's map / select / unique / items /
// batch filters return, reversed()): always true, no len(), and single use.
value make_iterator(std::string type_name, value_array items);
// A generator that raises `error` when iterated.
value make_failing_iterator(std::string type_name, std::string error);
// A dict view (d.items(), d.keys(), d.values()): re-iterable, has len(),
// prints as "dict_items([...])", not subscriptable.
value make_dict_view(std::string type_name, value_array items);

// A callable from a C++ closure (builtins, bound methods).
class lambda_function : public value_function {
 public:
  using fn = std::function<value(const call_args&, render_state&)>;
  lambda_function(std::string name, fn f) : name_(std::move(name)), f_(std::move(f)) {}
  value call(const call_args& args, render_state& state) const override { return f_(args, state); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  fn f_;
};

value make_function(std::string name, lambda_function::fn f);

// Python type names as Jinja's messages print them ("str", "dict", "NoneType").
std::string python_type_name(const value& v);

// Iteration as Python's iter(): list items, dict keys, string characters,
// iterator and view items; undefined iterates as empty; anything else fails.
value_array iterate(const value& v);

// Attribute / item access with the sandboxed environment's fallbacks
// (environment.getattr / environment.getitem).
value get_attribute(const value& obj, const std::string& name);
value get_item(const value& obj, const value& key);
value slice_value(const value& obj, const value& start, const value& stop, const value& step);

// Operators (Python semantics).
value binary_arith(std::string_view op, const value& a, const value& b);
bool compare_values(std::string_view op, const value& a, const value& b);
bool contains_value(const value& container, const value& item);
value negate_value(const value& v);
// Python's < for sorting; fails on unorderable types.
bool less_than(const value& a, const value& b);
// Python's str % args.
std::string percent_format(const std::string& format, const value& args);

// Registries. Each returns nullptr when the name is unknown.
using filter_fn = value (*)(const value& subject, const call_args& args, render_state& state);
using test_fn = bool (*)(const value& subject, const call_args& args, render_state& state);
filter_fn find_filter(std::string_view name);
test_fn find_test(std::string_view name);

// Methods of str / dict / list as bound callables (mutating methods come
// back as the sandbox's "unsafe" undefined); nullopt when there is none.
std::optional<value> method_attribute(const value& self, const std::string& name);
// Jinja's object_type_repr: "dict object", "None", "jinja2.utils.Namespace object".
std::string object_type_repr(const value& v);

// Globals: range, dict, namespace, raise_exception, strftime_now, ...
void add_builtin_globals(value_object& globals);

}  // namespace troupe
