// Loading an engine_config: defaults, then a YAML file, then flags.
//
// Every key is described once in `fields()` (name + member pointer); YAML
// values and flag values both go through `set_from_node`, so a type error
// reads the same wherever it came from. yaml-cpp throws: every call into it
// sits behind a catch that turns the exception into a problem.
#include "config/config_loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <variant>

namespace troupe {
namespace {

using problem_list = std::vector<std::string>;

using field_ptr = std::variant<
    std::string engine_config::*, bool engine_config::*, int64_t engine_config::*,
    double engine_config::*, std::optional<int64_t> engine_config::*,
    std::vector<std::string> engine_config::*, std::vector<lora_module> engine_config::*,
    std::map<std::string, std::string> engine_config::*>;

struct field {
  std::string name;  // snake_case
  field_ptr ptr;
};

// Schema order: the same order as engine_config's members.
const std::vector<field>& fields() {
  using c = engine_config;
  static const std::vector<field> table = {
      {"model", &c::model}, {"tokenizer", &c::tokenizer},
      {"served_model_name", &c::served_model_name},
      {"skip_tokenizer_init", &c::skip_tokenizer_init}, {"backend", &c::backend},
      {"dtype", &c::dtype}, {"load_format", &c::load_format}, {"quantization", &c::quantization},
      {"seed", &c::seed},
      {"max_model_len", &c::max_model_len}, {"block_size", &c::block_size},
      {"gpu_memory_utilization", &c::gpu_memory_utilization},
      {"cpu_offload_gb", &c::cpu_offload_gb},
      {"num_gpu_blocks_override", &c::num_gpu_blocks_override},
      {"swap_space", &c::swap_space}, {"cpu_kvcache_space", &c::cpu_kvcache_space},
      {"kv_cache_dtype", &c::kv_cache_dtype},
      {"enable_prefix_caching", &c::enable_prefix_caching},
      {"max_num_seqs", &c::max_num_seqs},
      {"max_num_batched_tokens", &c::max_num_batched_tokens},
      {"enable_chunked_prefill", &c::enable_chunked_prefill},
      {"scheduling_policy", &c::scheduling_policy},
      {"kv_admission", &c::kv_admission},
      {"max_num_seqs_per_request", &c::max_num_seqs_per_request}, {"max_n", &c::max_n},
      {"max_waiting_seqs", &c::max_waiting_seqs}, {"max_waiting_tokens", &c::max_waiting_tokens},
      {"enforce_eager", &c::enforce_eager},
      {"async_scheduling", &c::async_scheduling},
      {"batch_invariant", &c::batch_invariant},
      {"tensor_parallel_size", &c::tensor_parallel_size},
      {"pipeline_parallel_size", &c::pipeline_parallel_size},
      {"distributed_host", &c::distributed_host}, {"distributed_port", &c::distributed_port},
      {"distributed_timeout", &c::distributed_timeout},
      {"speculative_config", &c::speculative_config}, {"enable_lora", &c::enable_lora},
      {"lora_modules", &c::lora_modules}, {"max_loras", &c::max_loras},
      {"max_lora_rank", &c::max_lora_rank}, {"max_cpu_loras", &c::max_cpu_loras},
      {"allow_runtime_lora_updating", &c::allow_runtime_lora_updating},
      {"lora_allowed_dirs", &c::lora_allowed_dirs},
      {"structured_outputs_disable_any_whitespace", &c::structured_outputs_disable_any_whitespace},
      {"chat_template", &c::chat_template}, {"tool_call_parser", &c::tool_call_parser},
      {"enable_auto_tool_choice", &c::enable_auto_tool_choice},
      {"host", &c::host}, {"port", &c::port},
      {"api_key", &c::api_key}, {"http_read_timeout", &c::http_read_timeout},
      {"http_write_timeout", &c::http_write_timeout}, {"drain_timeout", &c::drain_timeout},
      {"num_io_threads", &c::num_io_threads}, {"http_send_buffer_kib", &c::http_send_buffer_kib},
      {"log_level", &c::log_level}, {"log_expert_counts", &c::log_expert_counts},
  };
  return table;
}

std::string replace_all(std::string s, char from, char to) {
  std::replace(s.begin(), s.end(), from, to);
  return s;
}

// Accepts both spellings (snake_case and kebab-case) for lookups.
const field* find_field(const std::string& name) {
  const std::string snake = replace_all(name, '-', '_');
  for (const field& f : fields()) {
    if (f.name == snake) return &f;
  }
  return nullptr;
}

bool is_bool_field(const field* f) {
  return f && std::holds_alternative<bool engine_config::*>(f->ptr);
}

// List keys: repeatable flags, and several values after one flag.
bool is_list_field(const field* f) {
  return f && (std::holds_alternative<std::vector<std::string> engine_config::*>(f->ptr) ||
               std::holds_alternative<std::vector<lora_module> engine_config::*>(f->ptr));
}

std::string describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "null";
}

std::string expected(const std::string& key, const char* what, const YAML::Node& node) {
  return key + ": expected " + what + ", got " + describe(node);
}

// The whole text as a T (int64_t or a finite double), or nullopt.
template <class T>
std::optional<T> to_num(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size();
  return ok && std::isfinite(static_cast<double>(v)) ? std::optional<T>(v) : std::nullopt;
}

std::optional<bool> to_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// A scalar parsed by `parse` into `dst`, or one problem naming `what` was expected.
template <class T, class Parse>
void set_scalar(T& dst, const YAML::Node& node, const std::string& key, const char* what,
                problem_list& out, Parse parse) {
  std::optional<T> v;
  if (node.IsScalar()) v = parse(node.Scalar());
  if (v) dst = *v;
  else out.push_back(expected(key, what, node));
}

std::optional<std::string> as_string(const std::string& s) { return s; }

std::string unknown_key(const std::string& path, const std::string& word,
                        const std::vector<std::string>& candidates) {
  const std::string near = nearest_name(word, candidates);
  return path + ": unknown key" + (near.empty() ? "" : " (did you mean '" + near + "'?)");
}

// `name=path`, `{name: .., path: ..}`; missing parts stay empty (the validator
// reports them).
void parse_lora_entry(const YAML::Node& node, const std::string& key,
                      std::vector<lora_module>& dst, problem_list& out) {
  lora_module m;
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    const size_t eq = s.find('=');
    if (eq == std::string::npos) {
      out.push_back(expected(key, "'name=path'", node));
      return;
    }
    dst.push_back({s.substr(0, eq), s.substr(eq + 1)});
    return;
  }
  if (!node.IsMap()) {
    out.push_back(expected(key, "'name=path' or a mapping {name, path}", node));
    return;
  }
  static const std::vector<std::string> keys = {"name", "path"};
  for (const auto& kv : node) {
    const std::string k = kv.first.Scalar();
    const std::string path = key + "." + k;
    if (k != "name" && k != "path") {
      out.push_back(unknown_key(path, k, keys));
      continue;
    }
    set_scalar(k == "name" ? m.name : m.path, kv.second, path, "a string", out, as_string);
  }
  dst.push_back(std::move(m));
}

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};

