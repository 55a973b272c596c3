// `troupe bench throughput` and `bench latency` end to end on the
// tiny-llama fixture (CPU, tiny sizes): the printed figures and the JSON
// agree with the requested work.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

TEST(bench_throughput, random_dataset_through_the_engine) {
  const temp_dir dir("bench-tp");
  const std::string out = (dir / "tp.json").string();
  const run_result r = run_troupe({"bench", "throughput", "--model", model_dir("tiny-llama"), "--max-model-len",
                                   "2048", "--log-level", "warn", "--num-prompts", "24", "--input-len", "32",
                                   "--output-len", "8", "--range-ratio", "0.5", "--json-out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Throughput: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("requests/s"), std::string::npos);
  simdjson::dom::parser parser;
  const std::string text = read_file(out);
  const simdjson::dom::element d = parser.parse(text);
  EXPECT_EQ(int64_t(d["num_requests"]), 24);
  EXPECT_EQ(int64_t(d["failed"]), 0);
  const int64_t prompt = d["total_prompt_tokens"], output = d["total_output_tokens"];
  EXPECT_GE(prompt, 24 * 16);
  EXPECT_LE(prompt, 24 * 48);
  int64_t lens = 0;
  for (int64_t n : d["output_lens"].get_array()) {
    EXPECT_GE(n, 4);  // EOS ignored: each request runs to its sampled length
    EXPECT_LE(n, 12);
    lens += n;
  }
  EXPECT_EQ(lens, output);
  const double elapsed = d["elapsed_time"];
  EXPECT_GT(elapsed, 0);
  // The JSON's numbers have 9 significant digits.
  const auto near = [](double a, double b) { EXPECT_NEAR(a, b, 1e-7 * b); };
  near(double(d["requests_per_second"]), 24 / elapsed);
  near(double(d["tokens_per_second"]), (prompt + output) / elapsed);
  near(double(d["output_tokens_per_second"]), output / elapsed);
  EXPECT_EQ(std::string_view(d["engine"]["backend"]), "cpu");
  EXPECT_EQ(int64_t(d["engine"]["max_model_len"]), 2048);
  EXPECT_NE(r.out.find("Total num output tokens:  " + std::to_string(output)), std::string::npos) << r.out;
}

TEST(bench_throughput, prefix_dataset_hits_the_cache) {
  const run_result r = run_troupe({"bench", "throughput", "--model", model_dir("tiny-llama"), "--log-level",
                                   "warn", "--dataset", "prefix", "--prefix-len", "128", "--num-prefix-groups",
                                   "2", "--input-len", "16", "--output-len", "2", "--num-prompts", "16",
                                   "--num-warmups", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("Prefix cache hit rate:  ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(at + 24)), 0.3) << r.out;
}

TEST(bench_latency, prefill_plus_decode_is_the_latency) {
  const temp_dir dir("bench-lat");
  const std::string out = (dir / "lat.json").string();
  const run_result r = run_troupe({"bench", "latency", "--model", model_dir("tiny-llama"), "--log-level", "warn",
                                   "--batch-size", "4", "--input-len", "32", "--output-len", "8", "--num-iters",
                                   "4", "--num-iters-warmup", "1", "--json-out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Avg latency: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("99% percentile latency: "), std::string::npos);
  EXPECT_NE(r.out.find("Avg prefill time: "), std::string::npos);
  simdjson::dom::parser parser;
  const std::string text = read_file(out);
  const simdjson::dom::element d = parser.parse(text);
  simdjson::dom::array lat = d["latencies"], pre = d["prefill_times"], dec = d["decode_times"];
  ASSERT_EQ(lat.size(), 4u);
  ASSERT_EQ(pre.size(), 4u);
  double sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double l = lat.at(i), p = pre.at(i), q = dec.at(i);
    EXPECT_GT(p, 0);
    EXPECT_GT(q, 0);
    EXPECT_NEAR(p + q, l, 1e-8 * l);  // 9 significant digits each
    sum += l;
  }
  EXPECT_NEAR(double(d["avg_latency"]), sum / 4, 1e-8 * sum);
  for (const char* p : {"10", "25", "50", "75", "90", "99"}) {
    EXPECT_FALSE(d["percentiles"][p].error()) << p;
    EXPECT_FALSE(d["prefill_time_percentiles"][p].error()) << p;
  }
  EXPECT_EQ(int64_t(d["batch_size"]), 4);
}

TEST(bench_latency, lengths_over_max_model_len_are_a_usage_error) {
  const run_result r = run_troupe({"bench", "latency", "--model", model_dir("tiny-llama"), "--max-model-len",
                                   "64", "--input-len", "60", "--output-len", "8", "--log-level", "warn"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("exceeds max_model_len 64"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace troupe::testing
