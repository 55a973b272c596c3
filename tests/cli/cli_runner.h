// Test helpers: run build/troupe as a subprocess, capture stdout, stderr and
// the exit status; write temporary files; read golden.json.
#pragma once

#include <simdjson.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace troupe::testing {

struct run_result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out.push_back(c);
  }
  return out + "'";
}

// Runs `troupe <args...>`, with `input` on its stdin when given.
inline run_result run_troupe(const std::vector<std::string>& args,
                             const std::string* input = nullptr) {
  const temp_dir dir("run");
  std::string cmd = shell_quote(TROUPE_BINARY);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  if (input != nullptr) {
    dir.write("in", *input);
    cmd += " <" + shell_quote((dir / "in").string());
  }
  cmd += " >" + shell_quote((dir / "out").string()) + " 2>" + shell_quote((dir / "err").string());
  const int status = std::system(cmd.c_str());
  run_result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  return r;
}

inline std::string model_dir(const std::string& name) {
  return std::string(TROUPE_TEST_DATA) + "/models/" + name;
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  std::string line;
  while (std::getline(ss, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// The last line of stderr that starts with "stats:".
inline std::string stats_line(const std::string& err) {
  std::string last;
  for (const auto& line : split_lines(err)) {
    if (line.rfind("stats:", 0) == 0) last = line;
  }
  return last;
}

// Value of key=... in the stats line, or -1.
inline double stats_value(const std::string& err, const std::string& key) {
  const std::string line = stats_line(err);
  const auto pos = line.find(" " + key + "=");
  if (pos == std::string::npos) return -1;
  return std::stod(line.substr(pos + key.size() + 2));
}

}  // namespace troupe::testing
