// Methods of str, dict and list, bound on attribute access (`s.strip`,
// `d.items`), with Python semantics. Mutating list / dict methods resolve to
// the sandbox's unsafe undefined, which fails when called, as
// ImmutableSandboxedEnvironment makes them.
#include <algorithm>
#include <set>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {

std::string str_format(const std::string& format, const call_args& args);  // format.cpp

namespace {

using method_fn = value (*)(const value& self, const std::string& name, const call_args& args);

std::string str_arg(const value& v, const std::string& method) {
  if (!v.is_string()) fail(method + "() argument must be str, not " + python_type_name(v));
  return v.as_string();
}

int64_t int_arg(const value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool()) fail("'" + python_type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

value string_list(const std::vector<std::string>& parts) {
  value_array out;
  for (const std::string& p : parts) out.emplace_back(p);
  return value(std::move(out));
}

// The code-point range [start, end) of a str.find-style call, in bytes.
std::pair<size_t, size_t> byte_range(const std::string& s, const bound_args& b, size_t first) {
  std::vector<size_t> offsets = unicode::code_point_offsets(s);
  int64_t n = static_cast<int64_t>(offsets.size() - 1);
  auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
  int64_t start = clamp(int_arg(b.get(first), 0)), end = clamp(int_arg(b.get(first + 1), n));
  if (end < start) end = start;
  return {offsets[static_cast<size_t>(start)], offsets[static_cast<size_t>(end)]};
}

int64_t code_point_index(const std::string& s, size_t byte) {
  return static_cast<int64_t>(unicode::length(std::string_view(s).substr(0, byte)));
}

value affix_test(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"prefix", "start", "end"});
  auto [begin, end] = byte_range(s, b, 1);
  std::string_view range = std::string_view(s).substr(begin, end - begin);
  value_array candidates = b.get(0).is_tuple() ? b.get(0).as_array() : value_array{b.get(0)};
  for (const value& c : candidates) {
    std::string affix = str_arg(c, name);
    if (name == "startswith" ? range.starts_with(affix) : range.ends_with(affix)) return true;
  }
  return false;
}

value find_like(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"sub", "start", "end"});
  std::string sub = str_arg(b.get(0), name);
  auto [begin, end] = byte_range(s, b, 1);
  std::string_view range = std::string_view(s).substr(begin, end - begin);
  if (name == "count") {
    if (sub.empty()) return static_cast<int64_t>(unicode::length(range) + 1);
    int64_t count = 0;
    for (size_t p = range.find(sub); p != std::string_view::npos; p = range.find(sub, p + sub.size())) ++count;
    return count;
  }
  bool reverse = name == "rfind" || name == "rindex";
  size_t hit = reverse ? range.rfind(sub) : range.find(sub);
  if (hit == std::string_view::npos) {
    if (name == "index" || name == "rindex") fail("substring not found");
    return -1;
  }
  return code_point_index(s, begin + hit);
}

value strip_method(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"chars"});
  bool left = name != "rstrip", right = name != "lstrip";
  const value& chars = b.get(0);
  if (chars.is_none() || chars.is_undefined()) return std::string(unicode::strip(s, left, right));
  return std::string(unicode::strip_chars(s, str_arg(chars, name), left, right));
}

value split_method(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"sep", "maxsplit"});
  int64_t maxsplit = int_arg(b.get(1), -1);
  const value& sep = b.get(0);
  bool reverse = name == "rsplit";
  if (sep.is_none() || sep.is_undefined()) {
    return string_list(reverse ? unicode::rsplit_whitespace(s, maxsplit) : unicode::split_whitespace(s, maxsplit));
  }
  std::string sep_str = str_arg(sep, name);
  if (sep_str.empty()) fail("empty separator");
  return string_list(reverse ? unicode::rsplit_sep(s, sep_str, maxsplit) : unicode::split_sep(s, sep_str, maxsplit));
}

