// Jinja2's builtin filters on scalars and strings (the sequence filters are
// in filters_seq.cpp), plus transformers' tojson. Each follows the Python
// implementation in jinja2/filters.py, argument names included.
#include <cmath>
#include <cstdio>
#include <map>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {

filter_fn find_sequence_filter(std::string_view name);  // filters_seq.cpp

namespace {

std::string str(const value& v) { return to_display_string(v); }

value f_default(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "default", {"default_value", "boolean"});
  bool use_default = v.is_undefined() || (b.get(1).truthy() && !v.truthy());
  return use_default ? b.get_or(0, value("")) : v;
}

value f_length(const value& v, const call_args& args, render_state&) {
  bound_args none(args, "length", {});
  switch (v.type()) {
    case value::kind::undefined: return 0;
    case value::kind::string: return static_cast<int64_t>(unicode::length(v.as_string()));
    case value::kind::array: return static_cast<int64_t>(v.as_array().size());
    case value::kind::object: return static_cast<int64_t>(v.as_object().size());
    case value::kind::native:
      if (std::optional<int64_t> n = v.as_native()->length()) return *n;
      [[fallthrough]];
    default: fail("object of type '" + python_type_name(v) + "' has no len()");
  }
}

value f_upper(const value& v, const call_args&, render_state&) { return unicode::to_upper(str(v)); }
value f_lower(const value& v, const call_args&, render_state&) { return unicode::to_lower(str(v)); }
value f_capitalize(const value& v, const call_args&, render_state&) { return unicode::capitalize(str(v)); }
value f_string(const value& v, const call_args&, render_state&) { return str(v); }
value f_safe(const value& v, const call_args&, render_state&) { return v; }

// Jinja's title: upper-case the first character after each run of
// [-\s({\[<], lower-case the rest.
value f_title(const value& v, const call_args&, render_state&) {
  std::string s = str(v), out;
  bool at_word_start = true;
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t cp = unicode::decode(s, pos);
    bool separator = unicode::is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    std::string ch = s.substr(start, pos - start);
    out += separator ? ch : at_word_start ? unicode::to_upper(ch) : unicode::to_lower(ch);
    at_word_start = separator;
  }
  return out;
}

value f_trim(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "trim", {"chars"});
  std::string s = str(v);
  if (b.get(0).is_none() || b.get(0).is_undefined()) return std::string(unicode::strip(s, true, true));
  return std::string(unicode::strip_chars(s, str(b.get(0)), true, true));
}

value f_replace(const value& v, const call_args& args, render_state& state) {
  bound_args b(args, "replace", {"old", "new", "count"});
  call_args method_args;
  method_args.positional = {str(b.get(0)), str(b.get(1))};
  if (b.has(2) && !b.get(2).is_none()) method_args.positional.push_back(b.get(2));
  return method_attribute(value(str(v)), "replace")->as_function()->call(method_args, state);
}

value f_escape(const value& v, const call_args&, render_state&) {
  std::string out;
  for (char c : str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

value f_indent(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "indent", {"width", "first", "blank"});
  value width = b.get_or(0, value(4));
  std::string indention = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  // Jinja does `s += "\n"` on the value itself: only strings are accepted.
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '" + python_type_name(v) + "' and 'str'");
  std::vector<std::string> lines = unicode::splitlines(v.as_string() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool indent_line = i > 0 && (b.get(2).truthy() || !lines[i].empty());
    out += (indent_line ? indention : "") + lines[i];
  }
  if (b.get(1).truthy()) out = indention + out;
  return out;
}

value f_wordcount(const value& v, const call_args&, render_state&) {
  std::string s = str(v);
  int64_t count = 0;
  bool in_word = false;
  for (size_t pos = 0; pos < s.size();) {
    bool word = unicode::is_word_char(unicode::decode(s, pos));
    if (word && !in_word) ++count;
    in_word = word;
  }
  return count;
}

value f_center(const value& v, const call_args& args, render_state& state) {
  bound_args b(args, "center", {"width"});
  call_args method_args;
  method_args.positional = {b.get_or(0, value(80))};
  return method_attribute(value(str(v)), "center")->as_function()->call(method_args, state);
}

value f_format(const value& v, const call_args& args, render_state&) {
  if (!args.named.empty()) fail("format filter: %(name)s mappings are not supported");
  return percent_format(str(v), value(args.positional, true));
}

value f_tojson(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (!json_serializable(v)) fail("Object of type " + python_type_name(v) + " is not JSON serializable");
  json_format format;
  format.ensure_ascii = b.get(0).truthy();
  format.sort_keys = b.get(3).truthy();
  const value& indent = b.get(1);
  if (indent.is_string()) format.indent = indent.as_string();
  else if (indent.is_number()) format.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  if (format.indent) format.item_separator = ",";
  const value& separators = b.get(2);
  if (separators.is_array() && separators.as_array().size() == 2) {
    format.item_separator = str(separators.as_array()[0]);
    format.key_separator = str(separators.as_array()[1]);
  }
  return to_json(v, format);
}

// Python's int(str, base 10): whitespace, sign, digits with single underscores.
std::optional<int64_t> parse_python_int(std::string_view s) {
  s = unicode::strip(s, true, true);
  bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  int64_t v = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && s[i + 1] != '_') continue;
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v)) return std::nullopt;
  }
  return negative ? -v : v;
}

