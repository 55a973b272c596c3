// `troupe chat` and `troupe complete` against `troupe serve` (the dummy
// Qwen3 model with its real tokenizer on the CPU): one-shot --quick
// replies stream to stdout; piped lines are a conversation (each request
// carries the history: the server's log shows the prompt growing); the
// server's refusals and an unreachable server are errors with the reason.
#include <gtest/gtest.h>

#include <regex>

#include "tests/cli/cli_runner.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {


// The prompt sizes of the chat requests in the server's log, in order.
std::vector<int> chat_prompt_sizes(const std::string& log) {
  std::vector<int> sizes;
  const std::regex line(R"(req=chatcmpl-\S+ chat stream n=1 prompt=(\d+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    sizes.push_back(std::stoi((*it)[1]));
  }
  return sizes;
}

TEST(server_clients, chat_and_complete_stream_replies_and_keep_the_history) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1";
  const run_result quick = run_troupe({"chat", "--url", url, "--quick", "Hello", "--max-tokens", "6"});
  EXPECT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_GT(quick.out.size(), 1u);
  const run_result complete = run_troupe({"complete", "--url", url, "--quick", "Once upon", "--max-tokens", "6"});
  EXPECT_EQ(complete.exit_code, 0) << complete.err;
  EXPECT_GT(complete.out.size(), 1u);
  // Three messages, one conversation: every request carries the ones before.
  const std::string lines = "Hi there\n\nWhat is new?\nBye\n";
  const run_result talk = run_troupe({"chat", "--url", url, "--max-tokens", "4", "--system-prompt",
                                      "Be brief."}, &lines);
  EXPECT_EQ(talk.exit_code, 0) << talk.err;
  EXPECT_NE(talk.err.find("model qwen3-tiny"), std::string::npos) << talk.err;
  EXPECT_EQ(std::count(talk.out.begin(), talk.out.end(), '\n'), 3) << talk.out;
  std::vector<int> sizes;
  for (int i = 0; i < 50 && sizes.size() < 4; ++i) {  // the log line follows the reply
    sizes = chat_prompt_sizes(server.log());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(sizes.size(), 4u) << server.log();  // the quick one, then the three
  EXPECT_LT(sizes[1], sizes[2]);
  EXPECT_LT(sizes[2], sizes[3]);
}

TEST(server_clients, refusals_and_an_absent_server_are_errors) {
  server_process server(default_cpu_args());
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1";
  const run_result too_long = run_troupe({"chat", "--url", url, "--quick", "x", "--max-tokens", "99999"});
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.err.find("HTTP 400: This model's maximum context length"), std::string::npos)
      << too_long.err;
  const run_result unknown = run_troupe({"chat", "--url", url, "--model", "nope", "--quick", "x"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("HTTP 404"), std::string::npos) << unknown.err;
  const run_result absent = run_troupe({"complete", "--url", "http://127.0.0.1:1/v1", "--quick", "x"});
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_NE(absent.err.find("is the server running?"), std::string::npos) << absent.err;
  EXPECT_EQ(run_troupe({"chat", "--bogus", "1"}).exit_code, 2);
}

}  // namespace
}  // namespace troupe::testing
