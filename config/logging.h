// Logging: one spdlog logger per subsystem (net, sched, kv, worker, spec,
// lora, cfg, model, engine), all writing to stderr with one pattern:
//   [2026-11-21 10:00:00.123] [sched] [info] message
// stdout is never written: it is reserved for command output.
//
// Thread-safe. get_logger works without setup_logging (tests): a logger made
// on demand gets the current level (info until setup_logging says otherwise).
// spdlog's default logger (spdlog::info(...)) is redirected to stderr too.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace troupe {

// Creates the named loggers (once) and sets every troupe logger to `level`:
// trace | debug | info | warn | error | off (validated config values; any
// other string means info).
void setup_logging(const std::string& level);

// The logger called `name`, created on first use. Never null.
std::shared_ptr<spdlog::logger> get_logger(const char* name);

}  // namespace troupe