std::optional<double> parse_python_float(std::string_view s) {
  std::string text(unicode::strip(s, true, true));
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return d;
}

value f_int(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "int", {"default", "base"});
  if (v.is_undefined()) fail_undefined(v);  // Undefined.__int__ raises
  if (v.is_number()) return v.is_float() ? value(static_cast<int64_t>(std::trunc(v.as_double()))) : value(v.as_int());
  if (v.is_string()) {
    if (auto i = parse_python_int(v.as_string())) return *i;
    if (auto d = parse_python_float(v.as_string()); d && std::isfinite(*d)) return static_cast<int64_t>(std::trunc(*d));
  }
  return b.get_or(0, value(0));
}

value f_float(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "float", {"default"});
  if (v.is_undefined()) fail_undefined(v);  // Undefined.__float__ raises
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    if (auto d = parse_python_float(v.as_string())) return *d;
  }
  return b.get_or(0, value(0.0));
}

value f_abs(const value& v, const call_args&, render_state&) {
  if (v.is_float()) return std::fabs(v.as_double());
  if (v.is_int() || v.is_bool()) return v.as_int() < 0 ? negate_value(v) : value(v.as_int());
  if (v.is_undefined()) fail_undefined(v);
  fail("bad operand type for abs(): '" + python_type_name(v) + "'");
}

value f_round(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "round", {"precision", "method"});
  int64_t precision = b.get_or(0, value(0)).as_int();
  std::string method = b.has(1) ? str(b.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    fail("method must be common, ceil or floor");
  }
  if (!v.is_number()) fail("type " + python_type_name(v) + " doesn't define __round__ method");
  if (method == "common" && !v.is_float()) return v.as_int();
  double x = v.as_double();
  if (method != "common") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return (method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
  return std::strtod(buf, nullptr);
}

value f_attr(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "attr", {"name"});
  std::string name = str(b.get(0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_native()) return v.as_native()->get_attr(name);
  // getattr() only: unlike x.name, no fallback to the item.
  if (std::optional<value> method = method_attribute(v, name)) return *method;
  return value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
}

const std::map<std::string, filter_fn, std::less<>> kFilters = {
    {"default", f_default}, {"d", f_default}, {"length", f_length}, {"count", f_length},
    {"upper", f_upper}, {"lower", f_lower}, {"capitalize", f_capitalize}, {"title", f_title},
    {"string", f_string}, {"safe", f_safe}, {"trim", f_trim}, {"replace", f_replace},
    {"escape", f_escape}, {"e", f_escape}, {"forceescape", f_escape}, {"indent", f_indent},
    {"wordcount", f_wordcount}, {"center", f_center}, {"format", f_format}, {"tojson", f_tojson},
    {"int", f_int}, {"float", f_float}, {"abs", f_abs}, {"round", f_round}, {"attr", f_attr},
};

}  // namespace

filter_fn find_filter(std::string_view name) {
  auto it = kFilters.find(name);
  return it != kFilters.end() ? it->second : find_sequence_filter(name);
}

}  // namespace troupe
