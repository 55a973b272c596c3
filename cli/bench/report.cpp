#include "cli/bench/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>

#include "common/json_writer.h"

namespace troupe::bench {

std::string centered(const std::string& s, size_t width, char fill) {
  if (s.size() >= width) return s;
  const size_t left = (width - s.size()) / 2;
  return std::string(left, fill) + s + std::string(width - s.size() - left, fill);
}

std::string iso_date_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return make_error("cannot write '" + path + "'");
  return {};
}

namespace {

struct metric_section {
  const char* key;     // ttft
  const char* label;   // TTFT
  const char* header;  // Time to First Token
  const distribution serve_metrics::*dist;
};

const std::vector<metric_section>& sections() {
  static const std::vector<metric_section> s = {
      {"ttft", "TTFT", "Time to First Token", &serve_metrics::ttft},
      {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &serve_metrics::tpot},
      {"itl", "ITL", "Inter-token Latency", &serve_metrics::itl},
      {"e2el", "E2EL", "End-to-end Latency", &serve_metrics::e2el}};
  return s;
}

void row(std::FILE* out, const std::string& label, const std::string& value) {
  std::fprintf(out, "%-40s %-10s\n", label.c_str(), value.c_str());
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

void print_serve_table(std::FILE* out, const serve_context& ctx, const serve_metrics& m) {
  std::fprintf(out, "%s\n", centered(" Serving Benchmark Result ", 50, '=').c_str());
  row(out, "Successful requests:", std::to_string(m.completed));
  row(out, "Failed requests:", std::to_string(m.failed));
  if (ctx.max_concurrency > 0) row(out, "Maximum request concurrency:", std::to_string(ctx.max_concurrency));
  if (!std::isinf(ctx.request_rate)) row(out, "Request rate configured (RPS):", fixed2(ctx.request_rate));
  row(out, "Benchmark duration (s):", fixed2(m.duration));
  row(out, "Total input tokens:", std::to_string(m.total_input));
  row(out, "Total generated tokens:", std::to_string(m.total_output));
  row(out, "Request throughput (req/s):", fixed2(m.request_throughput));
  if (ctx.slo.any()) row(out, "Request goodput (req/s):", fixed2(m.request_goodput));
  row(out, "Output token throughput (tok/s):", fixed2(m.output_throughput));
  row(out, "Peak output token throughput (tok/s):", fixed2(m.max_output_tokens_per_s));
  row(out, "Peak concurrent requests:", fixed2(static_cast<double>(m.max_concurrent_requests)));
  row(out, "Total token throughput (tok/s):", fixed2(m.total_token_throughput));
  if (ctx.prefix_cache_hit_rate) row(out, "Prefix cache hit rate (%):", fixed2(*ctx.prefix_cache_hit_rate * 100));
  for (const metric_section& s : sections()) {
    if (std::find(ctx.percentile_metrics.begin(), ctx.percentile_metrics.end(), s.key) ==
        ctx.percentile_metrics.end()) {
      continue;
    }
    const distribution& d = m.*(s.dist);
    std::fprintf(out, "%s\n", centered(s.header, 50, '-').c_str());
    row(out, std::string("Mean ") + s.label + " (ms):", fixed2(d.mean));
    row(out, std::string("Median ") + s.label + " (ms):", fixed2(d.median));
    for (const auto& [p, v] : d.percentiles) {
      row(out, "P" + percentile_name(p) + " " + s.label + " (ms):", fixed2(v));
    }
  }
  if (!m.failure_reasons.empty()) {
    std::fprintf(out, "%s\n", centered("Failed Requests", 50, '-').c_str());
    std::vector<std::pair<int64_t, std::string>> by_count;
    for (const auto& [reason, n] : m.failure_reasons) by_count.emplace_back(-n, reason);
    std::sort(by_count.begin(), by_count.end());
    for (size_t i = 0; i < by_count.size() && i < 10; ++i) {
      std::fprintf(out, "%6lld x %s\n", static_cast<long long>(-by_count[i].first), by_count[i].second.c_str());
    }
    if (by_count.size() > 10) std::fprintf(out, "(%zu more reasons in the JSON)\n", by_count.size() - 10);
  }
  std::fprintf(out, "%s\n", std::string(50, '=').c_str());
  std::fflush(out);
}

namespace {

void write_config(json_writer& w, const serve_context& ctx) {
  w.key("command_line").array(ctx.command_line);
  w.key("config").begin_object();
  if (ctx.flags != nullptr) {
    for (const auto& [name, values] : ctx.flags->effective()) {
      w.key(name);
      if (values.size() == 1) w.value(values.front());
      else w.array(values);
    }
  }
  w.end_object();
}

void write_per_request(json_writer& w, const serve_metrics& m, const std::vector<request_record>& rs) {
  const auto column = [&](const char* key, auto get) {
    w.key(key).begin_array();
    for (const request_record& r : rs) w.value(get(r));
    w.end_array();
  };
  column("input_lens", [](const request_record& r) { return r.prompt_len; });
  column("output_lens", [](const request_record& r) { return r.success ? r.output_tokens : int64_t{0}; });
  column("ttfts", [](const request_record& r) { return r.ttft; });
  w.key("tpots").array(m.tpots);
  w.key("itls").begin_array();
  for (const request_record& r : rs) w.array(r.itl);
  w.end_array();
  column("e2els", [](const request_record& r) { return r.latency; });
  column("latencies", [](const request_record& r) { return r.latency; });
  column("start_times", [](const request_record& r) { return r.start_time; });
  column("queue_times", [](const request_record& r) { return r.queue_time; });
  column("errors", [](const request_record& r) -> const std::string& { return r.error; });
}

}  // namespace

std::string serve_json(const serve_context& ctx, const serve_metrics& m,
                       const std::vector<request_record>& records) {
  json_writer w;
  w.begin_object();
  w.key("date").value(ctx.date);
  w.key("backend").value(ctx.backend);
  w.key("endpoint_type").value(ctx.backend);
  w.key("base_url").value(ctx.base_url);
  w.key("endpoint").value(ctx.endpoint);
  w.key("model_id").value(ctx.model_id);
  w.key("tokenizer_id").value(ctx.tokenizer_id);
  w.key("dataset").value(ctx.dataset);
  w.key("num_prompts").value(ctx.num_prompts);
  w.key("request_rate");
  if (std::isinf(ctx.request_rate)) w.value("inf"); else w.value(ctx.request_rate);
  w.key("burstiness");
  if (std::isinf(ctx.burstiness)) w.value("inf"); else w.value(ctx.burstiness);
  w.key("max_concurrency");
  if (ctx.max_concurrency > 0) w.value(ctx.max_concurrency); else w.null();
  w.key("duration").value(m.duration);
  w.key("completed").value(m.completed);
  w.key("failed").value(m.failed);
  w.key("total_input_tokens").value(m.total_input);
  w.key("total_output_tokens").value(m.total_output);
  w.key("request_throughput").value(m.request_throughput);
  w.key("request_goodput");
  if (ctx.slo.any()) w.value(m.request_goodput); else w.null();
  w.key("output_throughput").value(m.output_throughput);
  w.key("total_token_throughput").value(m.total_token_throughput);
  w.key("max_output_tokens_per_s").value(m.max_output_tokens_per_s);
  w.key("max_concurrent_requests").value(m.max_concurrent_requests);
  w.key("prefix_cache_hit_rate");
  if (ctx.prefix_cache_hit_rate) w.value(*ctx.prefix_cache_hit_rate); else w.null();
  w.key("percentiles").array(ctx.percentiles);
  for (const metric_section& s : sections()) {
    const distribution& d = m.*(s.dist);
    const std::string k = s.key;
    w.key("mean_" + k + "_ms").value(d.mean);
    w.key("median_" + k + "_ms").value(d.median);
    w.key("std_" + k + "_ms").value(d.std);
    for (const auto& [p, v] : d.percentiles) w.key("p" + percentile_name(p) + "_" + k + "_ms").value(v);
  }
  w.key("goodput_slo_ms").begin_object();
  if (ctx.slo.ttft_ms) w.key("ttft").value(*ctx.slo.ttft_ms);
  if (ctx.slo.tpot_ms) w.key("tpot").value(*ctx.slo.tpot_ms);
  if (ctx.slo.e2el_ms) w.key("e2el").value(*ctx.slo.e2el_ms);
  w.end_object();
  w.key("failed_reasons").begin_object();
  for (const auto& [reason, n] : m.failure_reasons) w.key(reason).value(n);
  w.end_object();
  write_config(w, ctx);
  write_per_request(w, m, records);
  w.end_object();
  return w.take();
}

}  // namespace troupe::bench
