// `troupe run-batch`: OpenAI batch files through the engine. On tiny-llama
// (token ids in and out) every golden prompt's completion equals the
// transformers greedy ids, in input order, beside lines the server would
// refuse (each gets that 400 as its response); chat lines on the dummy
// Qwen3 model with its tokenizer; a malformed file lists every problem and
// exits 2 before loading anything.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"

namespace troupe::testing {
namespace {

const std::string data = TROUPE_TEST_DATA;
const std::string repo = data + "/../..";

std::vector<std::string> read_lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(run_batch_test, completions_match_the_goldens_in_input_order) {
  const temp_dir dir("batch");
  const auto cases = load_golden(data + "/models/tiny-llama/golden.json");
  {
    std::ofstream in(dir.path() / "in.jsonl");
    in << R"({"custom_id":"bad","method":"POST","url":"/v1/completions","body":{"prompt":[1],"max_tokens":"x"}})" << "\n";
    for (size_t i = 0; i < cases.size(); ++i) {
      in << R"({"custom_id":"case-)" << i << R"(","method":"POST","url":"/v1/completions","body":{"prompt":)"
         << ids_json(cases[i].prompt_ids) << R"(,"max_tokens":)" << cases[i].greedy_ids.size()
         << R"(,"temperature":0,"ignore_eos":true}})" << "\n";
    }
    in << R"({"custom_id":"streamed","method":"POST","url":"/v1/completions","body":{"prompt":[1],"stream":true}})" << "\n";
  }
  const run_result r = run_troupe({"run-batch", "-i", (dir.path() / "in.jsonl").string(), "-o",
                                   (dir.path() / "out.jsonl").string(), "--model",
                                   data + "/models/tiny-llama", "--backend", "cpu",
                                   "--max-num-seqs", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("requests done"), std::string::npos) << r.err;
  const std::vector<std::string> lines = read_lines(dir.path() / "out.jsonl");
  ASSERT_EQ(lines.size(), cases.size() + 2);
  simdjson::dom::parser parser;
  for (size_t i = 0; i < lines.size(); ++i) {
    simdjson::dom::element doc = parser.parse(lines[i]);
    EXPECT_EQ(std::string_view(doc["id"]).substr(0, 10), "batch_req_");
    EXPECT_TRUE(doc["error"].is_null());
    simdjson::dom::element response = doc["response"];
    const std::string_view custom_id = doc["custom_id"];
    if (i == 0 || i + 1 == lines.size()) {
      EXPECT_EQ(custom_id, i == 0 ? "bad" : "streamed");
      EXPECT_EQ(int64_t(response["status_code"]), 400);
      EXPECT_EQ(std::string_view(response["body"]["error"]["param"]), i == 0 ? "max_tokens" : "stream");
      continue;
    }
    EXPECT_EQ(custom_id, "case-" + std::to_string(i - 1));
    EXPECT_EQ(int64_t(response["status_code"]), 200);
    std::vector<int64_t> ids;
    for (int64_t t : response["body"]["choices"].at(0)["token_ids"].get_array()) ids.push_back(t);
    EXPECT_EQ(ids, cases[i - 1].greedy_ids) << "case " << i - 1;
  }
}

TEST(run_batch_test, chat_lines_get_chat_completions) {
  const temp_dir dir("batch-chat");
  {
    std::ofstream in(dir.path() / "in.jsonl");
    for (int i = 0; i < 3; ++i) {
      in << R"({"custom_id":"chat-)" << i << R"(","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Hello )"
         << i << R"("}],"max_tokens":5,"ignore_eos":true}})" << "\n";
    }
  }
  const run_result r = run_troupe({"run-batch", "-i", (dir.path() / "in.jsonl").string(), "-o",
                                   (dir.path() / "out.jsonl").string(), "--config",
                                   repo + "/examples/deploy-qwen3-dummy-cpu.yaml", "--model",
                                   repo + "/examples/models/qwen3-tiny-151k", "--tokenizer",
                                   repo + "/tests/data/tokenizers/qwen3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = read_lines(dir.path() / "out.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  simdjson::dom::parser parser;
  for (size_t i = 0; i < lines.size(); ++i) {
    simdjson::dom::element doc = parser.parse(lines[i]);
    EXPECT_EQ(std::string_view(doc["custom_id"]), "chat-" + std::to_string(i));
    simdjson::dom::element body = doc["response"]["body"];
    EXPECT_EQ(std::string_view(body["object"]), "chat.completion");
    EXPECT_EQ(int64_t(body["usage"]["completion_tokens"]), 5);
    EXPECT_EQ(std::string_view(body["choices"].at(0)["message"]["role"]), "assistant");
  }
}

TEST(run_batch_test, a_malformed_file_lists_every_problem_and_loads_nothing) {
  const temp_dir dir("batch-bad");
  {
    std::ofstream in(dir.path() / "in.jsonl");
    in << R"({"custom_id":"a","method":"GET","url":"/v1/completions","body":{}})" << "\n";
    in << "not json\n";
    in << R"({"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}})" << "\n";
  }
  const run_result r = run_troupe({"run-batch", "-i", (dir.path() / "in.jsonl").string(), "-o",
                                   (dir.path() / "out.jsonl").string(), "--model", "/nonexistent"});
  EXPECT_EQ(r.exit_code, 2);
  for (const char* problem : {"in.jsonl:1: method", "in.jsonl:2: not a JSON object",
                              "in.jsonl:3: custom_id 'a' is used twice", "in.jsonl:3: url"}) {
    EXPECT_NE(r.err.find(problem), std::string::npos) << problem << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "out.jsonl"));
  EXPECT_EQ(run_troupe({"run-batch", "-i", (dir.path() / "in.jsonl").string()}).exit_code, 2);
}

}  // namespace
}  // namespace troupe::testing