// Sets one key from a YAML value (a flag's text arrives as a scalar node).
void set_from_node(engine_config& config, const field& f, const YAML::Node& node,
                   problem_list& out) {
  const std::string& key = f.name;
  std::visit(
      overloaded{
          [&](std::string engine_config::*m) {
            if (node.IsNull()) config.*m = "";
            else set_scalar(config.*m, node, key, "a string", out, as_string);
          },
          [&](bool engine_config::*m) {
            set_scalar(config.*m, node, key, "true or false", out, to_bool);
          },
          [&](int64_t engine_config::*m) {
            set_scalar(config.*m, node, key, "an integer", out, to_num<int64_t>);
          },
          [&](double engine_config::*m) {
            set_scalar(config.*m, node, key, "a number", out, to_num<double>);
          },
          [&](std::optional<int64_t> engine_config::*m) {
            if (node.IsNull()) { (config.*m).reset(); return; }
            int64_t v = 0;
            const size_t before = out.size();
            set_scalar(v, node, key, "an integer", out, to_num<int64_t>);
            if (out.size() == before) config.*m = v;
          },
          [&](std::vector<std::string> engine_config::*m) {
            auto& dst = config.*m;
            dst.clear();
            if (node.IsNull()) return;
            if (node.IsScalar()) { dst.push_back(node.Scalar()); return; }
            if (!node.IsSequence()) { out.push_back(expected(key, "a list", node)); return; }
            for (size_t i = 0; i < node.size(); ++i) {
              dst.emplace_back();
              set_scalar(dst.back(), node[i], key + "[" + std::to_string(i) + "]",
                         "a string", out, as_string);
            }
          },
          [&](std::vector<lora_module> engine_config::*m) {
            (config.*m).clear();
            if (node.IsNull()) return;
            if (!node.IsSequence()) { out.push_back(expected(key, "a list", node)); return; }
            for (size_t i = 0; i < node.size(); ++i) {
              parse_lora_entry(node[i], key + "[" + std::to_string(i) + "]", config.*m, out);
            }
          },
          [&](std::map<std::string, std::string> engine_config::*m) {
            auto& dst = config.*m;
            dst.clear();
            if (node.IsNull()) return;
            if (!node.IsMap()) { out.push_back(expected(key, "a mapping", node)); return; }
            for (const auto& kv : node) {
              const std::string k = kv.first.Scalar();
              if (kv.second.IsNull()) dst[k] = "";
              else set_scalar(dst[k], kv.second, key + "." + k, "a string", out, as_string);
            }
          },
      },
      f.ptr);
}

