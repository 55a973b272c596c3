// Request arrival times for `bench serve`, as vLLM's get_request: gaps drawn
// from a gamma distribution with shape `burstiness` and mean 1 / rate
// (burstiness 1: a Poisson process; < 1 burstier; inf: evenly spaced),
// accumulated, then scaled so that the last request arrives at exactly
// n / rate. Rate inf: everything at time 0.
#pragma once

#include <cstdint>
#include <vector>

#include "cli/bench/datasets.h"

namespace troupe::bench {

// Seconds from the start of the run, one per request, non-decreasing.
// REQUIRES: rate > 0 (inf allowed), burstiness > 0 (inf allowed).
std::vector<double> arrival_times(int64_t n, double rate, double burstiness, bench_rng& rng);

}  // namespace troupe::bench
