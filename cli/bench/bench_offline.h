// Timing one batch through the engine directly (no HTTP), for `bench
// throughput` and `bench latency`: all requests go in one submit_batch (so
// they are admitted together, as vLLM's LLM.generate), and a sink per
// request stamps its first token and its end with steady_clock. Blocks
// until every request has finished. With LoRA adapters served, request i
// runs adapter i mod N (a uniform mix; the base runs none of them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "cli/bench/bench_flags.h"
#include "cli/command_setup.h"
#include "common/json_writer.h"

namespace troupe::bench {

struct offline_request {
  std::vector<int32_t> prompt_ids;
  sampling_params params;
};

struct offline_result {
  double elapsed = 0;               // s, submit to the last request's end
  std::vector<double> first_token;  // s from submit to the request's first token (0: none)
  std::vector<double> finished;     // s from submit to its end
  std::vector<int64_t> output_tokens;
  std::vector<std::string> errors;  // "" for requests that ended normally
  int64_t num_failed() const;
  int64_t total_output_tokens() const;
  // The latest first token: when the whole batch has been prefilled.
  double batch_first_token() const;
};

offline_result run_offline_batch(engine& eng, const std::vector<offline_request>& requests);

// The engine's numbers for a report: hit rate (0 when none looked up).
double prefix_cache_hit_rate(const engine_stats& s);

// The start of `bench throughput` / `latency`: config keys and the
// command's flags (specs) parsed as `troupe generate` does, the config
// validated against config.json, the tokenizer loaded, the engine created.
// On failure the error has been printed and `exit_code` says 2 (usage,
// configuration) or 1 (runtime); -1: --help was asked for and printed (the
// command exits 0).
struct offline_setup {
  engine_config config;
  std::string config_file;
  command_setup setup;
  flag_values flags;
  std::unique_ptr<engine> eng;
  int exit_code = 0;
};
offline_setup start_offline(const std::vector<std::string>& args, const std::vector<flag_spec>& specs,
                            const char* command);

// "engine": the resolved engine settings, for the JSON reports.
void write_engine_settings(json_writer& w, const offline_setup& s, const std::vector<std::string>& argv);

}  // namespace troupe::bench
