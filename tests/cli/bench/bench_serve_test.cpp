// `troupe bench serve` end to end against a `troupe serve` of the
// tiny-llama fixture (token-id prompts): the JSON has every figure, every
// request completes with TTFT + TPOT (out - 1) == E2EL, the load options
// hold (request rate, max concurrency), and failing requests are counted
// with their reasons.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>

#include "tests/cli/cli_runner.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

class bench_serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new server_process({"--model", model_dir("tiny-llama"), "--max-model-len", "2048",
                                  "--log-level", "warn"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // Runs bench serve with `extra` flags; the JSON goes to dir_/out.json.
  run_result bench(std::vector<std::string> extra) {
    std::vector<std::string> args = {"bench", "serve", "--base-url",
                                     "http://127.0.0.1:" + std::to_string(server_->port()),
                                     "--vocab-size", "1024", "--json-out", json_path(), "--disable-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_troupe(args);
  }
  std::string json_path() const { return (dir_ / "out.json").string(); }
  simdjson::dom::element json() {
    text_ = read_file(json_path());
    return parser_.parse(text_);
  }

  static server_process* server_;
  temp_dir dir_{"bench-serve"};
  simdjson::dom::parser parser_;
  std::string text_;
};

server_process* bench_serve::server_ = nullptr;

std::vector<double> doubles(simdjson::dom::element a) {
  std::vector<double> out;
  for (simdjson::dom::element e : a.get_array()) out.push_back(e.get_double());
  return out;
}

void expect_every_figure(simdjson::dom::element d) {
  for (const char* k : {"date", "backend", "base_url", "endpoint", "model_id", "num_prompts", "request_rate",
                        "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
                        "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
                        "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
                        "failed_reasons", "config", "command_line", "input_lens", "output_lens", "ttfts",
                        "tpots", "itls", "e2els", "latencies", "start_times", "queue_times", "errors"}) {
    EXPECT_FALSE(d[k].error()) << "missing " << k;
  }
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    for (const char* s : {"mean_", "median_", "std_", "p90_", "p99_"}) {
      const std::string key = std::string(s) + m + "_ms";
      EXPECT_FALSE(d[key].error()) << "missing " << key;
    }
  }
}

TEST_F(bench_serve, all_at_once_every_request_consistent) {
  ASSERT_NE(server_->port(), 0) << server_->log();
  const run_result r = bench({"--num-prompts", "32", "--input-len", "16", "--output-len", "16",
                              "--goodput", "ttft:60000", "e2el:60000"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("============ Serving Benchmark Result ============"), std::string::npos);
  EXPECT_NE(r.out.find("Successful requests:                     32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("P99 TPOT (ms):"), std::string::npos);
  const simdjson::dom::element d = json();
  expect_every_figure(d);
  EXPECT_EQ(int64_t(d["completed"]), 32);
  EXPECT_EQ(int64_t(d["failed"]), 0);
  EXPECT_EQ(std::string_view(d["request_rate"]), "inf");
  EXPECT_EQ(int64_t(d["total_input_tokens"]), 32 * 16);
  EXPECT_EQ(int64_t(d["total_output_tokens"]), 32 * 16);  // --ignore-eos is the random dataset's default
  EXPECT_NEAR(double(d["request_goodput"]), double(d["request_throughput"]), 1e-9);
  EXPECT_EQ(std::string_view(d["config"]["input-len"]), "16");
  const std::vector<double> ttft = doubles(d["ttfts"]), tpot = doubles(d["tpots"]), e2el = doubles(d["e2els"]),
                            out = doubles(d["output_lens"]), in = doubles(d["input_lens"]);
  ASSERT_EQ(ttft.size(), 32u);
  std::vector<double> itl_all;
  for (size_t i = 0; i < 32; ++i) {
    EXPECT_EQ(out[i], 16);
    EXPECT_EQ(in[i], 16);
    EXPECT_GT(ttft[i], 0);
    EXPECT_NEAR(ttft[i] + tpot[i] * (out[i] - 1), e2el[i], std::max(1e-6 * e2el[i], 1e-9)) << i;
    const std::vector<double> itl = doubles(d["itls"].at(i));
    EXPECT_EQ(itl.size(), 15u);  // the server sends a chunk per token here
    double sum = ttft[i];
    for (double g : itl) sum += g;
    EXPECT_NEAR(sum, e2el[i], 1e-6 * e2el[i]);  // the JSON has 9 significant digits
    itl_all.insert(itl_all.end(), itl.begin(), itl.end());
  }
  double mean = 0;
  for (double g : itl_all) mean += g / static_cast<double>(itl_all.size());
  EXPECT_NEAR(double(d["mean_itl_ms"]), 1000 * mean, 1e-6 * 1000 * mean);
  EXPECT_LE(double(d["p90_ttft_ms"]), double(d["p99_ttft_ms"]));
}

TEST_F(bench_serve, request_rate_and_concurrency_limit) {
  ASSERT_NE(server_->port(), 0) << server_->log();
  const run_result r = bench({"--num-prompts", "32", "--input-len", "16", "--output-len", "16", "--request-rate",
                              "20", "--max-concurrency", "4", "--metric-percentiles", "50,90,99"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Request rate configured (RPS):           20.00"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Maximum request concurrency:             4"), std::string::npos) << r.out;
  const simdjson::dom::element d = json();
  expect_every_figure(d);
  EXPECT_EQ(int64_t(d["completed"]), 32);
  EXPECT_EQ(int64_t(d["failed"]), 0);
  EXPECT_FALSE(d["p50_ttft_ms"].error());
  EXPECT_LE(int64_t(d["max_concurrent_requests"]), 4);
  EXPECT_NEAR(double(d["request_rate"]), 20.0, 1e-12);
  // The last request arrives at 32 / 20 = 1.6 s: the run cannot be shorter.
  EXPECT_GE(double(d["duration"]), 1.6);
  const std::vector<double> start = doubles(d["start_times"]);
  EXPECT_GE(*std::max_element(start.begin(), start.end()), 1.6 - 1e-3);
}

TEST_F(bench_serve, prompts_over_max_model_len_fail_with_their_reason) {
  ASSERT_NE(server_->port(), 0) << server_->log();
  const run_result r = bench({"--num-prompts", "8", "--input-len", "3000", "--output-len", "16",
                              "--range-ratio", "0.1", "--num-warmups", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // every request failed
  EXPECT_NE(r.err.find("all 8 requests failed"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Failed requests:                         8"), std::string::npos) << r.out;
  const simdjson::dom::element d = json();
  expect_every_figure(d);
  EXPECT_EQ(int64_t(d["completed"]), 0);
  EXPECT_EQ(int64_t(d["failed"]), 8);
  // Lengths differ per request; the reason is counted once, numbers grouped.
  simdjson::dom::object reasons = d["failed_reasons"];
  ASSERT_EQ(reasons.size(), 1u) << text_;
  for (auto [reason, n] : reasons) {
    EXPECT_EQ(reason.substr(0, 9), "HTTP 400:");
    EXPECT_NE(reason.find("maximum context length is N tokens"), std::string::npos) << reason;
    EXPECT_EQ(int64_t(n), 8);
  }
  for (simdjson::dom::element e : d["errors"].get_array()) {
    EXPECT_NE(std::string_view(e).find("maximum context length is 2048 tokens"), std::string_view::npos);
  }
}

TEST_F(bench_serve, unknown_model_counts_404s) {
  ASSERT_NE(server_->port(), 0) << server_->log();
  const run_result r = bench({"--model", "no-such-model", "--num-prompts", "4", "--input-len", "8",
                              "--output-len", "4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("warm-up request failed: HTTP 404"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("4 x HTTP 404: The model `no-such-model` does not exist."), std::string::npos) << r.out;
  const simdjson::dom::element d = json();
  EXPECT_EQ(int64_t(d["failed"]), 4);
  EXPECT_EQ(int64_t(d["failed_reasons"]["HTTP 404: The model `no-such-model` does not exist."]), 4);
}

// --lora-modules (vLLM's): each request names an adapter drawn from the
// list (seeded) instead of --model; names this server does not serve are
// 404s counted under each name.
TEST_F(bench_serve, lora_modules_spread_the_requests_over_the_names) {
  ASSERT_NE(server_->port(), 0) << server_->log();
  const run_result r = bench({"--lora-modules", "no-a", "no-b", "--num-prompts", "12", "--input-len", "8",
                              "--output-len", "2", "--num-warmups", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("LoRA adapters drawn uniformly from no-a no-b"), std::string::npos) << r.err;
  const simdjson::dom::element d = json();
  int64_t a = 0, b = 0;
  EXPECT_FALSE(d["failed_reasons"]["HTTP 404: The model `no-a` does not exist."].get(a));
  EXPECT_FALSE(d["failed_reasons"]["HTTP 404: The model `no-b` does not exist."].get(b));
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_EQ(a + b, 12);
}

TEST(bench_serve_errors, usage_and_unreachable_server) {
  EXPECT_EQ(run_troupe({"bench", "serve", "--num-promts", "3"}).exit_code, 2);
  const run_result typo = run_troupe({"bench", "serve", "--num-promts", "3"});
  EXPECT_NE(typo.err.find("did you mean '--num-prompts'"), std::string::npos) << typo.err;
  EXPECT_EQ(run_troupe({"bench", "serve", "--request-rate", "0"}).exit_code, 2);
  EXPECT_EQ(run_troupe({"bench", "serve", "--base-url", "https://x"}).exit_code, 2);
  EXPECT_EQ(run_troupe({"bench", "serve", "--endpoint", "/v1/chat/completions", "--prompt-format", "ids"}).exit_code, 2);
  // Nothing listens on port 9 of localhost: every request is a connection error.
  const run_result r = run_troupe({"bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m",
                                   "--num-prompts", "3", "--input-len", "4", "--output-len", "4",
                                   "--num-warmups", "0", "--disable-progress"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("3 x connection error"), std::string::npos) << r.out;
  EXPECT_EQ(run_troupe({"bench"}).exit_code, 2);
  EXPECT_EQ(run_troupe({"bench", "nope"}).exit_code, 2);
}

}  // namespace
}  // namespace troupe::testing
