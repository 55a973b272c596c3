// The `troupe bench` subcommands (docs/bench.md). Each takes the arguments
// after its name and returns the exit status (0 ok, 1 runtime failure, 2
// usage or configuration error).
#pragma once

#include <string>
#include <vector>

namespace troupe::bench {

int run_bench_serve(const std::vector<std::string>& args);
int run_bench_throughput(const std::vector<std::string>& args);
int run_bench_latency(const std::vector<std::string>& args);

}  // namespace troupe::bench
