#include "cli/bench/arrivals.h"

#include <cmath>

namespace troupe::bench {

std::vector<double> arrival_times(int64_t n, double rate, double burstiness, bench_rng& rng) {
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (n == 0 || std::isinf(rate)) return t;
  double sum = 0;
  for (double& v : t) {
    sum += std::isinf(burstiness) ? 1.0 / rate : rng.gamma(burstiness, 1.0 / (rate * burstiness));
    v = sum;
  }
  if (sum > 0) {
    const double scale = (static_cast<double>(n) / rate) / sum;
    for (double& v : t) v *= scale;
  }
  return t;
}

}  // namespace troupe::bench
