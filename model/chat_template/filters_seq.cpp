// Jinja2's builtin filters on sequences and mappings (list, first, last,
// join, sort, unique, map, select / reject(attr), items, dictsort, min, max,
// sum, batch, reverse). Generators are materialised as lists.
#include <algorithm>
#include <map>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {
namespace {

value ignore_case(const value& v) { return v.is_string() ? value(unicode::to_lower(v.as_string())) : v; }

// Jinja's make_attrgetter: "a.b.0" walks items (integers for digit parts).
value get_path(const value& item, const value& attribute, const value& fallback = value()) {
  std::vector<value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : unicode::split_sep(attribute.as_string(), ".", -1)) {
      bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      parts.push_back(digits ? value(static_cast<int64_t>(std::stoll(part))) : value(part));
    }
  } else if (!attribute.is_none() && !attribute.is_undefined()) {
    parts.push_back(attribute);
  }
  value v = item;
  for (const value& part : parts) {
    v = get_item(v, part);
    if (!fallback.is_undefined() && !fallback.is_none() && v.is_undefined()) v = fallback;
  }
  return v;
}

// The sort key of make_multi_attrgetter / make_attrgetter with ignore_case.
value sort_key(const value& item, const value& attribute, bool case_sensitive, bool multi) {
  if (multi && attribute.is_string() && attribute.as_string().find(',') != std::string::npos) {
    value_array keys;
    for (const std::string& part : unicode::split_sep(attribute.as_string(), ",", -1)) {
      value k = get_path(item, value(part));
      keys.push_back(case_sensitive ? k : ignore_case(k));
    }
    return value(std::move(keys));
  }
  value k = get_path(item, attribute);
  return case_sensitive ? k : ignore_case(k);
}

// Jinja's generator filters run their body only when iterated: an error in
// it surfaces then, not when the filter is applied.
template <class Build>
value generator(Build build) {
  try {
    return make_iterator("generator", build());
  } catch (const template_error& e) {
    if (e.raised_by_template) throw;
    return make_failing_iterator("generator", e.message);
  }
}

value f_list(const value& v, const call_args&, render_state&) { return value(iterate(v)); }

value f_first(const value& v, const call_args&, render_state&) {
  value_array items = iterate(v);
  return items.empty() ? value::undefined("No first item, sequence was empty.") : items.front();
}

value f_last(const value& v, const call_args&, render_state&) {
  if (v.is_native() && !v.as_native()->length()) fail("'" + python_type_name(v) + "' object is not reversible");
  value_array items = iterate(v);
  return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

// str -> reversed str; sequences -> a reverse iterator; iterators -> a list.
value f_reverse(const value& v, const call_args&, render_state&) {
  value_array items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_native() && !v.as_native()->length()) return value(std::move(items));
  if (!v.is_string()) return make_iterator(v.is_object() ? "dict_reversekeyiterator" : "list_reverseiterator", std::move(items));
  std::string out;
  for (const value& c : items) out += c.as_string();
  return out;
}

value f_join(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "join", {"d", "attribute"});
  std::string sep = b.has(0) ? to_display_string(b.get(0)) : "";
  std::string out;
  value_array items = iterate(v);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += to_display_string(b.has(1) ? get_path(items[i], b.get(1)) : items[i]);
  }
  return out;
}

value f_sort(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "sort", {"reverse", "case_sensitive", "attribute"});
  bool reverse = b.get(0).truthy(), case_sensitive = b.get(1).truthy();
  value_array items = iterate(v);
  std::vector<std::pair<value, value>> keyed;
  for (const value& item : items) keyed.emplace_back(sort_key(item, b.get(2), case_sensitive, true), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
  });
  value_array out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return value(std::move(out));
}

