// Test helper: golden cases through `troupe generate` (golden_test,
// golden_formats_test, golden_offload_test).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_runner.h"
#include "tests/cli/golden.h"

namespace troupe::testing {

// Each case of `golden_json` alone: `args` (a `generate ... --json`
// command line) plus --prompt-ids, checked by check_golden_line within tol.
inline void expect_golden_cases_alone(const std::vector<std::string>& args, const std::string& golden_json,
                                      const std::string& label, double tol) {
  const auto cases = load_golden(golden_json);
  ASSERT_EQ(cases.size(), 5u);
  simdjson::dom::parser parser;
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<std::string> one = args;
    one.push_back("--prompt-ids");
    one.push_back(join_ids(cases[c].prompt_ids));
    const run_result r = run_troupe(one);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << r.out;
    check_golden_line(cases[c], parser.parse(lines[0]), label + " case " + std::to_string(c), tol);
  }
}

// All `cases` in one prompts file under `dir`: `args` (a `generate ...
// --json` command line) plus --prompts-file, each output line checked by
// check_golden_line within tol. Returns generate's stderr.
inline std::string expect_golden_cases_batched(std::vector<std::string> args, const std::vector<golden_case>& cases,
                                               const std::filesystem::path& dir, const std::string& label,
                                               double tol) {
  {
    std::ofstream out(dir / "prompts.jsonl");
    for (const auto& g : cases) out << "{\"prompt_ids\":[" << join_ids(g.prompt_ids) << "]}\n";
  }
  args.push_back("--prompts-file");
  args.push_back((dir / "prompts.jsonl").string());
  const run_result r = run_troupe(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  EXPECT_EQ(lines.size(), cases.size()) << r.out;
  simdjson::dom::parser parser;
  for (size_t c = 0; c < cases.size() && c < lines.size(); ++c) {
    check_golden_line(cases[c], parser.parse(lines[c]), label + " batched case " + std::to_string(c), tol);
  }
  return r.err;
}

// The cases of `golden_json` so, with a small token budget (prefill in
// chunks, several requests a step), prefix caching (on by default) and
// async scheduling on the CPU (TROUPE_DEBUG_ASYNC_ON_CPU, and steps
// planned ahead checked). Returns generate's stderr.
inline std::string expect_golden_cases_chunked_async(std::vector<std::string> args, const std::string& golden_json,
                                                     const std::filesystem::path& dir, const std::string& label,
                                                     double tol) {
  for (const char* a : {"--max-num-batched-tokens", "48", "--max-num-seqs", "3"}) args.push_back(a);
  setenv("TROUPE_DEBUG_ASYNC_ON_CPU", "1", 1);
  const std::string err = expect_golden_cases_batched(args, load_golden(golden_json), dir, label, tol);
  unsetenv("TROUPE_DEBUG_ASYNC_ON_CPU");
  EXPECT_GT(stats_value(err, "steps_ahead"), 10) << err;
  return err;
}

}  // namespace troupe::testing
