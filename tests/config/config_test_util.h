// Helpers shared by the config tests (config_test, config_lora_test,
// speculative_config_test): YAML files in temporary folders, parse and
// validation shorthands.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/config_loader.h"

namespace troupe::config_testing {

namespace fs = std::filesystem;

// A YAML file in a fresh temporary folder, removed with the test.
class yaml_file {
 public:
  explicit yaml_file(const std::string& text) {
    dir_ = fs::temp_directory_path() /
           ("troupe_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    fs::create_directories(dir_);
    path_ = (dir_ / "config.yaml").string();
    std::ofstream(path_) << text;
  }
  ~yaml_file() { fs::remove_all(dir_); }
  const std::string& path() const { return path_; }

 private:
  static inline int next_ = 0;
  fs::path dir_;
  std::string path_;
};

inline std::string one_problem(const std::string& p) {
  return "invalid configuration (1 problem):\n  - " + p;
}

inline std::string parse_error(const std::vector<std::string>& args,
                               const std::vector<command_flag>& command_flags = {}) {
  auto r = parse_args(args, command_flags);
  if (r.ok()) return "<ok>";
  return r.error_message();
}

inline engine_config parse_ok(const std::vector<std::string>& args) {
  auto r = parse_args(args, {});
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.ok() ? r->config : engine_config{};
}

inline engine_config valid_config() {
  engine_config c;
  c.model = "/models/tiny";
  return c;
}

inline model_config tiny_model() {
  model_config m;
  m.max_position_embeddings = 4096;
  m.num_attention_heads = 8;
  return m;
}

inline std::vector<std::string> problems_with(const std::function<void(engine_config&)>& edit,
                                              const model_config* model = nullptr) {
  engine_config c = valid_config();
  edit(c);
  return validate_config(c, model);
}

using problems = std::vector<std::string>;

}  // namespace troupe::config_testing
