// The `troupe` subcommands. Each takes the arguments after its name and
// returns the process exit status (0 ok, 1 runtime error, 2 usage/config
// error). Errors go to stderr as one "troupe: error: ..." message.
#pragma once

#include <string>
#include <vector>

namespace troupe {

int run_generate(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args);
int run_detokenize(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);  // cli/bench/
int run_eval(const std::vector<std::string>& args);   // cli/eval/: troupe eval kl
int run_make_lora(const std::vector<std::string>& args);
int run_worker(const std::vector<std::string>& args);  // a pipeline stage for a head
int run_run_batch(const std::vector<std::string>& args);  // OpenAI batch files
int run_version(const std::vector<std::string>& args);
int run_collect_env(const std::vector<std::string>& args);  // for bug reports
int run_chat(const std::vector<std::string>& args);      // clients of a running server
int run_complete(const std::vector<std::string>& args);

// Prints "troupe: error: <message>" to stderr.
void print_error(const std::string& message);

}  // namespace troupe
