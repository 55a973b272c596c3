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

// When --help or -h is among `args`: prints `usage` (first lines, as
// written), the flags, and the config keys when `config_keys`, on stdout,
// and returns true (the command then exits 0).
bool show_help(const std::vector<std::string>& args, const std::string& usage,
               const std::vector<command_flag>& flags, bool config_keys);

}  // namespace troupe
