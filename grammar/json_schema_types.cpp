// JSON Schema -> grammar, the keywords of each type: objects (properties
// in order, each required or optional, additional pairs), arrays (prefix
// items, items, counts), strings (lengths, pattern, format) and numbers
// (integer ranges digit by digit; a non-integer's bounds as their sign).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "grammar/json_schema_internal.h"
#include "grammar/regex.h"

namespace troupe::grammar::json_schema_detail {

// ---- objects -----------------------------------------------------------------------

// Properties in the schema's order, each one written or (when optional)
// skipped. rest(i, e) is "properties i.. (then any additional pairs), e:
// whether a pair was written already" (so whether a comma comes first);
// only the (i, e) that can be reached are made, and only those reached
// from two places are rules (all required: one flat sequence).
result<int32_t> schema_compiler::compile_object(json_object o, const std::string& path) {
  struct property {
    std::string key;
    int32_t rule;
    bool required;
  };
  std::vector<property> props;
  element e;
  if (member(o, "properties", e)) {
    json_object listed;
    if (e.get_object().get(listed) != simdjson::SUCCESS) return fail("'properties' must be an object", path);
    for (auto field : listed) {
      auto rule = rule_of(field.value, child(child(path, "properties"), field.key));
      if (!rule) return rule;
      props.push_back({std::string(field.key), *rule, false});
    }
  }
  int32_t extra = -1;  // additional pairs' value rule; -1: none allowed
  if (member(o, "additionalProperties", e)) {
    if (e.type() != element_type::BOOL) {
      auto rule = rule_of(e, child(path, "additionalProperties"));
      if (!rule) return rule;
      extra = *rule;
    } else if (e.get_bool().value_unsafe()) {
      extra = j_.value_rule();
    }
  } else if (!options_.strict) {
    extra = j_.value_rule();
  }
  if (member(o, "required", e)) {
    json_array names;
    if (e.get_array().get(names) != simdjson::SUCCESS) return fail("'required' must be an array of strings", path);
    for (element n : names) {
      std::string_view name;
      if (n.get_string().get(name) != simdjson::SUCCESS) return fail("'required' must be an array of strings", path);
      auto it = std::find_if(props.begin(), props.end(), [&](const property& p) { return p.key == name; });
      if (it != props.end()) {
        it->required = true;
      } else if (extra >= 0) {  // not listed: required with the additional properties' schema
        props.push_back({std::string(name), extra, true});
      } else {
        return fail("required property '" + std::string(name) +
                        "' is not in 'properties' and additionalProperties is false",
                    path);
      }
    }
  }
  const size_t n = props.size();
  if (n == 0 && extra < 0) return j_.cat({g_.byte('{'), j_.ws(), g_.byte('}')});

  // How often each rest(i, e) is used: once, it is inlined; more, a rule.
  std::vector<std::array<int, 2>> uses(n + 1, {0, 0});
  uses[0][0] = 1;
  for (size_t i = 0; i < n; ++i) {
    for (int w = 0; w < 2; ++w) {
      if (uses[i][w] == 0) continue;
      ++uses[i + 1][1];
      if (!props[i].required) ++uses[i + 1][w];
    }
  }
  const std::string base = path.empty() ? "root" : path;
  std::vector<std::array<int32_t, 2>> rest(n + 1, {-1, -1});  // a node (used once) or a rule
  auto use = [&](size_t i, int w) { return uses[i][w] > 1 ? g_.ref(rest[i][w]) : rest[i][w]; };
  for (size_t i = n + 1; i-- > 0;) {
    for (int w = 0; w < 2; ++w) {
      if (uses[i][w] == 0) continue;
      int32_t body;
      if (i == n) {
        if (extra < 0) {
          body = g_.empty();
        } else {
          auto pair = [&] { return j_.cat({j_.string(), j_.colon(), g_.ref(extra), j_.after()}); };
          const int32_t more = g_.star(j_.cat({j_.comma(), pair()}));
          body = w ? more : g_.optional(j_.cat({pair(), more}));
        }
      } else {
        const property& p = props[i];
        const int32_t item = j_.cat({w ? j_.comma() : -1, g_.literal(json_quote(p.key)), j_.colon(),
                                     g_.ref(p.rule), j_.after(), use(i + 1, 1)});
        body = p.required ? item : g_.alt({item, use(i + 1, w)});
      }
      rest[i][w] = uses[i][w] > 1 ? g_.add_rule(base + "{" + std::to_string(i) + (w ? ",}" : "}"), body) : body;
    }
  }
  return j_.cat({g_.byte('{'), j_.ws(), use(0, 0), g_.byte('}')});
}

// ---- arrays ----------------------------------------------------------------------

result<int32_t> schema_compiler::count(json_object o, std::string_view key, const std::string& path,
                                       int32_t absent) {
  element e;
  if (!member(o, key, e)) return absent;
  double d = -1;
  if (is_number(e)) d = e.get_double().value_unsafe();
  if (!(d >= 0 && d <= 2147483647.0 && std::floor(d) == d)) {
    return fail("'" + std::string(key) + "' must be a non-negative integer", path);
  }
  return int32_t(d);
}

// prefix[0..k) for the first items, then `item` for the others (when
// `more`); rest(i) (a node, i >= 1 items written) built from the last.
result<int32_t> schema_compiler::compile_array(json_object o, const std::string& path) {
  std::vector<int32_t> prefix;
  element e;
  const bool has_prefix = member(o, "prefixItems", e);
  if (has_prefix) {
    json_array subs;
    if (e.get_array().get(subs) != simdjson::SUCCESS) return fail("'prefixItems' must be an array of schemas", path);
    for (element sub : subs) {
      auto rule = rule_of(sub, child(path, "prefixItems", prefix.size()));
      if (!rule) return rule;
      prefix.push_back(*rule);
    }
  }
  int32_t item = -1;
  bool more = true;
  if (member(o, "items", e)) {
    if (e.type() == element_type::ARRAY) {  // draft 4's tuple form, more items of any value
      if (has_prefix) return fail("'items' must be a schema when 'prefixItems' is given", path);
      for (element sub : simdjson::dom::array(e.get_array().value_unsafe())) {
        auto rule = rule_of(sub, child(path, "items", prefix.size()));
        if (!rule) return rule;
        prefix.push_back(*rule);
      }
    } else if (e.type() == element_type::BOOL) {
      more = e.get_bool().value_unsafe();
    } else {
      auto rule = rule_of(e, child(path, "items"));
      if (!rule) return rule;
      item = *rule;
    }
  }
  if (more && item < 0) item = j_.value_rule();
  auto min_items = count(o, "minItems", path, 0);
  if (!min_items) return min_items;
  auto max_items = count(o, "maxItems", path, -1);
  if (!max_items) return max_items;
  const int32_t lo = *min_items, hi = *max_items;  // hi -1: unbounded
  if (hi >= 0 && hi < lo) return fail("'maxItems' is less than 'minItems'", path);

  const int32_t k = int32_t(prefix.size());
  auto element_of = [&](int32_t rule) { return j_.cat({g_.ref(rule), j_.after()}); };
  auto more_items = [&](int32_t written) {  // items after `written` (>= 1), all of `item`
    if (!more) return written >= lo ? g_.empty() : g_.nothing();
    return g_.repeat(j_.cat({j_.comma(), element_of(item)}), std::max(lo - written, 0),
                     hi < 0 ? -1 : hi - written);
  };
  int32_t body;
  if (hi == 0) {
    body = g_.empty();
  } else if (k == 0) {
    const int32_t some = more ? j_.cat({element_of(item), more_items(1)}) : g_.nothing();
    body = lo == 0 ? g_.optional(some) : some;
  } else {
    const int32_t last = hi < 0 ? k : std::min(k, hi);  // the most prefix items written
    int32_t tail = last == k ? more_items(k) : g_.empty();
    for (int32_t i = last - 1; i >= 1; --i) {  // tail: the rest once i items are written
      const int32_t next = j_.cat({j_.comma(), element_of(prefix[size_t(i)]), tail});
      tail = i >= lo ? g_.optional(next) : next;
    }
    const int32_t some = j_.cat({element_of(prefix[0]), tail});
    body = lo == 0 ? g_.optional(some) : some;
  }
  return j_.cat({g_.byte('['), j_.ws(), body, g_.byte(']')});
}

// ---- strings and numbers -------------------------------------------------------

result<int32_t> schema_compiler::compile_string(json_object o, const std::string& path) {
  element e;
  std::string_view text;
  if (member(o, "pattern", e)) {  // the raw content between the quotes; lengths are not checked
    if (e.get_string().get(text) != simdjson::SUCCESS) return fail("'pattern' must be a string", path);
    auto n = add_regex(g_, text);
    if (!n) return fail("bad 'pattern' (" + n.error_message() + ")", path);
    return g_.seq({g_.byte('"'), *n, g_.byte('"')});
  }
  if (member(o, "format", e)) {
    if (e.get_string().get(text) != simdjson::SUCCESS) return fail("'format' must be a string", path);
    const char* regex = json_schema_detail::format_regex(text);
    if (regex == nullptr) return fail("unsupported format '" + std::string(text) + "'", path);
    auto n = add_regex(g_, regex);
    if (!n) return fail("format '" + std::string(text) + "' (" + n.error_message() + ")", path);
    return g_.seq({g_.byte('"'), *n, g_.byte('"')});
  }
  auto min_length = count(o, "minLength", path, 0);
  if (!min_length) return min_length;
  auto max_length = count(o, "maxLength", path, -1);
  if (!max_length) return max_length;
  if (*max_length >= 0 && *max_length < *min_length) {
    return fail("'maxLength' is less than 'minLength'", path);
  }
  if (*min_length == 0 && *max_length < 0) return j_.string();
  // Characters inline (no call per character) unless that makes the rule's automaton too big.
  const bool small = (*max_length >= 0 ? *max_length : *min_length) <= 64;
  return g_.seq({g_.byte('"'), g_.repeat(small ? j_.char_node() : j_.chr(), *min_length, *max_length),
                 g_.byte('"')});
}

// The least integer >= the bound (lower) or the greatest <= it (upper),
// '>' / '<' when exclusive; absent for a bound no int64 reaches.
result<std::optional<int64_t>> schema_compiler::integer_bound(element e, std::string_view key, bool lower,
                                                              bool exclusive, const std::string& path) {
  const error outside = fail("'" + std::string(key) + "' is outside the 64-bit integer range", path);
  if (e.type() == element_type::INT64) {
    const int64_t v = e.get_int64().value_unsafe();
    if (!exclusive) return std::optional<int64_t>(v);
    if (v == (lower ? INT64_MAX : INT64_MIN)) return outside;
    return std::optional<int64_t>(lower ? v + 1 : v - 1);
  }
  if (e.type() == element_type::UINT64) {  // above INT64_MAX
    if (lower) return outside;
    return std::optional<int64_t>();
  }
  const double d = e.get_double().value_unsafe();
  const double v = lower ? (exclusive ? std::floor(d) + 1 : std::ceil(d))
                         : (exclusive ? std::ceil(d) - 1 : std::floor(d));
  constexpr double kLimit = 9.2e18;
  if (v < -kLimit) {
    if (lower) return std::optional<int64_t>();
    return outside;
  }
  if (v > kLimit) {
    if (lower) return outside;
    return std::optional<int64_t>();
  }
  return std::optional<int64_t>(int64_t(v));
}

namespace {

struct bounds {
  std::optional<element> minimum, maximum, exclusive_minimum, exclusive_maximum;
  bool draft4_exclusive_minimum = false, draft4_exclusive_maximum = false;
};

result<bounds> read_bounds(json_object o, const std::string& path) {
  bounds b;
  std::pair<std::string_view, std::optional<element>*> words[] = {
      {"minimum", &b.minimum},
      {"maximum", &b.maximum},
      {"exclusiveMinimum", &b.exclusive_minimum},
      {"exclusiveMaximum", &b.exclusive_maximum}};
  for (auto [key, slot] : words) {
    element e;
    if (!member(o, key, e)) continue;
    if (key.starts_with("exclusive") && e.type() == element_type::BOOL) {  // draft 4
      (key == "exclusiveMinimum" ? b.draft4_exclusive_minimum : b.draft4_exclusive_maximum) =
          e.get_bool().value_unsafe();
    } else if (is_number(e)) {
      *slot = e;
    } else {
      return fail("'" + std::string(key) + "' must be a number", path);
    }
  }
  return b;
}

}  // namespace

result<int32_t> schema_compiler::compile_integer(json_object o, const std::string& path) {
  auto b = read_bounds(o, path);
  if (!b) return std::move(b).take_error();
  std::optional<int64_t> lo, hi;
  auto tighten = [&](const std::optional<element>& e, std::string_view key, bool lower,
                     bool exclusive) -> status {
    if (!e) return {};
    auto v = integer_bound(*e, key, lower, exclusive, path);
    if (!v) return std::move(v).take_error();
    std::optional<int64_t>& slot = lower ? lo : hi;
    if (*v && (!slot || (lower ? **v > *slot : **v < *slot))) slot = *v;
    return {};
  };
  for (status s : {tighten(b->minimum, "minimum", true, b->draft4_exclusive_minimum),
                   tighten(b->exclusive_minimum, "exclusiveMinimum", true, true),
                   tighten(b->maximum, "maximum", false, b->draft4_exclusive_maximum),
                   tighten(b->exclusive_maximum, "exclusiveMaximum", false, true)}) {
    if (!s) return std::move(s).take_error();
  }
  if (!lo && !hi) return j_.integer();
  if (lo && hi && *lo > *hi) return fail("no integer is within the bounds", path);
  return json_schema_detail::integer_range(g_, lo, hi);
}

// Bounds on non-integers are kept only as the sign they imply.
result<int32_t> schema_compiler::compile_number(json_object o, const std::string& path) {
  auto b = read_bounds(o, path);
  if (!b) return std::move(b).take_error();
  auto value = [](const std::optional<element>& e) { return e->get_double().value_unsafe(); };
  const bool non_negative = (b->minimum && value(b->minimum) >= 0) ||
                            (b->exclusive_minimum && value(b->exclusive_minimum) >= 0);
  const bool negative =
      (b->maximum && (value(b->maximum) < 0 || (value(b->maximum) == 0 && b->draft4_exclusive_maximum))) ||
      (b->exclusive_maximum && value(b->exclusive_maximum) <= 0);
  if (non_negative && negative) return fail("no number is within the bounds", path);
  if (non_negative) return j_.unsigned_number();
  if (negative) return g_.seq({g_.byte('-'), j_.unsigned_number()});
  return j_.number();
}

}  // namespace troupe::grammar::json_schema_detail
