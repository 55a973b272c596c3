// Test helper: golden cases through `troupe generate` (golden_test,
// golden_formats_test).
#pragma once

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

}  // namespace troupe::testing
