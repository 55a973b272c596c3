// Jinja2's builtin tests (`x is defined`, `n is divisibleby 3`, ...), as
// jinja2/tests.py defines them on Python objects.
#include <map>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {
namespace {

const value& arg0(const call_args& args, const char* test) {
  if (!args.positional.empty()) return args.positional[0];
  if (!args.named.empty()) return args.named[0].second;
  fail(std::string(test) + "() missing 1 required positional argument");
}

bool t_defined(const value& v, const call_args&, render_state&) { return !v.is_undefined(); }
bool t_undefined(const value& v, const call_args&, render_state&) { return v.is_undefined(); }
bool t_none(const value& v, const call_args&, render_state&) { return v.is_none(); }
bool t_boolean(const value& v, const call_args&, render_state&) { return v.is_bool(); }
bool t_true(const value& v, const call_args&, render_state&) { return v.is_bool() && v.as_bool(); }
bool t_false(const value& v, const call_args&, render_state&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const value& v, const call_args&, render_state&) { return v.is_int(); }
bool t_float(const value& v, const call_args&, render_state&) { return v.is_float(); }
bool t_number(const value& v, const call_args&, render_state&) { return v.is_number(); }
bool t_string(const value& v, const call_args&, render_state&) { return v.is_string(); }
bool t_mapping(const value& v, const call_args&, render_state&) { return v.is_object(); }
bool t_callable(const value& v, const call_args&, render_state&) { return v.is_function(); }
bool t_escaped(const value&, const call_args&, render_state&) { return false; }

// Jinja: len() and __getitem__ work; Undefined has both.
bool t_sequence(const value& v, const call_args&, render_state&) {
  return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
}

bool t_iterable(const value& v, const call_args&, render_state&) {
  return v.is_string() || v.is_array() || v.is_object() || v.is_undefined() ||
         (v.is_native() && v.as_native()->iterable());
}

bool t_odd(const value& v, const call_args&, render_state&) { return values_equal(binary_arith("%", v, 2), 1); }
bool t_even(const value& v, const call_args&, render_state&) { return values_equal(binary_arith("%", v, 2), 0); }

bool t_divisibleby(const value& v, const call_args& args, render_state&) {
  return values_equal(binary_arith("%", v, arg0(args, "divisibleby")), 0);
}

bool t_eq(const value& v, const call_args& a, render_state&) { return compare_values("==", v, arg0(a, "eq")); }
bool t_ne(const value& v, const call_args& a, render_state&) { return compare_values("!=", v, arg0(a, "ne")); }
bool t_lt(const value& v, const call_args& a, render_state&) { return compare_values("<", v, arg0(a, "lt")); }
bool t_le(const value& v, const call_args& a, render_state&) { return compare_values("<=", v, arg0(a, "le")); }
bool t_gt(const value& v, const call_args& a, render_state&) { return compare_values(">", v, arg0(a, "gt")); }
bool t_ge(const value& v, const call_args& a, render_state&) { return compare_values(">=", v, arg0(a, "ge")); }
bool t_in(const value& v, const call_args& a, render_state&) { return contains_value(arg0(a, "in"), v); }

// Python `is`: singletons, small ints (CPython caches -5..256), shared objects.
bool t_sameas(const value& v, const call_args& args, render_state&) {
  const value& other = arg0(args, "sameas");
  if (v.type() != other.type()) return false;
  switch (v.type()) {
    case value::kind::none:
    case value::kind::undefined: return v.is_none();
    case value::kind::boolean: return v.as_bool() == other.as_bool();
    case value::kind::integer: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case value::kind::array: return &v.as_array() == &other.as_array();
    case value::kind::object: return &v.as_object() == &other.as_object();
    case value::kind::string: return &v.as_string() == &other.as_string();
    case value::kind::function:
    case value::kind::native: return values_equal(v, other);
    default: return false;
  }
}

bool t_lower(const value& v, const call_args&, render_state& state) {
  value r = method_attribute(value(to_display_string(v)), "islower")->as_function()->call({}, state);
  return r.truthy();
}

bool t_upper(const value& v, const call_args&, render_state& state) {
  value r = method_attribute(value(to_display_string(v)), "isupper")->as_function()->call({}, state);
  return r.truthy();
}

bool t_filter(const value& v, const call_args&, render_state&) {
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

bool t_test(const value& v, const call_args&, render_state&) {
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

const std::map<std::string, test_fn, std::less<>> kTests = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float},
    {"number", t_number}, {"string", t_string}, {"mapping", t_mapping}, {"callable", t_callable},
    {"escaped", t_escaped}, {"sequence", t_sequence}, {"iterable", t_iterable}, {"odd", t_odd},
    {"even", t_even}, {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le},
    {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge},
    {"in", t_in}, {"sameas", t_sameas}, {"lower", t_lower}, {"upper", t_upper},
    {"filter", t_filter}, {"test", t_test},
};

}  // namespace

test_fn find_test(std::string_view name) {
  auto it = kTests.find(name);
  return it != kTests.end() ? it->second : nullptr;
}

}  // namespace troupe
