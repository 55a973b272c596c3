// `troupe version` (the version, the commit and the build's backends with
// what they find here) and `troupe collect-env` (what vLLM's collect_env
// prints for a bug report: the OS, compiler, CPU and memory, CUDA, the
// driver and GPUs with their topology, library versions and the relevant
// environment variables).
#include <boost/version.hpp>
#include <caf/config.hpp>
#include <simdjson.h>
#include <spdlog/version.h>
#include <sys/utsname.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "actors/build_info.h"
#include "cli/commands.h"
#include "cli/help.h"

extern char** environ;

namespace troupe {

namespace {

constexpr const char* version_text = "troupe 0.1.0";

// The first line of `path` starting with `prefix` (the prefix removed), or "".
std::string file_field(const char* path, const std::string& prefix) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string value = line.substr(prefix.size());
    const size_t first = value.find_first_not_of(" \t");
    return first == std::string::npos ? "" : value.substr(first);
  }
  return "";
}

// A command's standard output, or "" when it cannot run.
std::string command_output(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

void print_versions() {
  std::printf("%s (commit %s)\nbackends:\n", version_text, build_commit().c_str());
  for (const std::string& line : backend_lines()) std::printf("  %s\n", line.c_str());
}

}  // namespace

int run_version(const std::vector<std::string>& args) {
  if (show_help(args, "usage: troupe version\nThe version, the commit and the build's "
                        "backends (CPU; CUDA with its version and the devices it finds; NCCL).",
                        {}, false)) return 0;
  if (!args.empty()) return print_error("version takes no arguments"), 2;
  print_versions();
  return 0;
}

int run_collect_env(const std::vector<std::string>& args) {
  if (show_help(args, "usage: troupe collect-env\nWhat a bug report needs (as vLLM's "
                        "collect_env): OS, compiler, CPU, memory, CUDA, driver, GPUs and\n"
                        "their topology, library versions, relevant environment variables.",
                        {}, false)) return 0;
  if (!args.empty()) return print_error("collect-env takes no arguments"), 2;
  print_versions();
  utsname u{};
  uname(&u);
  std::printf("\nsystem:\n  OS: %s\n  kernel: %s %s\n",
              unquote(file_field("/etc/os-release", "PRETTY_NAME=")).c_str(), u.sysname, u.release);
  std::printf("  compiler: %s (C++ %ld)\n",
#if defined(__clang__)
              "clang " __clang_version__,
#else
              "gcc " __VERSION__,
#endif
              static_cast<long>(__cplusplus));
  std::printf("  CPU: %s, %s logical cores\n", file_field("/proc/cpuinfo", "model name\t: ").c_str(),
              command_output("nproc").c_str());
  std::printf("  memory: %s\n", file_field("/proc/meminfo", "MemTotal:").c_str());
  std::printf("\nGPUs (nvidia-smi):\n");
  const std::string gpus = command_output(
      "nvidia-smi --query-gpu=index,name,memory.total,driver_version,pcie.link.gen.max,"
      "clocks.max.sm --format=csv,noheader");
  std::printf("  %s\n", gpus.empty() ? "none found (no nvidia-smi or no GPU)" : gpus.c_str());
  if (!gpus.empty()) {
    std::printf("\nGPU topology (nvidia-smi topo -m):\n%s\n", command_output("nvidia-smi topo -m").c_str());
  }
  const std::string nvcc = command_output("nvcc --version | tail -2 | head -1");
  std::printf("\nlibraries:\n  CAF %d.%d.%d\n  Boost %s\n  simdjson %d.%d.%d\n  spdlog %d.%d.%d\n",
              CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION, BOOST_LIB_VERSION,
              int(simdjson::SIMDJSON_VERSION_MAJOR), int(simdjson::SIMDJSON_VERSION_MINOR),
              int(simdjson::SIMDJSON_VERSION_REVISION), SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR,
              SPDLOG_VER_PATCH);
  std::printf("  nvcc on PATH: %s\n", nvcc.empty() ? "none" : nvcc.c_str());
  std::printf("\nenvironment:\n");
  bool any = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    for (const char* prefix : {"CUDA_", "NCCL_", "TROUPE_", "OMP_", "OPENBLAS_", "LD_LIBRARY_PATH"}) {
      if (var.rfind(prefix, 0) == 0) {
        std::printf("  %s\n", var.c_str());
        any = true;
        break;
      }
    }
  }
  if (!any) std::printf("  (no CUDA_*, NCCL_*, TROUPE_*, OMP_*, OPENBLAS_* or LD_LIBRARY_PATH set)\n");
  return 0;
}

}  // namespace troupe
