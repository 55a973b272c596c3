// The PEFT fixtures of tests/data/lora and their base models' configs, for
// the LoRA tests of model/.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "model/model_config.h"
#include "tests/temp_dir.h"

namespace troupe::testing {

inline std::string data(const std::string& rel) { return std::string(TROUPE_TEST_DATA) + "/" + rel; }

inline model_config base(const std::string& name) {
  std::ifstream in(data("models/" + name + "/config.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_model_config(ss.str(), "config.json");
  EXPECT_TRUE(c.ok());
  return c.value();
}

// A copy of a fixture adapter the test may change.
inline std::unique_ptr<temp_dir> copy_adapter(const std::string& name) {
  auto dir = std::make_unique<temp_dir>("lora");
  for (const auto& f : std::filesystem::directory_iterator(data("lora/" + name))) {
    std::filesystem::copy_file(f.path(), dir->path() / f.path().filename());
  }
  return dir;
}

}  // namespace troupe::testing
