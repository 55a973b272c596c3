#include "cli/bench/bench_flags.h"

#include <cmath>
#include <cstdlib>

namespace troupe::bench {

std::string flag_values::get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end() && !it->second.empty()) return it->second.back();
  if (auto it = defaults_.find(name); it != defaults_.end()) return it->second;
  return "";
}

const std::vector<std::string>& flag_values::all(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = values_.find(name);
  return it == values_.end() ? none : it->second;
}

result<int64_t> flag_values::get_int(const std::string& name) const {
  const std::string text = get(name);
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size()) {
    return make_error("--" + name + ": expected an integer, got '" + text + "'");
  }
  return static_cast<int64_t>(v);
}

result<double> flag_values::get_double(const std::string& name) const {
  const std::string text = get(name);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || std::isnan(v)) {
    return make_error("--" + name + ": expected a number, got '" + text + "'");
  }
  return v;
}

void flag_values::set_defaults(const std::vector<flag_spec>& specs) {
  for (const flag_spec& s : specs) {
    if (!s.default_value.empty()) defaults_[s.name] = s.default_value;
  }
}

void flag_values::finalize() {
  effective_.clear();
  for (const auto& [k, v] : defaults_) effective_[k] = {v};
  for (const auto& [k, v] : values_) effective_[k] = v;
}

namespace {

const flag_spec* find_spec(const std::vector<flag_spec>& specs, const std::string& name) {
  for (const flag_spec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool looks_like_flag(const std::string& s) { return s.size() > 2 && s.rfind("--", 0) == 0; }

}  // namespace

result<flag_values> parse_flags(const std::vector<std::string>& args, const std::vector<flag_spec>& specs) {
  flag_values out;
  out.set_defaults(specs);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!looks_like_flag(arg)) return make_error("unexpected argument '" + arg + "'");
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    for (char& c : name) c = c == '_' ? '-' : c;
    const flag_spec* spec = find_spec(specs, name);
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const flag_spec& s : specs) names.push_back(s.name);
      const std::string near = nearest_name(name, names);
      return make_error("unknown flag '--" + name + "'" + (near.empty() ? "" : " (did you mean '--" + near + "'?)"));
    }
    if (spec->kind == flag_kind::boolean) {
      if (eq != std::string::npos) return make_error("flag '--" + name + "' takes no value");
      out.add(name, "true");
    } else if (eq != std::string::npos) {
      out.add(name, arg.substr(eq + 1));
    } else if (spec->kind == flag_kind::value) {
      if (i + 1 >= args.size() || looks_like_flag(args[i + 1])) return make_error("flag '--" + name + "' needs a value");
      out.add(name, args[++i]);
    } else {
      size_t n = 0;
      while (i + 1 < args.size() && !looks_like_flag(args[i + 1])) out.add(name, args[++i]), ++n;
      if (n == 0) return make_error("flag '--" + name + "' needs a value");
    }
  }
  out.finalize();
  return out;
}

flag_values flags_from_rest(const std::vector<std::pair<std::string, std::string>>& rest,
                            const std::vector<flag_spec>& specs) {
  flag_values out;
  out.set_defaults(specs);
  for (const auto& [k, v] : rest) {
    const flag_spec* spec = find_spec(specs, k);
    out.add(k, spec != nullptr && spec->kind == flag_kind::boolean ? "true" : v);
  }
  out.finalize();
  return out;
}

std::vector<command_flag> as_command_flags(const std::vector<flag_spec>& specs) {
  std::vector<command_flag> out;
  for (const flag_spec& s : specs) {
    out.push_back({s.name, s.kind != flag_kind::boolean, s.default_value});
  }
  return out;
}

std::vector<flag_spec> dataset_flag_specs() {
  return {{"dataset", flag_kind::value, "random"},     {"dataset-path", flag_kind::value, ""},
          {"num-prompts", flag_kind::value, "1000"},   {"input-len", flag_kind::value, "1024"},
          {"output-len", flag_kind::value, "128"},     {"range-ratio", flag_kind::value, "0"},
          {"prefix-len", flag_kind::value, "256"},     {"num-prefix-groups", flag_kind::value, "10"},
          {"repeat-block-len", flag_kind::value, "64"}};
}

result<dataset_options> dataset_options_from(const flag_values& f) {
  dataset_options o;
  auto kind = parse_dataset_kind(f.get("dataset"));
  if (!kind) return std::move(kind).take_error();
  o.kind = *kind;
  o.dataset_path = f.get("dataset-path");
  o.output_len_set = f.has("output-len");
  struct int_flag {
    const char* name;
    int64_t* field;
  };
  for (const int_flag& i : {int_flag{"num-prompts", &o.num_prompts}, int_flag{"input-len", &o.input_len},
                            int_flag{"output-len", &o.output_len}, int_flag{"prefix-len", &o.prefix_len},
                            int_flag{"num-prefix-groups", &o.num_prefix_groups},
                            int_flag{"repeat-block-len", &o.repeat_block_len}}) {
    auto v = f.get_int(i.name);
    if (!v) return std::move(v).take_error();
    *i.field = *v;
  }
  auto r = f.get_double("range-ratio");
  if (!r) return std::move(r).take_error();
  o.range_ratio = *r;
  if (o.kind != dataset_kind::sharegpt && !o.dataset_path.empty()) {
    return make_error("--dataset-path: only for --dataset sharegpt");
  }
  return o;
}

}  // namespace troupe::bench
