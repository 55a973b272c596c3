// speculative_config: the typed view of engine_config::speculative_config
// (vLLM's SpeculativeConfig, vllm/config/speculative.py). troupe implements
// method "ngram" (prompt lookup, actors/drafter/ngram_proposer.h); vLLM's
// other methods and keys are recognised and rejected as not supported, any
// other key is unknown. Defaults and messages are vLLM's:
//   num_speculative_tokens (K): required, > 0
//   prompt_lookup_min / prompt_lookup_max: >= 1, min <= max; both unset: 5
//     and 5; one unset: the other's value
// A null value (YAML `~`, JSON null) is the same as leaving the key out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe {

struct engine_config;

struct speculative_settings {
  std::string method;                  // "" when speculative_config is unset; else "ngram"
  int32_t num_speculative_tokens = 0;  // K
  int32_t prompt_lookup_min = 0, prompt_lookup_max = 0;
  bool enabled() const { return !method.empty(); }
};

// Typed view of a speculative_config mapping as written (scalars as text).
// Every problem is appended to `problems`, each prefixed
// "speculative_config.<key>: " or "speculative_config: "; the settings
// returned are meaningful only when none was added. An empty mapping is
// "unset": disabled, no problem.
speculative_settings parse_speculative_config(const std::map<std::string, std::string>& raw,
                                              std::vector<std::string>& problems);

// The settings of a validated config (the engine's entry point).
// REQUIRES: validate_config(config, ...) reported no problem (checked).
speculative_settings speculative_settings_of(const engine_config& config);

}  // namespace troupe
