// A lost rank, through the server (docs/parallelism.md, failure handling):
// `troupe serve` with tensor or pipeline parallelism on the CPU, a rank's
// worker stopped at its 8th plan (TROUPE_DEBUG_FAIL_RANK: as a worker that
// died), or a `troupe worker` process running stage 1 killed. The
// requests in flight end within 5 s (a non-streamed one with a 503 and
// OpenAI's error body, a streamed one with the error envelope in the
// stream), the server stays up, /health answers 503, new requests get
// 503, and the log names the rank. With tensor parallelism the other rank
// waits for the lost one inside an all-reduce: it is woken at once (the
// group aborts the communicators), not after the group's 30 s timeout.
// And a worker whose config differs from the head's is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include "tests/net/server_harness.h"
#include "tests/troupe_child.h"

namespace troupe::testing {
namespace {

std::vector<std::string> tiny_llama(const std::string& flag, const std::string& size) {
  return {"--model", std::string(TROUPE_TEST_DATA) + "/models/tiny-llama", "--backend", "cpu",
          "--max-model-len", "2048", flag, size};
}

const std::string body_of(bool stream) {
  return std::string(R"({"model":")") + TROUPE_TEST_DATA +
         R"(/models/tiny-llama","prompt":[1,2,3,4],"max_tokens":2000,"ignore_eos":true,"stream":)" +
         (stream ? "true" : "false") + "}";
}

// Waits (up to 60 s) until the server runs at least `n` requests, by its
// /metrics gauge: a loaded machine may take seconds to start a client.
void wait_for_running(int port, int n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (metric_value(port, "num_requests_running").value_or(0) >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "the server never ran " << n << " requests";
}

// Requests in flight when rank 1 is lost (by `lose`, called once the
// server runs `running` requests, these two among them; 0: at once, the
// rank losing itself) end within 5 s of the loss with 503; then the server
// is up and says why.
void expect_lost_rank_fails_requests(server_process& server, const std::function<void()>& lose,
                                     int running) {
  ASSERT_NE(server.port(), 0) << server.log();
  const int port = server.port();
  auto plain = std::async(std::launch::async, [&] {
    return http_call(port, "POST", "/v1/completions", body_of(false));
  });
  auto streamed = std::async(std::launch::async, [&] {
    return http_call(port, "POST", "/v1/completions", body_of(true));
  });
  if (running > 0) wait_for_running(port, running);
  lose();
  const auto lost = std::chrono::steady_clock::now();
  const http_result a = plain.get();
  const http_result b = streamed.get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - lost).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(a.status, 503) << a.body;
  EXPECT_NE(a.body.find("\"type\":\"ServiceUnavailableError\""), std::string::npos) << a.body;
  EXPECT_NE(a.body.find("rank 1"), std::string::npos) << a.body;
  EXPECT_EQ(a.retry_after, "1");
  EXPECT_EQ(b.status, 200);  // the stream's headers were out before the loss
  EXPECT_NE(b.body.find("data: {\"error\":"), std::string::npos) << b.body;
  EXPECT_NE(b.body.find("\"code\":503"), std::string::npos) << b.body;
  // The server is up, says it is unhealthy, and refuses new work.
  const http_result health = http_call(port, "GET", "/health");
  EXPECT_EQ(health.status, 503) << health.body;
  EXPECT_NE(health.body.find("rank 1"), std::string::npos) << health.body;
  const http_result later = http_call(port, "POST", "/v1/completions", body_of(false));
  EXPECT_EQ(later.status, 503) << later.body;
  EXPECT_EQ(http_call(port, "GET", "/v1/models").status, 200);
  EXPECT_NE(server.log().find("rank 1 "), std::string::npos) << server.log();
  EXPECT_EQ(server.stop(SIGTERM, std::chrono::seconds(30)), 0) << server.log();
}

// A rank of this process stops at its 8th plan (TROUPE_DEBUG_FAIL_RANK).
void expect_stopped_rank_fails_requests(const std::string& flag, const std::string& size) {
  setenv("TROUPE_DEBUG_FAIL_RANK", "1:8", 1);
  server_process server(tiny_llama(flag, size));
  unsetenv("TROUPE_DEBUG_FAIL_RANK");
  expect_lost_rank_fails_requests(server, [] {}, 0);  // the rank stops at its 8th plan
}

TEST(server_parallel, a_lost_tensor_parallel_rank_fails_requests_with_503) {
  expect_stopped_rank_fails_requests("--tensor-parallel-size", "2");
}

TEST(server_parallel, a_lost_pipeline_stage_fails_requests_with_503) {
  expect_stopped_rank_fails_requests("--pipeline-parallel-size", "2");
}

// Two processes: the head serves and runs stage 0, `troupe worker` runs
// stage 1; the worker process is killed (SIGKILL) while requests run, and
// while `troupe bench serve` runs: its requests fail with the 503 error.
TEST(server_parallel, a_killed_worker_process_fails_requests_with_503) {
  const std::string dport = std::to_string(test_port(1));
  std::vector<std::string> args = tiny_llama("--pipeline-parallel-size", "2");
  args.insert(args.end(), {"--distributed-port", dport, "--distributed-timeout", "60"});
  std::vector<std::string> worker_args = {"worker", "--connect", "127.0.0.1:" + dport};
  worker_args.insert(worker_args.end(), args.begin(), args.end());
  troupe_child worker(worker_args);
  server_process server(args);  // healthy once the worker's stage is ready
  ASSERT_NE(server.port(), 0) << server.log() << worker.log();
  // Both stages serve first.
  const http_result ok = http_call(server.port(), "POST", "/v1/completions",
                                   R"({"model":")" + std::string(TROUPE_TEST_DATA) +
                                       R"(/models/tiny-llama","prompt":[1,2,3],"max_tokens":4})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  // The bench first (a loaded machine may take seconds to start it), then
  // the two requests; the worker is killed once all ten run.
  const temp_dir out("bench");
  const auto bench = std::make_unique<troupe_child>(std::vector<std::string>{
      "bench", "serve", "--base-url", "http://127.0.0.1:" + std::to_string(server.port()),
      "--num-prompts", "8", "--input-len", "8", "--output-len", "1500", "--vocab-size", "1024",
      "--num-warmups", "0", "--disable-progress", "--json-out", (out / "r.json").string()});
  wait_for_running(server.port(), 8);
  expect_lost_rank_fails_requests(
      server, [&] { EXPECT_EQ(worker.wait(std::chrono::seconds(5), SIGKILL), 128 + SIGKILL); }, 2 + 8);
  EXPECT_NE(server.log().find("rank 1 (pipeline stage 1) was lost: its process is unreachable"),
            std::string::npos) << server.log();
  // The bench ends (every request failed: exit 1) with the 503's reason.
  EXPECT_EQ(bench->wait(std::chrono::seconds(30)), 1) << bench->log();
  std::ifstream in(out / "r.json");
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"failed\":8,"), std::string::npos) << json.substr(0, 2000) << bench->log();
  EXPECT_NE(json.find("error in the stream: the model's workers are gone (rank N (pipeline stage "
                      "N) was lost"),
            std::string::npos) << json.substr(0, 2000);
}