std::string yaml_error_text(const YAML::Exception& e) {
  if (e.mark.is_null()) return e.msg;
  return "line " + std::to_string(e.mark.line + 1) + ", column " +
         std::to_string(e.mark.column + 1) + ": " + e.msg;
}

bool read_text(const std::string& path, std::string& text, std::string& why) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    why = std::strerror(EISDIR);
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

void load_yaml_into(const std::string& path, engine_config& config, problem_list& out) {
  std::string text, why;
  if (!read_text(path, text, why)) {
    out.push_back("cannot read config file '" + path + "': " + why);
    return;
  }
  const std::string where = "config file '" + path + "': ";
  try {
    const YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return;  // empty or comments only
    if (!root.IsMap()) {
      out.push_back(where + "top level must be a mapping of keys");
      return;
    }
    for (const auto& kv : root) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
      if (const field* f = find_field(key)) {
        set_from_node(config, *f, kv.second, out);
        continue;
      }
      out.push_back(unknown_key(key, key, config_keys()));
    }
  } catch (const YAML::Exception& e) {
    out.push_back(where + yaml_error_text(e));
  }
}

// ---- Flags ----------------------------------------------------------------

// One flag as read from argv: a config key, a command flag, or a problem to
// report at its place.
struct flag_item {
  const field* target = nullptr;
  const command_flag* command = nullptr;
  std::string value;
  std::string problem;
};

bool looks_like_flag(const std::string& token) { return token.rfind("--", 0) == 0; }

const command_flag* find_command_flag(const std::string& name,
                                      const std::vector<command_flag>& flags) {
  for (const command_flag& f : flags) {
    if (replace_all(f.name, '_', '-') == name) return &f;
  }
  return nullptr;
}

std::string unknown_flag(const std::string& shown, const std::string& name,
                         const std::vector<command_flag>& command_flags) {
  std::vector<std::string> candidates = {"config"};
  for (const std::string& k : config_keys()) candidates.push_back(replace_all(k, '_', '-'));
  for (const command_flag& f : command_flags) candidates.push_back(f.name);
  const std::string near = nearest_name(name, candidates);
  return "unknown flag '" + shown + "'" + (near.empty() ? "" : " (did you mean '--" + near + "'?)");
}

// Reads argv into flag items; `--config` goes to `config_file`. A list key
// takes every value up to the next flag (`--lora-modules a=/a b=/b`, as
// vLLM's nargs='+'), one item each; `--key=value` takes that one value only.
std::vector<flag_item> read_flags(const std::vector<std::string>& args,
                                  const std::vector<command_flag>& command_flags,
                                  std::string& config_file) {
  std::vector<flag_item> items;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    flag_item item;
    std::vector<std::string> more_values;  // a list key's values after the first
    if (!looks_like_flag(arg) || arg.size() == 2) {
      item.problem = "unexpected argument '" + arg + "'";
      items.push_back(std::move(item));
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string shown = arg.substr(0, eq);
    const std::string name = replace_all(shown.substr(2), '_', '-');
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    auto take_next = [&] {
      if (!value && i + 1 < args.size() && !looks_like_flag(args[i + 1])) value = args[++i];
      return value.has_value();
    };
    const std::string needs_value = "flag '" + shown + "' needs a value";
    const std::string takes_none = "flag '" + shown + "' takes no value";
    const field* f = find_field(name);
    const command_flag* cf = f ? nullptr : find_command_flag(name, command_flags);
    const field* negated = name.rfind("no-", 0) == 0 ? find_field(name.substr(3)) : nullptr;
    if (name == "config") {
      if (!take_next()) item.problem = needs_value;
      else if (!config_file.empty()) item.problem = "flag '--config' given more than once";
      else config_file = *value;
    } else if (is_bool_field(f)) {
      item.target = f;
      if (!value && i + 1 < args.size() && (args[i + 1] == "true" || args[i + 1] == "false")) {
        value = args[++i];
      }
      item.value = value.value_or("true");
    } else if (f) {
      item.target = f;
      if (take_next()) item.value = *value;
      else item.problem = needs_value;
      if (is_list_field(f) && eq == std::string::npos) {
        while (i + 1 < args.size() && !looks_like_flag(args[i + 1])) {
          more_values.push_back(args[++i]);
        }
      }
    } else if (is_bool_field(negated) && !cf) {
      item.target = negated;
      item.value = "false";
      if (value) item.problem = takes_none;
    } else if (cf) {
      item.command = cf;
      if (cf->takes_value && !take_next()) item.problem = needs_value;
      else if (!cf->takes_value && value) item.problem = takes_none;
      else item.value = value.value_or("");
    } else {
      item.problem = unknown_flag(shown, name, command_flags);
      take_next();  // its value, if any, belongs to it, not to the next flag
    }
    if (item.target || item.command || !item.problem.empty()) items.push_back(std::move(item));
    for (std::string& v : more_values) {
      flag_item extra;
      extra.target = f;
      extra.value = std::move(v);
      items.push_back(std::move(extra));
    }
  }
  return items;
}

