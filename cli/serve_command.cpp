// `troupe serve`: the OpenAI-compatible HTTP server.
//
//   troupe serve --model DIR [--config FILE] [--<config-key> VALUE]...
//
// Loads and validates the config as `generate` does, creates the engine,
// binds host:port and serves until SIGINT/SIGTERM (then drains; exit 0).
#include "actors/engine.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "config/config_loader.h"
#include "config/logging.h"
#include "net/server.h"

namespace troupe {

int run_serve(const std::vector<std::string>& args) {
  auto parsed = parse_args(args, {});
  if (!parsed) {
    print_error(parsed.error_message());
    return 2;
  }
  const engine_config& config = parsed->config;
  command_setup setup;
  if (!prepare_command(config, setup)) return 2;
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
