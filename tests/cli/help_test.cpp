// --help and -h on troupe and every subcommand: exit 0, the usage on
// stdout, every flag of the command with its default, and for the engine
// commands every config key as a flag with its default (the keys' table
// in docs/configuration.md). No model is needed and nothing is loaded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

struct help_case {
  std::vector<std::string> command;
  std::string usage;                      // the first line starts with this
  std::vector<std::string> must_contain;  // flags with defaults
  bool config_keys;
};

TEST(help_test, every_command_explains_itself_and_exits_zero) {
  const std::vector<help_case> cases = {
      {{"generate"}, "usage: troupe generate", {"--max-tokens VALUE", "(default: 16)", "--json"}, true},
      {{"serve"}, "usage: troupe serve", {"--dry-run", "--gpu-memory-gib VALUE"}, true},
      {{"worker"}, "usage: troupe worker", {"--connect VALUE", "--rank-offset VALUE"}, true},
      {{"tokenize"}, "usage: troupe tokenize", {"--text VALUE", "--add-special-tokens"}, false},
      {{"detokenize"}, "usage: troupe detokenize", {"--ids VALUE"}, false},
      {{"make-lora"}, "usage: troupe make-lora", {"--rank VALUE", "(default: 16)"}, false},
      {{"bench", "serve"}, "usage: troupe bench serve", {"--request-rate VALUE", "(default: inf)"}, false},
      {{"bench", "throughput"}, "usage: troupe bench throughput", {"--num-prompts VALUE"}, true},
      {{"bench", "latency"}, "usage: troupe bench latency", {"--batch-size VALUE"}, true},
      {{"bench"}, "usage: troupe bench", {"serve", "throughput", "latency"}, false},
      {{"run-batch"}, "usage: troupe run-batch", {"--input-file VALUE", "--output-file VALUE"}, true},
      {{"version"}, "usage: troupe version", {}, false},
      {{"collect-env"}, "usage: troupe collect-env", {}, false},
      {{"chat"}, "usage: troupe chat", {"--url VALUE", "(default: http://localhost:8000/v1)", "--system-prompt VALUE"}, false},
      {{"complete"}, "usage: troupe complete", {"--quick VALUE"}, false},
  };
  for (const help_case& c : cases) {
    for (const char* flag : {"--help", "-h"}) {
      std::vector<std::string> args = c.command;
      args.push_back(flag);
      const run_result r = run_troupe(args);
      SCOPED_TRACE(args[0] + (args.size() > 2 ? " " + args[1] : "") + " " + flag);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out.rfind(c.usage, 0), 0u) << r.out;
      for (const std::string& s : c.must_contain) EXPECT_NE(r.out.find(s), std::string::npos) << s;
      const bool keys = r.out.find("config keys (docs/configuration.md)") != std::string::npos;
      EXPECT_EQ(keys, c.config_keys) << r.out;
      if (c.config_keys) {
        EXPECT_NE(r.out.find("--max-model-len VALUE"), std::string::npos);
        EXPECT_NE(r.out.find("--block-size VALUE              (default: 16)"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("--pipeline-parallel-size VALUE  (default: 1)"), std::string::npos);
      }
    }
  }
  const run_result top = run_troupe({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("<command> --help"), std::string::npos) << top.out;
}

// `troupe version` names the build's backends and what they find;
// `troupe collect-env` the system, GPUs, libraries and environment.
TEST(help_test, version_and_collect_env_describe_the_build_and_the_machine) {
  const run_result v = run_troupe({"version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out.rfind("troupe 0.1.0 (commit ", 0), 0u) << v.out;
  EXPECT_NE(v.out.find("cpu: float32 reference (OpenBLAS"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("  cuda: "), std::string::npos) << v.out;
  EXPECT_EQ(run_troupe({"version", "extra"}).exit_code, 2);
  const run_result e = run_troupe({"collect-env"});
  EXPECT_EQ(e.exit_code, 0) << e.err;
  for (const char* part : {"backends:", "system:", "  OS: ", "  compiler: ", "  CPU: ", "GPUs (nvidia-smi):",
                           "libraries:", "  CAF 0.17.6", "environment:"}) {
    EXPECT_NE(e.out.find(part), std::string::npos) << part << "\n" << e.out;
  }
}

}  // namespace
}  // namespace troupe::testing
