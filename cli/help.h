// --help / -h for troupe's commands: the usage line, every flag of the
// command with its default, and for the engine commands (generate, serve,
// worker, bench throughput / latency) every config key as a --kebab-case
// flag with its default and where the keys are documented. Printed on
// stdout; the command then exits 0.
#pragma once

#include <string>
#include <vector>

#include "config/config_loader.h"

namespace troupe {

// Whether --help or -h is among the arguments.
bool help_requested(const std::vector<std::string>& args);

// `usage` (first lines, as written), then the flags, then the config keys
// when `config_keys`.
std::string command_help(const std::string& usage, const std::vector<command_flag>& flags,
                         bool config_keys);

}  // namespace troupe