value replace_method(const std::string& s, const call_args& args) {
  bound_args b(args, "replace", {"old", "new", "count"});
  std::string from = str_arg(b.get(0), "replace"), to = str_arg(b.get(1), "replace");
  int64_t count = int_arg(b.get(2), -1);
  std::string out;
  if (from.empty()) {
    std::vector<size_t> offsets = unicode::code_point_offsets(s);
    size_t n = offsets.size() - 1;
    for (size_t i = 0; i <= n; ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < n) out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos);
  return out;
}

value pad_method(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"width", "fillchar"});
  int64_t width = int_arg(b.get(0), 0);
  std::string fill = b.has(1) ? str_arg(b.get(1), name) : " ";
  if (name == "zfill") fill = "0";
  int64_t len = static_cast<int64_t>(unicode::length(s));
  if (width <= len) return s;
  if (width > (int64_t{1} << 27)) fail("padded string too large");
  int64_t pad = width - len, left = 0;
  if (name == "center") left = pad / 2 + (pad & width & 1);
  else if (name == "rjust" || name == "zfill") left = pad;
  auto repeat = [&](int64_t n) {
    std::string r;
    for (int64_t i = 0; i < n; ++i) r += fill;
    return r;
  };
  if (name == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) return s.substr(0, 1) + repeat(left) + s.substr(1);
  return repeat(left) + s + repeat(pad - left);
}

template <class Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t pos = 0; pos < s.size();) {
    if (!pred(unicode::decode(s, pos))) return false;
  }
  return true;
}

value predicate_method(const std::string& s, const std::string& name) {
  auto ascii = [](uint32_t cp, int (*f)(int)) { return cp < 0x80 && f(static_cast<int>(cp)); };
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    return all_chars(s, [&](uint32_t cp) { return ascii(cp, ::isdigit); });
  }
  if (name == "isalpha") return all_chars(s, [&](uint32_t cp) { return ascii(cp, ::isalpha) || (cp >= 0x80 && unicode::is_word_char(cp)); });
  if (name == "isalnum") return all_chars(s, [&](uint32_t cp) { return cp != '_' && unicode::is_word_char(cp); });
  if (name == "isspace") return all_chars(s, unicode::is_space);
  bool has_upper = false, has_lower = false;
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cp = unicode::decode(s, pos);
    has_upper |= unicode::is_upper_char(cp);
    has_lower |= unicode::is_lower_char(cp);
  }
  if (name == "isupper") return has_upper && !has_lower;
  if (name == "islower") return has_lower && !has_upper;
  return (has_upper || has_lower) && unicode::title_case(s) == s;  // istitle
}

value partition_method(const std::string& s, const std::string& name, const call_args& args) {
  bound_args b(args, name, {"sep"});
  std::string sep = str_arg(b.get(0), name);
  if (sep.empty()) fail("empty separator");
  size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
  if (hit == std::string::npos) {
    return name == "partition" ? value(value_array{s, "", ""}, true) : value(value_array{"", "", s}, true);
  }
  return value(value_array{s.substr(0, hit), sep, s.substr(hit + sep.size())}, true);
}

value join_method(const std::string& s, const call_args& args) {
  bound_args b(args, "join", {"iterable"});
  std::string out;
  value_array items = iterate(b.get(0));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      fail("sequence item " + std::to_string(i) + ": expected str instance, " + python_type_name(items[i]) + " found");
    }
    if (i) out += s;
    out += items[i].as_string();
  }
  return out;
}

