// `troupe serve`: the OpenAI-compatible HTTP server.
//
//   troupe serve --model DIR [--config FILE] [--<config-key> VALUE]...
//                [--dry-run [--gpu-memory-gib G]]
//
// Loads and validates the config as `generate` does, creates the engine,
// binds host:port and serves until SIGINT/SIGTERM (then drains; exit 0).
// With --dry-run, prints each tensor-parallel rank's memory plan instead
// and exits (cli/dry_run.cpp).
#include <cstdlib>

#include "actors/engine.h"
#include "actors/worker/load_runners.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "config/config_loader.h"
#include "config/logging.h"
#include "net/server.h"

namespace troupe {

namespace {

// The visible GPU's memory in GiB, else 80 (an H100).
double visible_gpu_gib() {
  const int64_t bytes = visible_gpu_bytes();
  return bytes > 0 ? double(bytes) / (1024.0 * 1024.0 * 1024.0) : 80.0;
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  const std::vector<command_flag> flags = {{"dry-run", false},
                                           {"gpu-memory-gib", true, "device 0's memory"}};
  if (show_help(args, "usage: troupe serve --model DIR [--config FILE] [options]\n"
                        "The OpenAI-compatible HTTP server (docs/server.md). --dry-run prints "
                        "every rank's memory plan\n(on GPUs of --gpu-memory-gib) without "
                        "loading anything.",
                        flags, true)) return 0;
  auto parsed = parse_args(args, flags);
  if (!parsed) {
    print_error(parsed.error_message());
    return 2;
  }
  const engine_config& config = parsed->config;
  bool dry_run = false;
  double gpu_gib = 0;
  for (const auto& [flag, value] : parsed->rest) {
    if (flag == "dry-run") dry_run = true;
    if (flag == "gpu-memory-gib") {
      char* end = nullptr;
      gpu_gib = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(gpu_gib > 0)) {
        print_error("--gpu-memory-gib: expected a positive number of GiB, got '" + value + "'");
        return 2;
      }
    }
  }
  if (gpu_gib > 0 && !dry_run) {
    print_error("--gpu-memory-gib: only with --dry-run (serving plans on the GPU it has)");
    return 2;
  }
  command_setup setup;
  if (!prepare_command(config, setup)) return 2;
  if (dry_run) return run_dry_run(config, setup.model, gpu_gib > 0 ? gpu_gib : visible_gpu_gib());
  auto eng = engine::create(config, setup.tok);
  if (!eng) {
    print_error(eng.error_message());
    return 1;
  }
  auto log = get_logger("net");
  const engine_limits& limits = (*eng)->limits();
  const int64_t kv_tokens = (limits.num_blocks - 1) * limits.block_size;
  log->info("model {} ({}), max_model_len {}, KV cache {} blocks = {} tokens (max concurrency "
            "{:.2f}x at max_model_len), tokenizer: {}",
            config.model, limits.backend, limits.max_model_len, limits.num_blocks - 1, kv_tokens,
            double(kv_tokens) / double(limits.max_model_len), setup.tok ? "yes" : "none (token ids only)");
  int status = 0;
  {
    http_server server(**eng, config);
    if (auto s = server.listen(config.host, config.port); !s) {
      print_error(s.error_message());
      return 1;
    }
    log->info("listening on http://{}:{}", config.host, config.port);
    status = server.run();
  }
  eng->reset();
  return status;
}

}  // namespace troupe
