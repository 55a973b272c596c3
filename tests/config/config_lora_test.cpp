// The LoRA section's validation: a valid two-adapter config, every message
// naming its adapter, the limits, effective_max_cpu_loras.
#include <gtest/gtest.h>

#include "tests/config/config_test_util.h"

namespace troupe {
namespace {

using namespace config_testing;

engine_config lora_config() {
  engine_config c = valid_config();
  c.enable_lora = true;
  c.lora_modules = {{"sql", "/l/sql"}, {"chat", "/l/chat"}};
  return c;
}

std::vector<std::string> lora_problems_with(const std::function<void(engine_config&)>& edit) {
  engine_config c = lora_config();
  edit(c);
  return validate_config(c, nullptr);
}

TEST(validate_config, lora_with_two_modules_is_valid) {
  const model_config m = tiny_model();
  EXPECT_EQ(validate_config(lora_config(), nullptr), problems{});
  EXPECT_EQ(validate_config(lora_config(), &m), problems{});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.max_loras = 2;
              c.max_lora_rank = 64;
              c.max_cpu_loras = 4;
              c.allow_runtime_lora_updating = true;
              c.lora_allowed_dirs = {"/l"};
            }),
            problems{});
  // Parsed from the command line too.
  EXPECT_EQ(validate_config(parse_ok({"--model", "/m", "--enable-lora", "--lora-modules",
                                      "sql=/l/sql", "chat=/l/chat"}),
                            nullptr),
            problems{});
  // lora_allowed_dirs only matters with runtime updating: not an error without it.
  EXPECT_EQ(lora_problems_with([](auto& c) { c.lora_allowed_dirs = {"/l"}; }), problems{});
}

TEST(validate_config, lora_modules_each_message) {
  EXPECT_EQ(lora_problems_with([](auto& c) { c.enable_lora = false; }),
            problems{"lora_modules: requires enable_lora: true"});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.lora_modules = {{"", ""}, {"", "/b"}, {"sql", ""}};
            }),
            (problems{"lora_modules[0]: needs a name and a path",
                      "lora_modules[1]: needs a name (path '/b')",
                      "lora_modules[2]: 'sql' needs a path"}));
  // A duplicate is reported once, however often it is listed.
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.lora_modules = {{"sql", "/a"}, {"chat", "/b"}, {"sql", "/c"}, {"sql", "/d"},
                                {"chat", "/b"}};
            }),
            (problems{"lora_modules: 'sql' is listed twice",
                      "lora_modules: 'chat' is listed twice"}));
  // The base model's names are reserved: served_model_name, else model.
  EXPECT_EQ(lora_problems_with([](auto& c) { c.lora_modules.push_back({"/models/tiny", "/l/x"}); }),
            problems{"lora_modules[2]: name '/models/tiny' is the base model's served name"});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.served_model_name = {"tiny", "base"};
              c.lora_modules.push_back({"base", "/l/x"});
              c.lora_modules.push_back({"/models/tiny", "/l/y"});  // no served name now
            }),
            problems{"lora_modules[2]: name 'base' is the base model's served name"});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.served_model_name = {"tiny"};
              c.lora_modules = {{"tiny", "/l/a"}, {"tiny", ""}};
            }),
            (problems{"lora_modules[0]: name 'tiny' is the base model's served name",
                      "lora_modules[1]: 'tiny' needs a path",
                      "lora_modules[1]: name 'tiny' is the base model's served name",
                      "lora_modules: 'tiny' is listed twice"}));
}

TEST(validate_config, lora_limits_each_message) {
  EXPECT_EQ(lora_problems_with([](auto& c) { c.max_loras = -1; }),
            problems{"max_loras: -1 must be >= 1"});
  // max_cpu_loras: 0 is unset (max_loras); set, at least max_loras (vLLM's message).
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.max_loras = 4;
              c.max_cpu_loras = 2;
            }),
            problems{"max_cpu_loras: max_cpu_loras (2) must be >= max_loras (4)"});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.max_loras = 4;
              c.max_cpu_loras = 4;
            }),
            problems{});
  EXPECT_EQ(lora_problems_with([](auto& c) { c.max_cpu_loras = -3; }),
            problems{"max_cpu_loras: -3 must be >= 0 (0: max_loras)"});
  EXPECT_EQ(lora_problems_with([](auto& c) {
              c.max_loras = 0;
              c.max_cpu_loras = 1;  // no second message about an invalid max_loras
            }),
            problems{"max_loras: 0 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) { c.allow_runtime_lora_updating = true; }),
            problems{"allow_runtime_lora_updating: requires enable_lora: true"});
  EXPECT_EQ(lora_problems_with([](auto& c) { c.lora_allowed_dirs = {"/l", ""}; }),
            problems{"lora_allowed_dirs[1]: must not be empty"});
  // Every problem at once, in schema order.
  EXPECT_EQ(problems_with([](auto& c) {
              c.lora_modules = {{"x", "/x"}, {"x", ""}};
              c.max_lora_rank = 7;
              c.max_cpu_loras = -1;
              c.allow_runtime_lora_updating = true;
              c.lora_allowed_dirs = {""};
            }),
            (problems{"lora_modules: requires enable_lora: true",
                      "lora_modules[1]: 'x' needs a path",
                      "lora_modules: 'x' is listed twice",
                      "max_lora_rank: 7 is not one of 1, 8, 16, 32, 64, 128, 256, 320, 512",
                      "max_cpu_loras: -1 must be >= 0 (0: max_loras)",
                      "allow_runtime_lora_updating: requires enable_lora: true",
                      "lora_allowed_dirs[0]: must not be empty"}));
}

TEST(effective_max_cpu_loras, is_max_loras_when_unset) {
  engine_config c;
  EXPECT_EQ(effective_max_cpu_loras(c), 1);
  c.max_loras = 4;
  EXPECT_EQ(effective_max_cpu_loras(c), 4);
  c.max_cpu_loras = 16;
  EXPECT_EQ(effective_max_cpu_loras(c), 16);
}

}  // namespace
}  // namespace troupe