// A worker whose config differs is refused, naming the difference; the
// head then gives up after distributed_timeout, naming the stage.
TEST(server_parallel, a_mismatched_worker_is_refused_and_the_head_names_the_missing_stage) {
  const std::string dport = std::to_string(test_port(2));
  const std::string model = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";
  troupe_child worker({"worker", "--connect", "127.0.0.1:" + dport, "--model", model, "--backend",
                       "cpu", "--max-model-len", "256", "--pipeline-parallel-size", "2",
                       "--distributed-timeout", "30"});
  troupe_child head({"generate", "--model", model, "--backend", "cpu", "--max-model-len", "512",
                     "--pipeline-parallel-size", "2", "--distributed-port", dport,
                     "--distributed-timeout", "3", "--prompt-ids", "1,2,3", "--max-tokens", "2"});
  EXPECT_EQ(worker.wait(std::chrono::seconds(30)), 1) << worker.log();
  EXPECT_NE(worker.log().find("max_model_len: the worker's 256, the head's 512"), std::string::npos)
      << worker.log();
  EXPECT_EQ(head.wait(std::chrono::seconds(30)), 1) << head.log();
  EXPECT_NE(head.log().find("pipeline stage(s) 1: no worker connected within 3 s"),
            std::string::npos) << head.log();
}

}  // namespace
}  // namespace troupe::testing