value string_method(const value& self, const std::string& name, const call_args& args) {
  const std::string& s = self.as_string();
  if (name == "startswith" || name == "endswith") return affix_test(s, name, args);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return find_like(s, name, args);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") return strip_method(s, name, args);
  if (name == "split" || name == "rsplit") return split_method(s, name, args);
  if (name == "splitlines") return string_list(unicode::splitlines(s, bound_args(args, name, {"keepends"}).get(0).truthy()));
  if (name == "replace") return replace_method(s, args);
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") return pad_method(s, name, args);
  if (name == "partition" || name == "rpartition") return partition_method(s, name, args);
  if (name == "join") return join_method(s, args);
  if (name == "format") return str_format(s, args);
  if (name == "removeprefix" || name == "removesuffix") {
    std::string affix = str_arg(bound_args(args, name, {"prefix"}).get(0), name);
    if (name == "removeprefix") return std::string_view(s).starts_with(affix) ? s.substr(affix.size()) : s;
    return std::string_view(s).ends_with(affix) ? s.substr(0, s.size() - affix.size()) : s;
  }
  bound_args none(args, name, {});
  if (name == "upper") return unicode::to_upper(s);
  if (name == "lower" || name == "casefold") return unicode::to_lower(s);
  if (name == "title") return unicode::title_case(s);
  if (name == "capitalize") return unicode::capitalize(s);
  if (name == "swapcase") {
    std::string out = s;
    for (char& c : out) c = static_cast<char>((c >= 'a' && c <= 'z') ? c - 32 : (c >= 'A' && c <= 'Z') ? c + 32 : c);
    return out;
  }
  return predicate_method(s, name);
}

value dict_method(const value& self, const std::string& name, const call_args& args) {
  const value_object& d = self.as_object();
  if (name == "get") {
    bound_args b(args, name, {"key", "default"});
    const value* v = b.get(0).is_string() ? d.find(b.get(0).as_string()) : nullptr;
    return v ? *v : b.get_or(1, value::none());
  }
  bound_args none(args, name, {});
  if (name == "copy") return self;
  value_array out;
  for (const auto& [k, v] : d) {
    if (name == "keys") out.emplace_back(k);
    else if (name == "values") out.push_back(v);
    else out.emplace_back(value_array{k, v}, true);
  }
  return make_dict_view("dict_" + name, std::move(out));
}

value list_method(const value& self, const std::string& name, const call_args& args) {
  const value_array& items = self.as_array();
  if (name == "copy") {
    bound_args none(args, name, {});
    return self;
  }
  bound_args b(args, name, {"value"});
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], b.get(0))) continue;
    if (name == "index") return static_cast<int64_t>(i);
    ++count;
  }
  if (name == "index") fail(to_repr(b.get(0)) + " is not in list");
  return count;
}

const std::set<std::string, std::less<>> kStringMethods = {
    "startswith", "endswith", "find", "rfind", "index", "rindex", "count", "strip", "lstrip", "rstrip",
    "split", "rsplit", "splitlines", "replace", "center", "ljust", "rjust", "zfill", "partition",
    "rpartition", "join", "format", "removeprefix", "removesuffix", "upper", "lower", "casefold",
    "title", "capitalize", "swapcase", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum",
    "isspace", "isupper", "islower", "istitle"};
const std::set<std::string, std::less<>> kDictMethods = {"items", "keys", "values", "get", "copy"};
const std::set<std::string, std::less<>> kDictUnsafe = {"pop", "popitem", "setdefault", "update", "clear"};
const std::set<std::string, std::less<>> kListMethods = {"index", "count", "copy"};
const std::set<std::string, std::less<>> kListUnsafe = {"append", "extend", "insert", "pop",
                                                        "remove", "reverse", "sort", "clear"};

value bind(const value& self, const std::string& name, method_fn fn) {
  return make_function(name, [self, name, fn](const call_args& args, render_state&) { return fn(self, name, args); });
}

value unsafe(const value& self, const std::string& name) {
  return value::undefined("access to attribute '" + name + "' of '" + python_type_name(self) +
                          "' object is unsafe.");
}

}  // namespace

std::optional<value> method_attribute(const value& self, const std::string& name) {
  if (self.is_string() && kStringMethods.count(name)) return bind(self, name, string_method);
  if (self.is_object()) {
    if (kDictMethods.count(name)) return bind(self, name, dict_method);
    if (kDictUnsafe.count(name)) return unsafe(self, name);
  }
  if (self.is_array()) {
    if (kListMethods.count(name)) return bind(self, name, list_method);
    if (kListUnsafe.count(name)) return unsafe(self, name);
  }
  return std::nullopt;
}

}  // namespace troupe
