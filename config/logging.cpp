// Named stderr loggers. Creation goes through one mutex so that two threads
// asking for a new logger at once never both register it (spdlog throws on a
// duplicate name).
#include "config/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>

namespace troupe {
namespace {

constexpr const char* pattern = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v";
constexpr const char* subsystem_names[] = {"net",  "sched", "kv",    "worker", "spec",
                                           "lora", "cfg",   "model", "engine"};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// Guarded by registry_mutex().
spdlog::level::level_enum current_level = spdlog::level::info;

spdlog::level::level_enum to_level(const std::string& level) {
  if (level == "trace") return spdlog::level::trace;
  if (level == "debug") return spdlog::level::debug;
  if (level == "warn") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  if (level == "off") return spdlog::level::off;
  return spdlog::level::info;
}

const std::shared_ptr<spdlog::sinks::stderr_sink_mt>& stderr_sink() {
  static const auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return sink;
}

// REQUIRES: registry_mutex() held.
std::shared_ptr<spdlog::logger> get_or_create_locked(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(name, stderr_sink());
  logger->set_pattern(pattern);
  logger->set_level(current_level);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

void setup_logging(const std::string& level) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  current_level = to_level(level);
  for (const char* name : subsystem_names) get_or_create_locked(name)->set_level(current_level);
  // Lines logged through spdlog::info(...) land on stderr, as `engine`.
  spdlog::set_default_logger(get_or_create_locked("engine"));
}

std::shared_ptr<spdlog::logger> get_logger(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return get_or_create_locked(name);
}

}  // namespace troupe
