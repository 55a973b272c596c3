// Flags of the `bench` subcommands. `bench serve` is not an engine command
// (no config keys): parse_flags reads its argv against a list of specs.
// `bench throughput` / `latency` take config keys through config/parse_args
// and hand their own flags here as flag_values. Every problem names the
// flag; unknown flags get the nearest name as a suggestion.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench/datasets.h"
#include "common/result.h"
#include "config/config_loader.h"

namespace troupe::bench {

enum class flag_kind { value, boolean, multi };  // multi: one or more values (--goodput a b)

struct flag_spec {
  std::string name;  // without dashes
  flag_kind kind = flag_kind::value;
  std::string default_value;  // "" for none
};

class flag_values {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // The last value given, else the spec's default ("" when none).
  std::string get(const std::string& name) const;
  const std::vector<std::string>& all(const std::string& name) const;
  result<int64_t> get_int(const std::string& name) const;
  result<double> get_double(const std::string& name) const;  // accepts "inf"
  bool get_bool(const std::string& name) const { return has(name) && get(name) != "false"; }
  void add(const std::string& name, std::string value) { values_[name].push_back(std::move(value)); }
  void set_defaults(const std::vector<flag_spec>& specs);
  // Every flag with its effective value(s), for the JSON "config".
  const std::map<std::string, std::vector<std::string>>& effective() const { return effective_; }
  void finalize();  // computes effective() from given values and defaults

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, std::string> defaults_;
  std::map<std::string, std::vector<std::string>> effective_;
};

// `--name value`, `--name=value`, `--flag`, `--multi v1 v2 ...`.
result<flag_values> parse_flags(const std::vector<std::string>& args, const std::vector<flag_spec>& specs);

// From parse_args' command flags (`rest`).
flag_values flags_from_rest(const std::vector<std::pair<std::string, std::string>>& rest,
                            const std::vector<flag_spec>& specs);
std::vector<command_flag> as_command_flags(const std::vector<flag_spec>& specs);

// The dataset flags every bench command takes (--dataset, --num-prompts,
// --input-len, --output-len, --range-ratio, --dataset-path, --prefix-len,
// --num-prefix-groups, --repeat-block-len) with their defaults.
std::vector<flag_spec> dataset_flag_specs();
result<dataset_options> dataset_options_from(const flag_values& flags);

}  // namespace troupe::bench
