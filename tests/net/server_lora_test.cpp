// `troupe serve` with runtime LoRA adapters (allow_runtime_lora_updating,
// lora_allowed_dirs) on the tiny-llama fixture: load, use (the adapter's
// golden ids from peft), unload while a request runs with it (it finishes;
// new requests get 404), reload; paths outside the allowed folder refused
// (`..`, an absolute path, a symlink inside that points out), each logged;
// the routes are 404 without the setting; troupe:lora_requests_info.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <thread>

#include "tests/cli/golden.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

const std::string tiny_llama = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";
const std::string fixtures = std::string(TROUPE_TEST_DATA) + "/lora";

// A folder `allowed` holding the sql adapter and a link to an `outside`
// copy of it.
struct adapter_dirs {
  temp_dir root{"lora-serve"};
  fs::path allowed = root / "allowed", outside = root / "outside";
  adapter_dirs() {
    fs::create_directories(allowed);
    fs::create_directories(outside);
    fs::copy(fixtures + "/tiny-llama-lora-sql", allowed / "sql", fs::copy_options::recursive);
    fs::copy(fixtures + "/tiny-llama-lora-sql", outside / "sql", fs::copy_options::recursive);
    fs::create_directory_symlink(outside / "sql", allowed / "link");
    fs::create_directories(allowed / "empty");
  }
};

std::vector<std::string> args(const adapter_dirs& d, bool runtime = true) {
  std::vector<std::string> a = {"--model", tiny_llama, "--backend", "cpu", "--dtype", "float32",
                                "--max-model-len", "2048", "--cpu-kvcache-space", "1",
                                "--enable-lora", "--max-loras", "2"};
  if (runtime) {
    a.insert(a.end(), {"--allow-runtime-lora-updating", "--lora-allowed-dirs", d.allowed.string()});
  } else {
    a.insert(a.end(), {"--lora-modules", "sql=" + (d.allowed / "sql").string()});
  }
  return a;
}

http_result load(int port, const std::string& name, const std::string& path) {
  return http_call(port, "POST", "/v1/load_lora_adapter",
                   R"({"lora_name":")" + name + R"(","lora_path":")" + path + R"("})");
}

http_result unload(int port, const std::string& name) {
  return http_call(port, "POST", "/v1/unload_lora_adapter", R"({"lora_name":")" + name + R"("})");
}

http_result complete(int port, const std::string& model, const std::vector<int64_t>& prompt,
                     int max_tokens) {
  return http_call(port, "POST", "/v1/completions",
                   R"({"model":")" + model + R"(","prompt":)" + ids_json(prompt) +
                       R"(,"max_tokens":)" + std::to_string(max_tokens) +
                       R"(,"temperature":0,"ignore_eos":true})");
}

std::vector<int64_t> token_ids(const std::string& body) {
  simdjson::dom::parser parser;
  std::vector<int64_t> out;
  for (int64_t v : parser.parse(body)["choices"].at(0)["token_ids"].get_array()) out.push_back(v);
  return out;
}

TEST(server_lora, routes_are_404_without_runtime_updating) {
  adapter_dirs d;
  server_process server(args(d, /*runtime=*/false));
  ASSERT_NE(server.port(), 0) << server.log();
  EXPECT_EQ(load(server.port(), "poet", (d.allowed / "sql").string()).status, 404);
  EXPECT_EQ(unload(server.port(), "sql").status, 404);
  // The configured adapter serves; the gauge lists LoRA's state.
  const golden_case g = load_golden(fixtures + "/tiny-llama-lora-sql/golden.json").at(0);
  const http_result r = complete(server.port(), "sql", g.prompt_ids, 16);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(token_ids(r.body), g.greedy_ids);
  EXPECT_TRUE(metric_value(server.port(), "lora_requests_info", "max_lora=\"2\"").has_value());
}

TEST(server_lora, load_use_unload_while_running_reload) {
  adapter_dirs d;
  server_process server(args(d));
  ASSERT_NE(server.port(), 0) << server.log();
  const int port = server.port();
  const auto cases = load_golden(fixtures + "/tiny-llama-lora-sql/golden.json");
  http_result r = load(port, "sql", (d.allowed / "sql").string());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'sql' added successfully.");
  r = http_call(port, "GET", "/v1/models");
  EXPECT_NE(r.body.find(R"("id":"sql")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(fs::canonical(d.allowed / "sql").string()), std::string::npos) << r.body;
  r = complete(port, "sql", cases[1].prompt_ids, 16);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(token_ids(r.body), cases[1].greedy_ids);
  r = load(port, "sql", (d.allowed / "sql").string());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("The lora adapter 'sql' has already been loaded."), std::string::npos);

  // Unloaded while a long request runs with it: that request finishes.
  http_result running;
  std::thread t([&] { running = complete(port, "sql", cases[0].prompt_ids, 1500); });
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    seen = metric_value(port, "lora_requests_info", "running_lora_adapters=\"sql\"").has_value();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(seen) << "the long request never showed as running";
  r = unload(port, "sql");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'sql' removed successfully.");
  r = complete(port, "sql", cases[0].prompt_ids, 4);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(http_call(port, "GET", "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
  t.join();
  ASSERT_EQ(running.status, 200) << running.body;
  const std::vector<int64_t> ids = token_ids(running.body);
  ASSERT_EQ(ids.size(), 1500u);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 16), cases[0].greedy_ids);

  // Reloaded: served again (a new id), same outputs.
  r = load(port, "sql", (d.allowed / "sql").string());
  ASSERT_EQ(r.status, 200) << r.body;
  r = complete(port, "sql", cases[2].prompt_ids, 16);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(token_ids(r.body), cases[2].greedy_ids);
  r = unload(port, "nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("The lora adapter 'nope' cannot be found."), std::string::npos) << r.body;
}

TEST(server_lora, paths_outside_the_allowed_dirs_are_refused) {
  adapter_dirs d;
  server_process server(args(d));
  ASSERT_NE(server.port(), 0) << server.log();
  const int port = server.port();
  for (const std::string& path : {(d.allowed / ".." / "outside" / "sql").string(),  // ..
                                  (d.outside / "sql").string(),                      // absolute
                                  (d.allowed / "link").string(),                     // a symlink out
                                  std::string("/etc")}) {
    const http_result r = load(port, "x", path);
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_NE(r.body.find("is not inside lora_allowed_dirs"), std::string::npos) << r.body;
  }
  EXPECT_NE(server.log().find("outside lora_allowed_dirs"), std::string::npos) << server.log();
  // Inside, but not an adapter: the adapter's problems, nothing loaded.
  http_result r = load(port, "x", (d.allowed / "empty").string());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("cannot read adapter_config.json"), std::string::npos) << r.body;
  r = load(port, "", (d.allowed / "sql").string());
  EXPECT_EQ(r.status, 400);
  r = load(port, tiny_llama, (d.allowed / "sql").string());  // the base's name
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(http_call(port, "GET", "/v1/models").body.find(R"("id":"x")"), std::string::npos);
}

}  // namespace
}  // namespace troupe::testing
