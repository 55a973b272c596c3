// bench metrics: numpy's percentile, vLLM's TTFT / TPOT / ITL / E2EL,
// goodput and peak definitions, against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "cli/bench/metrics.h"

namespace troupe::bench {
namespace {

// np.percentile([0.5, 0.1, 0.9, 0.3, 0.7, 0.2], p): sorted
// [0.1, 0.2, 0.3, 0.5, 0.7, 0.9], position 5 p / 100, linear between.
TEST(bench_percentile, matches_numpy_linear_by_hand) {
  const std::vector<double> x = {0.5, 0.1, 0.9, 0.3, 0.7, 0.2};
  const std::vector<std::pair<double, double>> want = {
      {0, 0.1}, {10, 0.15}, {25, 0.225}, {50, 0.4}, {75, 0.65}, {90, 0.8}, {99, 0.89}, {100, 0.9}};
  for (const auto& [p, v] : want) EXPECT_NEAR(percentile(x, p), v, 1e-12) << "p" << p;
  const std::vector<double> y = {15, 20, 35, 40, 50};
  EXPECT_NEAR(percentile(y, 40), 29.0, 1e-12);
  EXPECT_NEAR(percentile(y, 90), 46.0, 1e-12);
  EXPECT_NEAR(percentile(y, 99.9), 49.96, 1e-12);
  EXPECT_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_EQ(percentile({}, 50), 0.0);  // vLLM's np.percentile(x or 0, p)
}

TEST(bench_summarize, mean_median_population_std_and_scale) {
  const distribution d = summarize({0.5, 0.1, 0.9, 0.3, 0.7, 0.2}, {90, 99}, 1000.0);
  EXPECT_NEAR(d.mean, 450.0, 1e-9);
  EXPECT_NEAR(d.median, 400.0, 1e-9);
  EXPECT_NEAR(d.std, 1000.0 * std::sqrt(0.475 / 6.0), 1e-9);  // ddof 0, as np.std
  ASSERT_EQ(d.percentiles.size(), 2u);
  EXPECT_EQ(d.percentiles[0].first, 90);
  EXPECT_NEAR(d.percentiles[0].second, 800.0, 1e-9);
  EXPECT_NEAR(d.percentiles[1].second, 890.0, 1e-9);
  const distribution empty = summarize({}, {99}, 1000.0);
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.percentiles.at(0).second, 0.0);
}

request_record ok(double start, double ttft, std::vector<double> itl, int64_t out, int64_t in = 10) {
  request_record r;
  r.success = true;
  r.start_time = start;
  r.ttft = ttft;
  r.itl = std::move(itl);
  r.latency = ttft;
  for (double g : r.itl) r.latency += g;
  r.output_tokens = out;
  r.prompt_len = in;
  return r;
}

request_record failed(const std::string& why) {
  request_record r;
  r.error = why;
  r.prompt_len = 10;
  return r;
}

TEST(bench_metrics, tpot_itl_e2el_definitions) {
  // Request a: 4 tokens in 4 chunks; b: 5 tokens in 3 chunks (the server
  // batched some); c: a single token (no TPOT); d: failed.
  const std::vector<request_record> rs = {ok(0.0, 0.1, {0.02, 0.03, 0.04}, 4),
                                          ok(0.5, 0.2, {0.1, 0.1}, 5), ok(1.0, 0.3, {}, 1),
                                          failed("HTTP 400: too long")};
  const serve_metrics m = compute_serve_metrics(rs, 2.0, {50, 99}, {});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);  // successful requests only, as vLLM
  EXPECT_EQ(m.total_output, 10);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 5.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 20.0);
  // TPOT = (E2EL - TTFT) / (out - 1): a 0.09 / 3 = 0.03 s, b 0.2 / 4 = 0.05 s.
  EXPECT_NEAR(m.tpot.mean, 40.0, 1e-9);
  EXPECT_NEAR(m.tpot.median, 40.0, 1e-9);
  ASSERT_EQ(m.tpots.size(), 4u);
  EXPECT_NEAR(m.tpots[0], 0.03, 1e-12);
  EXPECT_EQ(m.tpots[2], 0.0);
  EXPECT_EQ(m.tpots[3], 0.0);
  for (size_t i = 0; i < 3; ++i) {
    if (rs[i].output_tokens > 1) {
      EXPECT_NEAR(rs[i].ttft + m.tpots[i] * (rs[i].output_tokens - 1), rs[i].latency, 1e-12);
    }
  }
  // ITL: every gap of every request, pooled: 0.02 0.03 0.04 0.1 0.1.
  EXPECT_NEAR(m.itl.mean, 58.0, 1e-9);
  EXPECT_NEAR(m.itl.median, 40.0, 1e-9);
  EXPECT_NEAR(m.ttft.mean, 200.0, 1e-9);
  EXPECT_NEAR(m.e2el.median, 300.0, 1e-9);  // e2els 0.19, 0.4, 0.3
  EXPECT_EQ(m.failure_reasons.at("HTTP 400: too long"), 1);
  // Peaks: a's chunks at 0.1 .. 0.19, b's at 0.7, 0.8, 0.9, c's at 1.3 -> 7
  // in second 0; a [0, 0.19), b [0.5, 0.9), c [1.0, 1.3): at most 1 at once.
  EXPECT_EQ(m.max_output_tokens_per_s, 7.0);
  EXPECT_EQ(m.max_concurrent_requests, 1);
}

