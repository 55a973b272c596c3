// Template globals: Jinja's range / dict / namespace / joiner, and the two
// transformers adds, raise_exception and strftime_now.
#include <ctime>

#include "model/chat_template/natives.h"
#include "model/chat_template/runtime.h"

namespace troupe {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t int_param(const value& v) {
  if (!v.is_int() && !v.is_bool()) {
    fail("'" + python_type_name(v) + "' object cannot be interpreted as an integer");
  }
  return v.as_int();
}

value range_fn(const call_args& args, render_state&) {
  if (!args.named.empty()) fail("range() takes no keyword arguments");
  size_t n = args.positional.size();
  if (n < 1 || n > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(n));
  int64_t start = 0, stop = 0, step = 1;
  if (n == 1) {
    stop = int_param(args.positional[0]);
  } else {
    start = int_param(args.positional[0]);
    stop = int_param(args.positional[1]);
    if (n == 3) step = int_param(args.positional[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  value_array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.emplace_back(i);
  }
  return value(std::move(out));
}

// dict(mapping_or_pairs, **kwargs), also namespace()'s initialiser.
value_object build_mapping(const call_args& args, const char* fn) {
  if (args.positional.size() > 1) fail(std::string(fn) + " expected at most 1 argument");
  value_object out;
  if (!args.positional.empty()) {
    const value& init = args.positional[0];
    if (init.is_object()) {
      out = init.as_object();
    } else {
      for (const value& pair : iterate(init)) {
        value_array kv = iterate(pair);
        if (kv.size() != 2 || !kv[0].is_string()) fail(std::string(fn) + ": expected (str, value) pairs");
        out.set(kv[0].as_string(), kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.named) out.set(k, v);
  return out;
}

value dict_fn(const call_args& args, render_state&) { return value(build_mapping(args, "dict")); }

value namespace_fn(const call_args& args, render_state& state) {
  auto ns = std::make_shared<namespace_object>(build_mapping(args, "namespace"));
  state.natives.push_back(ns);
  return value(std::shared_ptr<value_native>(std::move(ns)));
}

value raise_exception_fn(const call_args& args, render_state&) {
  std::string message = args.positional.empty() ? "" : to_display_string(args.positional[0]);
  throw template_error{message, true};
}

value strftime_now_fn(const call_args& args, render_state& state) {
  bound_args b(args, "strftime_now", {"format"});
  if (!b.get(0).is_string()) fail("strftime() argument 1 must be str, not " + python_type_name(b.get(0)));
  std::tm tm{};
  if (state.now) {
    tm = *state.now;
    tm.tm_isdst = 0;
    time_t t = timegm(&tm);  // normalises and fills weekday / day of year
    gmtime_r(&t, &tm);
  } else {
    time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  const std::string& format = b.get(0).as_string();
  if (format.empty()) return std::string();
  std::string buf(256 + format.size() * 8, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  buf.resize(n);
  return buf;
}

value joiner_fn(const call_args& args, render_state&) {
  bound_args b(args, "joiner", {"sep"});
  std::string sep = b.has(0) ? to_display_string(b.get(0)) : ", ";
  auto used = std::make_shared<bool>(false);
  return make_function("joiner", [sep, used](const call_args&, render_state&) {
    if (!*used) {
      *used = true;
      return value("");
    }
    return value(sep);
  });
}

}  // namespace

void add_builtin_globals(value_object& globals) {
  globals.set("range", make_function("range", range_fn));
  globals.set("dict", make_function("dict", dict_fn));
  globals.set("namespace", make_function("namespace", namespace_fn));
  globals.set("joiner", make_function("joiner", joiner_fn));
  globals.set("raise_exception", make_function("raise_exception", raise_exception_fn));
  globals.set("strftime_now", make_function("strftime_now", strftime_now_fn));
}

}  // namespace troupe
