// Building an engine_config: defaults, then `--config FILE.yaml`, then
// command-line flags (--kebab-case for every key). Every problem is collected
// (never just the first): unknown keys with the nearest valid name, wrong
// types, out-of-range values, and features that do not exist yet.
//
// Command-specific flags (e.g. `generate --max-tokens`) are not config keys:
// the caller names them in `command_flags` and receives them in `rest`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/nearest_name.h"
#include "common/result.h"
#include "config/engine_config.h"
#include "model/model_config.h"

namespace troupe {

struct command_flag {
  command_flag(std::string n, bool value = true, std::string default_text = "")
      : name(std::move(n)), takes_value(value), default_value(std::move(default_text)) {}
  std::string name;       // without dashes, e.g. "max-tokens"
  bool takes_value = true;
  std::string default_value;  // for --help ("" when none)
};

struct parsed_args {
  engine_config config;                // defaults < file < flags; NOT validated
  std::vector<std::pair<std::string, std::string>> rest;  // command flags in order
  std::string config_file;             // "" when none
};

// Parses argv (without program name and subcommand). Fails with every problem
// found: unknown flag (suggesting the nearest config key or command flag),
// missing value, bad value type, YAML file unreadable / not a mapping /
// unknown key (suggestion) / wrong type (naming the key path).
result<parsed_args> parse_args(const std::vector<std::string>& args,
                               const std::vector<command_flag>& command_flags);

// Loads only a YAML file over `base` (used by parse_args; exposed for tests).
result<engine_config> load_config_file(const std::string& path, engine_config base);

// Validates a config, with the model's config when known. Returns one string
// per problem, each "key: message", in schema order; empty when valid.
std::vector<std::string> validate_config(const engine_config& config,
                                         const model_config* model);

// The model's configuration as the engine runs it: config.json from the
// `model` folder, its quantization resolved with the `quantization` key
// (model/quantization.h resolve_quantization; validate_config reports the
// same error with the others).
result<model_config> load_engine_model(const engine_config& config);
// model.quantization resolved with config's `quantization` key (the same).
status apply_quantization(const engine_config& config, model_config& model);

// Formats problems as the one error users see:
// "invalid configuration (2 problems):\n  - block_size: ...\n  - port: ...".
std::string format_config_problems(const std::vector<std::string>& problems);

// chat_template as written: "" (the tokenizer's own), the template itself
// (inline: it holds "{{" or "{%"), or a file. chat_template_text: the
// template to use ("" for the tokenizer's), or why the file cannot be read.
bool chat_template_is_inline(const std::string& value);
result<std::string> chat_template_text(const std::string& value);

// Whether this build has the CUDA backend (compiled where nvcc exists).
bool cuda_backend_built();

// All config keys, snake_case, in schema order (for help and suggestions).
const std::vector<std::string>& config_keys();
// Every config key (schema order) with its default as text: "" for empty
// strings and lists, "auto" for values chosen at start-up (--help).
std::vector<std::pair<std::string, std::string>> config_key_defaults();


}  // namespace troupe
