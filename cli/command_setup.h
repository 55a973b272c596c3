// The start of every engine command (generate, serve): logging from the
// config, config.json loaded, the whole config validated against it, the
// tokenizer loaded. Errors are the user-facing message and the exit status
// (2: usage or configuration).
#pragma once

#include <memory>
#include <string>

#include "config/config_loader.h"
#include "model/model_config.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

struct command_setup {
  model_config model;
  std::shared_ptr<const tokenizer> tok;  // null: token ids only
};

// Returns false after printing the error (the caller exits with 2).
bool prepare_command(const engine_config& config, command_setup& out);

// `serve --dry-run` (cli/dry_run.cpp): prints the memory plan of every
// tensor-parallel rank on GPUs of `gpu_gib` without loading anything.
// Returns the exit status: 0 when the configured plan fits one sequence of
// max_model_len, 1 when it does not, 2 on a configuration error.
int run_dry_run(const engine_config& config, const model_config& model, double gpu_gib);

}  // namespace troupe
