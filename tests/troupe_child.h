// A `troupe` subprocess running in the background (a `troupe worker` beside
// the process under test): output to a log file in a temporary folder,
// killed when the object goes.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace troupe::testing {

// The text of a child's log file ("" when there is none).
inline std::string read_log(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  std::string out;
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// Starts `troupe ARGS...` with stdout and stderr appended to `log_path`;
// returns its pid.
inline pid_t spawn_troupe(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> argv{TROUPE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    std::FILE* f = std::fopen(log_path.c_str(), "a");
    if (f != nullptr) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

class troupe_child {
 public:
  explicit troupe_child(const std::vector<std::string>& args)
      : dir_("child"), pid_(spawn_troupe(args, (dir_ / "log").string())) {}
  ~troupe_child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  troupe_child(const troupe_child&) = delete;
  troupe_child& operator=(const troupe_child&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` (none: 0) and waits up to `timeout` for the exit; returns
  // the exit status (128 + the signal when a signal ended it, as a shell
  // says), or -1 (still running: then it is killed).
  int wait(std::chrono::seconds timeout, int sig = 0) {
    if (pid_ <= 0) return status_;
    if (sig != 0) kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        status_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }
  std::string log() const { return read_log(dir_ / "log"); }

 private:
  temp_dir dir_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// A TCP port likely free for a test (distinct per process and `salt`).
inline int test_port(int salt) { return 20000 + static_cast<int>((getpid() * 131 + salt * 7919) % 30000); }

}  // namespace troupe::testing
