// What `troupe generate` is asked to do: the prompts (from --prompt-ids or a
// JSONL --prompts-file) with their sampling parameters, built from the
// command's flags. Every problem is a user-facing error naming the flag or
// the file line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "actors/sampling_params.h"
#include "common/result.h"
#include "config/config_loader.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

struct generate_prompt {
  std::vector<int32_t> prompt_ids;
  sampling_params params;
  std::string lora;  // the LoRA adapter's name ("": the base model), resolved by the caller
};

struct generate_inputs {
  std::vector<generate_prompt> prompts;
  bool json = false;
};

// The flags `generate` adds to the config keys.
const std::vector<command_flag>& generate_flags();

// Builds the prompts from the command flags (`rest` of parse_args), using
// `default_seed` (the config's seed) for prompts that name none. Text prompts
// are encoded with `tok` (special tokens added, as vLLM does for
// completions); without a tokenizer they are an error.
result<generate_inputs> build_generate_inputs(
    const std::vector<std::pair<std::string, std::string>>& flags, int64_t default_seed,
    int64_t vocab_size, const tokenizer* tok);

}  // namespace troupe
