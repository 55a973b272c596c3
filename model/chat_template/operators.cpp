// Python operator semantics over value: arithmetic (int stays int, / is true
// division, // and % floor), comparisons, `in`, iteration, and the
// TypeError / UndefinedError messages Python and Jinja would raise.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {

void fail(std::string message) { throw template_error{std::move(message)}; }

void fail_undefined(const value& v) { fail(v.undefined_hint()); }

value make_function(std::string name, lambda_function::fn f) {
  return value(std::shared_ptr<const value_function>(
      std::make_shared<lambda_function>(std::move(name), std::move(f))));
}

bound_args::bound_args(const call_args& args, std::string_view function,
                       std::initializer_list<std::string_view> params)
    : values_(params.size()), given_(params.size(), false) {
  if (args.positional.size() > params.size()) {
    fail(std::string(function) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
         std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = args.positional[i];
    given_[i] = true;
  }
  for (const auto& [name, v] : args.named) {
    auto it = std::find(params.begin(), params.end(), name);
    if (it == params.end()) {
      fail(std::string(function) + "() got an unexpected keyword argument '" + name + "'");
    }
    size_t i = static_cast<size_t>(it - params.begin());
    if (given_[i]) fail(std::string(function) + "() got multiple values for argument '" + name + "'");
    values_[i] = v;
    given_[i] = true;
  }
}

std::string python_type_name(const value& v) {
  switch (v.type()) {
    case value::kind::undefined: return "Undefined";
    case value::kind::none: return "NoneType";
    case value::kind::boolean: return "bool";
    case value::kind::integer: return "int";
    case value::kind::floating: return "float";
    case value::kind::string: return "str";
    case value::kind::array: return v.is_tuple() ? "tuple" : "list";
    case value::kind::object: return "dict";
    case value::kind::function: return "function";
    case value::kind::native: return v.as_native()->type_name();
  }
  return "object";
}

std::string object_type_repr(const value& v) {
  if (v.is_none()) return "None";
  if (v.is_native()) return v.as_native()->type_name() + " object";
  return python_type_name(v) + " object";
}

value_array iterate(const value& v) {
  switch (v.type()) {
    case value::kind::undefined: return {};
    case value::kind::array: return v.as_array();
    case value::kind::object: {
      value_array keys;
      for (const auto& [k, item] : v.as_object()) keys.emplace_back(k);
      return keys;
    }
    case value::kind::string: {
      value_array chars;
      const std::string& s = v.as_string();
      std::vector<size_t> offsets = unicode::code_point_offsets(s);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      return chars;
    }
    case value::kind::native:
      if (std::optional<value_array> items = v.as_native()->iterate()) return std::move(*items);
      [[fallthrough]];
    default: fail("'" + python_type_name(v) + "' object is not iterable");
  }
}

namespace {

[[noreturn]] void fail_operands(std::string_view op, const value& a, const value& b) {
  fail("unsupported operand type(s) for " + std::string(op) + ": '" + python_type_name(a) + "' and '" +
       python_type_name(b) + "'");
}

// Square-and-multiply with overflow checks (|base| <= 1 never overflows).
int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) fail("integer overflow");
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
  }
  return result;
}

value int_arith(std::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
  if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
  if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
  if (overflow) fail("integer overflow");
  if (op == "+" || op == "-" || op == "*") return r;
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return static_cast<double>(x) / static_cast<double>(y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("integer division or modulo by zero");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return op == "//" ? q : m;
  }
  if (y < 0) {
    if (x == 0) fail("0.0 cannot be raised to a negative power");
    return std::pow(static_cast<double>(x), static_cast<double>(y));
  }
  return int_pow(x, y);
}

value float_arith(std::string_view op, double x, double y) {
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "**") return std::pow(x, y);
  if (y == 0) fail(op == "/" ? "float division by zero" : op == "//" ? "float floor division by zero" : "float modulo");
  if (op == "/") return x / y;
  // CPython's float_divmod.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (op == "%") return mod;
  if (div == 0) return std::copysign(0.0, x / y);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

// Larger strings or lists than this are refused rather than exhausting memory.
constexpr size_t kMaxRepeatedSize = size_t{1} << 27;

value repeat(const value& seq, int64_t n) {
  size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_array().size();
  if (n <= 0 || unit == 0) n = 0;
  else if (static_cast<uint64_t>(n) > kMaxRepeatedSize / unit) fail("repeated sequence too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return out;
  }
  value_array out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_array().begin(), seq.as_array().end());
  return value(std::move(out), seq.is_tuple());
}

}  // namespace

value binary_arith(std::string_view op, const value& a, const value& b) {
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_arith(op, a.as_double(), b.as_double());
    return int_arith(op, a.as_int(), b.as_int());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return a.as_string() + b.as_string();
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      value_array out = a.as_array();
      out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return value(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_array()) {
      fail("can only concatenate " + python_type_name(a) + " (not \"" + python_type_name(b) + "\") to " +
           python_type_name(a));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  fail_operands(op, a, b);
}

value negate_value(const value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return -v.as_double();
  if (v.is_int() || v.is_bool()) return int_arith("-", 0, v.as_int());
  fail("bad operand type for unary -: '" + python_type_name(v) + "'");
}

namespace {

// -1, 0, 1 as Python orders a and b; fails on unorderable types.
int order(const value& a, const value& b, std::string_view op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : y < x ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : y < x ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const value_array &x = a.as_array(), &y = b.as_array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return order(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("'" + std::string(op) + "' not supported between instances of '" + python_type_name(a) + "' and '" +
       python_type_name(b) + "'");
}

}  // namespace

bool less_than(const value& a, const value& b) { return order(a, b, "<") < 0; }

bool compare_values(std::string_view op, const value& a, const value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains_value(b, a);
  if (op == "not in") return !contains_value(b, a);
  if ((a.is_float() && std::isnan(a.as_double())) || (b.is_float() && std::isnan(b.as_double()))) {
    order(a, b, op);  // still type-checks
    return false;
  }
  int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

bool contains_value(const value& container, const value& item) {
  switch (container.type()) {
    case value::kind::undefined: return false;
    case value::kind::string:
      if (!item.is_string()) {
        fail("'in <string>' requires string as left operand, not " + python_type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case value::kind::array:
      return std::any_of(container.as_array().begin(), container.as_array().end(),
                         [&](const value& v) { return values_equal(v, item); });
    case value::kind::object:
      return item.is_string() && container.as_object().find(item.as_string()) != nullptr;
    case value::kind::native:
      if (container.as_native()->iterable()) {
        value_array items = iterate(container);
        return std::any_of(items.begin(), items.end(), [&](const value& v) { return values_equal(v, item); });
      }
      [[fallthrough]];
    default: fail("argument of type '" + python_type_name(container) + "' is not iterable");
  }
}

}  // namespace troupe
