#include "cli/bench/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace troupe::bench {

namespace {

// numpy's _lerp: a + (b - a) t, computed from b for t >= 0.5 (numpy does the
// same so that the result is monotonic and exact at t = 1).
double lerp(double a, double b, double t) {
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

}  // namespace

double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double n = static_cast<double>(sorted.size());
  const double pos = (n - 1.0) * (p / 100.0);
  const double lo_f = std::floor(pos);
  const size_t lo = static_cast<size_t>(lo_f);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return lerp(sorted[lo], sorted[hi], pos - lo_f);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, p);
}

distribution summarize(const std::vector<double>& values, const std::vector<double>& percentiles,
                       double scale) {
  distribution d;
  if (values.empty()) {
    for (double p : percentiles) d.percentiles.emplace_back(p, 0.0);
    return d;
  }
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const double mean = mean_of(values);
  double sq = 0;
  for (double x : values) sq += (x - mean) * (x - mean);
  d.mean = mean * scale;
  d.std = std::sqrt(sq / static_cast<double>(values.size())) * scale;
  d.median = percentile_sorted(sorted, 50) * scale;
  for (double p : percentiles) d.percentiles.emplace_back(p, percentile_sorted(sorted, p) * scale);
  return d;
}

result<goodput_slo> parse_goodput(const std::vector<std::string>& pairs) {
  goodput_slo slo;
  for (const std::string& pair : pairs) {
    const size_t colon = pair.find(':');
    const std::string name = pair.substr(0, colon);
    const std::string value = colon == std::string::npos ? "" : pair.substr(colon + 1);
    char* end = nullptr;
    const double ms = std::strtod(value.c_str(), &end);
    if (colon == std::string::npos || value.empty() || end != value.c_str() + value.size()) {
      return make_error("--goodput: expected KEY:MS pairs (ttft:500 tpot:50 e2el:2000), got '" +
                        pair + "'");
    }
    if (ms < 0) return make_error("--goodput: " + name + ": the SLO must be >= 0 ms");
    if (name == "ttft") slo.ttft_ms = ms;
    else if (name == "tpot") slo.tpot_ms = ms;
    else if (name == "e2el") slo.e2el_ms = ms;
    else return make_error("--goodput: unknown metric '" + name + "' (ttft, tpot or e2el)");
  }
  return slo;
}

std::optional<double> request_tpot(const request_record& r) {
  if (r.output_tokens <= 1) return std::nullopt;
  return (r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1);
}

bool request_is_good(const request_record& r, const goodput_slo& slo) {
  if (!r.success) return false;
  if (slo.ttft_ms && *slo.ttft_ms / 1000.0 < r.ttft) return false;
  if (slo.tpot_ms && *slo.tpot_ms / 1000.0 < request_tpot(r).value_or(0.0)) return false;
  if (slo.e2el_ms && *slo.e2el_ms / 1000.0 < r.latency) return false;
  return true;
}

namespace {

// vLLM's peak figures: output tokens (token chunks) per 1-s bucket from the
// first start, and the most requests in flight at once (half-open
// intervals, departures before arrivals at equal times).
void peak_figures(const std::vector<request_record>& records, serve_metrics& m) {
  double min_start = INFINITY, max_end = -INFINITY;
  for (const request_record& r : records) {
    if (!r.success) continue;
    min_start = std::min(min_start, r.start_time);
    max_end = std::max(max_end, r.start_time + r.latency);
  }
  if (!std::isfinite(min_start)) return;
  const size_t buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
  std::vector<double> tokens(buckets, 0.0);
  std::vector<std::pair<double, int>> events;
  for (const request_record& r : records) {
    if (!r.success) continue;
    double t = r.start_time + r.ttft;
    const auto add = [&](double time) {
      const double b = std::floor(time - min_start);
      if (b >= 0 && b < static_cast<double>(buckets)) tokens[static_cast<size_t>(b)] += 1;
    };
    add(t);
    for (double gap : r.itl) add(t += gap);
    events.emplace_back(r.start_time, 1);
    events.emplace_back(r.start_time + r.latency, -1);
  }
  std::sort(events.begin(), events.end());
  int64_t current = 0;
  for (const auto& e : events) {
    current += e.second;
    m.max_concurrent_requests = std::max(m.max_concurrent_requests, current);
  }
  m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
}

}  // namespace

serve_metrics compute_serve_metrics(const std::vector<request_record>& records, double duration_s,
                                    const std::vector<double>& percentiles, const goodput_slo& slo) {
  serve_metrics m;
  m.duration = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  int64_t good = 0;
  for (const request_record& r : records) {
    if (!r.success) {
      ++m.failed;
      ++m.failure_reasons[reason_key(r.error)];
      m.tpots.push_back(0);
      continue;
    }
    ++m.completed;
    m.total_input += r.prompt_len;
    m.total_output += r.output_tokens;
    const std::optional<double> tpot = request_tpot(r);
    if (tpot) tpots.push_back(*tpot);
    m.tpots.push_back(tpot.value_or(0.0));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    if (slo.any() && request_is_good(r, slo)) ++good;
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.request_goodput = static_cast<double>(good) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft = summarize(ttfts, percentiles, 1000.0);
  m.tpot = summarize(tpots, percentiles, 1000.0);
  m.itl = summarize(itls, percentiles, 1000.0);
  m.e2el = summarize(e2els, percentiles, 1000.0);
  peak_figures(records, m);
  return m;
}

std::string reason_key(const std::string& error) {
  // The part before the first ':' ("HTTP 400") is kept as it is.
  const size_t colon = error.find(':');
  std::string out = error.substr(0, colon == std::string::npos ? 0 : colon);
  bool in_digits = false;
  for (char c : error.substr(out.size())) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (!in_digits) out += 'N';
      in_digits = true;
    } else {
      out += c;
      in_digits = false;
    }
  }
  return out;
}

result<std::vector<double>> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double p = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || p < 0 || p > 100) {
      return make_error("--metric-percentiles: expected numbers in [0, 100] like 50,90,99, got '" +
                        text + "'");
    }
    out.push_back(p);
  }
  if (out.empty()) return make_error("--metric-percentiles: expected at least one percentile");
  return out;
}

std::string percentile_name(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<int64_t>(p));
  std::ostringstream ss;
  ss << p;
  return ss.str();
}

}  // namespace troupe::bench