// Applies one flag's value. Repeatable list flags replace the file's list on
// their first occurrence and append afterwards.
void apply_flag(engine_config& config, const field& f, const std::string& value,
                std::set<std::string>& lists_seen, problem_list& out) {
  const bool first = lists_seen.insert(f.name).second;
  if (const auto* list = std::get_if<std::vector<std::string> engine_config::*>(&f.ptr)) {
    std::vector<std::string>& dst = config.**list;
    if (first) dst.clear();
    dst.push_back(value);
    return;
  }
  if (f.name != "lora_modules" && f.name != "speculative_config") {
    set_from_node(config, f, YAML::Node(value), out);
    return;
  }
  YAML::Node node(value);
  if (!value.empty() && value.front() == '{') {
    try {
      node = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      out.push_back(f.name + ": cannot parse '" + value + "' as JSON: " + yaml_error_text(e));
      return;
    }
  } else if (f.name == "speculative_config" && value.empty()) {
    node = YAML::Node();  // `--speculative-config ''` clears it
  }
  if (f.name == "speculative_config") {
    set_from_node(config, f, node, out);
    return;
  }
  if (first) config.lora_modules.clear();
  parse_lora_entry(node, f.name, config.lora_modules, out);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> config_key_defaults() {
  const engine_config d;
  std::vector<std::pair<std::string, std::string>> out;
  for (const field& f : fields()) {
    std::string text = std::visit(
        overloaded{
            [&](std::string engine_config::*m) { return d.*m; },
            [&](bool engine_config::*m) { return std::string(d.*m ? "true" : "false"); },
            [&](int64_t engine_config::*m) { return std::to_string(d.*m); },
            [&](double engine_config::*m) {
              std::ostringstream os;
              os << d.*m;
              return os.str();
            },
            [&](std::optional<int64_t> engine_config::*m) {
              return (d.*m).has_value() ? std::to_string(*(d.*m)) : std::string("auto");
            },
            [&](std::vector<std::string> engine_config::*m) {
              std::string joined;
              for (const std::string& v : d.*m) joined += (joined.empty() ? "" : " ") + v;
              return joined;
            },
            [&](std::vector<lora_module> engine_config::*) { return std::string(); },
            [&](std::map<std::string, std::string> engine_config::*) { return std::string(); },
        },
        f.ptr);
    out.emplace_back(f.name, std::move(text));
  }
  return out;
}

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const field& f : fields()) k.push_back(f.name);
    return k;
  }();
  return keys;
}

result<engine_config> load_config_file(const std::string& path, engine_config base) {
  problem_list problems;
  load_yaml_into(path, base, problems);
  if (!problems.empty()) return make_error(format_config_problems(problems));
  return base;
}

result<parsed_args> parse_args(const std::vector<std::string>& args,
                               const std::vector<command_flag>& command_flags) {
  parsed_args parsed;
  problem_list problems;
  const std::vector<flag_item> items = read_flags(args, command_flags, parsed.config_file);
  if (!parsed.config_file.empty()) load_yaml_into(parsed.config_file, parsed.config, problems);
  std::set<std::string> lists_seen;
  for (const flag_item& item : items) {
    if (!item.problem.empty()) {
      problems.push_back(item.problem);
    } else if (item.command) {
      parsed.rest.emplace_back(item.command->name, item.value);
    } else {
      try {
        apply_flag(parsed.config, *item.target, item.value, lists_seen, problems);
      } catch (const YAML::Exception& e) {
        problems.push_back(item.target->name + ": " + yaml_error_text(e));
      }
    }
  }
  if (!problems.empty()) return make_error(format_config_problems(problems));
  return parsed;
}

bool chat_template_is_inline(const std::string& value) {
  return value.empty() || value.find("{{") != std::string::npos || value.find("{%") != std::string::npos;
}

result<std::string> chat_template_text(const std::string& value) {
  if (chat_template_is_inline(value)) return value;
  std::ifstream in(value, std::ios::binary);
  if (!in) return make_error("chat_template: cannot read '" + value + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace troupe
