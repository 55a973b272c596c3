// `troupe bench serve|throughput|latency`: dispatch and usage.
#include <cstdio>

#include "cli/bench/bench_commands.h"
#include "cli/commands.h"

namespace troupe {

namespace {

constexpr const char* bench_usage =
    "usage: troupe bench <serve|throughput|latency> [options]   (docs/bench.md)\n"
    "\n"
    "  serve       load an OpenAI-compatible server over HTTP (streaming):\n"
    "              troupe bench serve [--base-url http://HOST:PORT] [--endpoint /v1/completions]\n"
    "                  [--model NAME] [--dataset random|sharegpt|prefix|repeat] [--num-prompts N]\n"
    "                  [--input-len I] [--output-len O] [--range-ratio R] [--request-rate RPS|inf]\n"
    "                  [--burstiness B] [--max-concurrency C] [--goodput ttft:MS tpot:MS e2el:MS]\n"
    "                  [--metric-percentiles 90,99] [--json-out FILE] ...\n"
    "  throughput  offline, through the engine: troupe bench throughput --model DIR [--config FILE]\n"
    "                  [--<config-key> VALUE]... [dataset flags as serve] [--json-out FILE]\n"
    "  latency     one batch, through the engine: troupe bench latency --model DIR [--config FILE]\n"
    "                  [--batch-size B] [--input-len I] [--output-len O] [--num-iters N]\n"
    "                  [--num-iters-warmup W] [--json-out FILE]\n";

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(bench_usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "serve") return bench::run_bench_serve(rest);
  if (args[0] == "throughput") return bench::run_bench_throughput(rest);
  if (args[0] == "latency") return bench::run_bench_latency(rest);
  print_error("unknown bench command '" + args[0] + "'\n" + bench_usage);
  return 2;
}

}  // namespace troupe
