// `troupe worker`: one pipeline stage of a head in another process
// (docs/parallelism.md "Several processes"):
//
//   troupe worker --connect HOST:PORT [--rank-offset R] --model DIR
//                 [--config FILE] [--<config-key> VALUE]...
//
// The model, config and flags are the head's (the head checks the build,
// the model and the sizes and refuses a worker that differs, naming the
// difference). --rank-offset R runs the stage whose first rank is R (R =
// stage x tensor_parallel_size); without it the head picks the next free
// stage. Runs until the head shuts down (exit 0) or is lost (exit 1).
#include <cstdlib>

#include "actors/worker/remote_stages.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "config/config_loader.h"

namespace troupe {

int run_worker(const std::vector<std::string>& args) {
  const std::vector<command_flag> flags = {{"connect", true},
                                           {"rank-offset", true, "the head picks a stage"}};
  if (show_help(args, "usage: troupe worker --connect HOST:PORT [--rank-offset R] --model DIR "
                        "[head's flags]\nOne pipeline stage for the head at HOST:PORT "
                        "(docs/parallelism.md); give it the head's model and config flags.",
                        flags, true)) return 0;
  auto parsed = parse_args(args, flags);
  if (!parsed) {
    print_error(parsed.error_message());
    return 2;
  }
  std::string host;
  int port = 0, rank_offset = -1;
  for (const auto& [flag, value] : parsed->rest) {
    if (flag == "connect") {
      const size_t colon = value.rfind(':');
      char* end = nullptr;
      const long p = colon == std::string::npos ? 0 : std::strtol(value.c_str() + colon + 1, &end, 10);
      if (colon == std::string::npos || colon == 0 || *end != '\0' || p < 1 || p > 65535) {
        print_error("--connect: expected HOST:PORT (the head's distributed_host and "
                    "distributed_port), got '" + value + "'");
        return 2;
      }
      host = value.substr(0, colon);
      port = static_cast<int>(p);
    }
    if (flag == "rank-offset") {
      char* end = nullptr;
      const long r = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || r < 0) {
        print_error("--rank-offset: expected the stage's first rank (a number), got '" + value + "'");
        return 2;
      }
      rank_offset = static_cast<int>(r);
    }
  }
  if (host.empty()) {
    print_error("--connect HOST:PORT: required (the head's distributed_host:distributed_port)");
    return 2;
  }
  command_setup setup;
  if (!prepare_command(parsed->config, setup)) return 2;
  return run_stage_worker(parsed->config, setup.model, host, port, rank_offset);
}

}  // namespace troupe