TEST(bench_metrics, peak_concurrency_counts_overlaps) {
  const std::vector<request_record> rs = {ok(0.0, 1.0, {}, 1), ok(0.5, 1.0, {}, 1), ok(0.9, 0.05, {}, 1),
                                          ok(1.0, 0.5, {}, 1)};
  EXPECT_EQ(compute_serve_metrics(rs, 2.0, {99}, {}).max_concurrent_requests, 3);
}

TEST(bench_goodput, every_given_slo_must_hold) {
  auto slo = parse_goodput({"ttft:150", "tpot:40"});
  ASSERT_TRUE(slo.ok()) << slo.error_message();
  const request_record fast = ok(0, 0.1, {0.03, 0.03}, 3);   // ttft 100 ms, tpot 30 ms
  const request_record slow_first = ok(0, 0.2, {0.01}, 2);   // ttft 200 ms
  const request_record slow_decode = ok(0, 0.1, {0.05}, 2);  // tpot 50 ms
  const request_record one_token = ok(0, 0.1, {}, 1);        // tpot counts as 0
  EXPECT_TRUE(request_is_good(fast, *slo));
  EXPECT_FALSE(request_is_good(slow_first, *slo));
  EXPECT_FALSE(request_is_good(slow_decode, *slo));
  EXPECT_TRUE(request_is_good(one_token, *slo));
  EXPECT_FALSE(request_is_good(failed("x"), *slo));
  const serve_metrics m =
      compute_serve_metrics({fast, slow_first, slow_decode, one_token, failed("x")}, 2.0, {99}, *slo);
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.0);  // 2 good requests in 2 s
  auto e2el = parse_goodput({"e2el:100"});
  ASSERT_TRUE(e2el.ok());
  EXPECT_TRUE(request_is_good(ok(0, 0.05, {0.05}, 2), *e2el));  // exactly at the SLO
  EXPECT_FALSE(parse_goodput({"ttft"}).ok());
  EXPECT_FALSE(parse_goodput({"latency:5"}).ok());
  EXPECT_FALSE(parse_goodput({"ttft:-1"}).ok());
}

TEST(bench_reasons, numbers_after_the_status_are_grouped) {
  EXPECT_EQ(reason_key("HTTP 400: maximum context length is 2048 tokens. However, you requested 3016"),
            "HTTP 400: maximum context length is N tokens. However, you requested N");
  EXPECT_EQ(reason_key("HTTP 404: The model `x1` does not exist."), "HTTP 404: The model `xN` does not exist.");
  const serve_metrics m = compute_serve_metrics(
      {failed("HTTP 400: you requested 3000 tokens"), failed("HTTP 400: you requested 3007 tokens"),
       failed("connection error: Connection refused")},
      1.0, {99}, {});
  EXPECT_EQ(m.failure_reasons.size(), 2u);
  EXPECT_EQ(m.failure_reasons.at("HTTP 400: you requested N tokens"), 2);
}

TEST(bench_flags_parsing, percentiles_and_names) {
  auto p = parse_percentiles("50,90,99.9");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<double>{50, 90, 99.9}));
  EXPECT_FALSE(parse_percentiles("50,x").ok());
  EXPECT_FALSE(parse_percentiles("101").ok());
  EXPECT_EQ(percentile_name(99), "99");
  EXPECT_EQ(percentile_name(99.9), "99.9");
}

}  // namespace
}  // namespace troupe::bench