value f_unique(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "unique", {"case_sensitive", "attribute"});
  return generator([&] {
    value_array seen, out;
    for (const value& item : iterate(v)) {
      value key = sort_key(item, b.get(1), b.get(0).truthy(), false);
      if (std::any_of(seen.begin(), seen.end(), [&](const value& s) { return values_equal(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return out;
  });
}

value min_max(const value& v, const call_args& args, bool want_max) {
  bound_args b(args, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  value_array items = iterate(v);
  if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  value best_key = sort_key(items[0], b.get(1), b.get(0).truthy(), false);
  for (size_t i = 1; i < items.size(); ++i) {
    value key = sort_key(items[i], b.get(1), b.get(0).truthy(), false);
    if (want_max ? less_than(best_key, key) : less_than(key, best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

value f_min(const value& v, const call_args& args, render_state&) { return min_max(v, args, false); }
value f_max(const value& v, const call_args& args, render_state&) { return min_max(v, args, true); }

value f_sum(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "sum", {"attribute", "start"});
  value total = b.get_or(1, value(0));
  for (const value& item : iterate(v)) total = binary_arith("+", total, b.has(0) ? get_path(item, b.get(0)) : item);
  return total;
}

value f_items(const value& v, const call_args&, render_state&) {
  return generator([&] {
    value_array out;
    if (v.is_undefined()) return out;
    if (!v.is_object()) fail("Can only get item pairs from a mapping.");
    for (const auto& [k, item] : v.as_object()) out.emplace_back(value_array{k, item}, true);
    return out;
  });
}

value f_dictsort(const value& v, const call_args& args, render_state& state) {
  bound_args b(args, "dictsort", {"case_sensitive", "by", "reverse"});
  std::string by = b.has(1) ? to_display_string(b.get(1)) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  call_args sort_args;
  sort_args.named = {{"reverse", b.get(2).truthy()}, {"case_sensitive", b.get(0).truthy()},
                     {"attribute", by == "key" ? 0 : 1}};
  if (!v.is_object()) fail("'" + python_type_name(v) + "' object has no attribute 'items'");
  return f_sort(f_items(v, {}, state), sort_args, state);
}

value f_batch(const value& v, const call_args& args, render_state&) {
  bound_args b(args, "batch", {"linecount", "fill_with"});
  int64_t n = b.get(0).is_number() ? b.get(0).as_int() : 0;
  if (n <= 0) fail("batch size must be positive");
  return generator([&] {
    value_array out, row;
    for (const value& item : iterate(v)) {
      if (static_cast<int64_t>(row.size()) == n) {
        out.emplace_back(std::move(row));
        row.clear();
      }
      row.push_back(item);
    }
    if (!row.empty()) {
      if (b.has(1) && !b.get(1).is_none()) {
        while (static_cast<int64_t>(row.size()) < n) row.push_back(b.get(1));
      }
      out.emplace_back(std::move(row));
    }
    return out;
  });
}

value_array map_items(const value& v, const call_args& args, render_state& state) {
  value_array out;
  if (!v.truthy()) return out;  // Jinja: `if value:` before anything else
  if (args.positional.empty()) {
    bound_args b(args, "map", {"attribute", "default"});
    if (!b.has(0)) fail("map requires a filter name or attribute=");
    for (const value& item : iterate(v)) out.push_back(get_path(item, b.get(0), b.get(1)));
    return out;
  }
  std::string name = to_display_string(args.positional[0]);
  filter_fn f = find_filter(name);
  if (!f) fail("No filter named '" + name + "'.");
  call_args rest{{args.positional.begin() + 1, args.positional.end()}, args.named};
  for (const value& item : iterate(v)) out.push_back(f(item, rest, state));
  return out;
}

value f_map(const value& v, const call_args& args, render_state& state) {
  return generator([&] { return map_items(v, args, state); });
}

value_array select_items(const value& v, const call_args& args, render_state& state, bool lookup_attr, bool keep) {
  if (!v.truthy()) return {};  // Jinja: `if value:` before anything else
  size_t off = lookup_attr ? 1 : 0;
  if (lookup_attr && args.positional.empty()) fail("Missing parameter for attribute name");
  test_fn test = nullptr;
  call_args rest{{}, args.named};
  if (args.positional.size() > off) {
    std::string name = to_display_string(args.positional[off]);
    test = find_test(name);
    if (!test) fail("No test named '" + name + "'.");
    rest.positional.assign(args.positional.begin() + static_cast<long>(off) + 1, args.positional.end());
  }
  value_array out;
  for (const value& item : iterate(v)) {
    value subject = lookup_attr ? get_path(item, args.positional[0]) : item;
    bool pass = test ? test(subject, rest, state) : subject.truthy();
    if (pass == keep) out.push_back(item);
  }
  return out;
}

value select_reject(const value& v, const call_args& args, render_state& state, bool lookup_attr, bool keep) {
  return generator([&] { return select_items(v, args, state, lookup_attr, keep); });
}

value f_select(const value& v, const call_args& a, render_state& s) { return select_reject(v, a, s, false, true); }
value f_reject(const value& v, const call_args& a, render_state& s) { return select_reject(v, a, s, false, false); }
value f_selectattr(const value& v, const call_args& a, render_state& s) { return select_reject(v, a, s, true, true); }
value f_rejectattr(const value& v, const call_args& a, render_state& s) { return select_reject(v, a, s, true, false); }

const std::map<std::string, filter_fn, std::less<>> kSequenceFilters = {
    {"list", f_list}, {"first", f_first}, {"last", f_last}, {"reverse", f_reverse}, {"join", f_join},
    {"sort", f_sort}, {"unique", f_unique}, {"min", f_min}, {"max", f_max}, {"sum", f_sum},
    {"items", f_items}, {"dictsort", f_dictsort}, {"batch", f_batch}, {"map", f_map},
    {"select", f_select}, {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
};

}  // namespace

filter_fn find_sequence_filter(std::string_view name) {
  auto it = kSequenceFilters.find(name);
  return it != kSequenceFilters.end() ? it->second : nullptr;
}

}  // namespace troupe
