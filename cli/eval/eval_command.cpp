// `troupe eval kl`: logits consistency between two configurations of one
// model (docs/eval.md). The reference is the configuration the flags give;
// the compared one is the same with each `--compare KEY=VALUE` applied
// over it (for example quantization=gptq, dtype=float32, another `model`
// folder of the same vocabulary). For a dataset of prompts (bench's
// datasets; random token ids by default):
//   1. the reference greedily continues each prompt by --output-len tokens
//      and then scores prompt + continuation teacher forced: its next-token
//      distributions at the continuation's positions are kept (its float32
//      logits and a double log-sum-exp a row: prompts x output-len x vocab
//      x 4 bytes of memory);
//   2. its weights are released, the compared configuration is loaded, and
//      it continues the prompts greedily too and scores the reference's
//      sequences: KL(reference || compared) at each position, and whether
//      the two argmaxes agree;
//   3. the report: KL mean, p99 and max, the argmax agreement, and from
//      the two greedy runs the first-token agreement and the sequence
//      agreement (identical in full; the mean common prefix).
// Tensor and pipeline parallelism in this process run as the engine runs
// them (every rank a thread); stages in other processes are refused.
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/worker/load_runners.h"
#include "cli/bench/bench_flags.h"
#include "cli/bench/datasets.h"
#include "cli/bench/report.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "cli/eval/kl_stats.h"
#include "cli/eval/runner_driver.h"
#include "cli/help.h"
#include "common/json_writer.h"

namespace troupe {

namespace {

constexpr const char* eval_usage =
    "usage: troupe eval kl --model DIR [--config FILE] [--<config-key> VALUE]...\n"
    "           --compare KEY=VALUE [--compare KEY=VALUE ...] [--num-prompts 32] [--input-len 128]\n"
    "           [--output-len 64] [--json-out FILE]   (docs/eval.md)\n";

// Host memory for the reference's distributions, at most.
constexpr double max_reference_gib = 16;

std::vector<bench::flag_spec> kl_specs() {
  std::vector<bench::flag_spec> s = bench::dataset_flag_specs();
  for (bench::flag_spec& f : s) {
    if (f.name == "num-prompts") f.default_value = "32";
    if (f.name == "input-len") f.default_value = "128";
    if (f.name == "output-len") f.default_value = "64";
  }
  s.push_back({"compare", bench::flag_kind::value, ""});  // repeatable
  s.push_back({"json-out", bench::flag_kind::value, ""});
  return s;
}

// One configuration, loaded: its ranks' runners and limits.
struct loaded {
  engine_limits limits;
  std::vector<std::unique_ptr<model_runner>> runners;
  eval::runner_driver driver(const engine_config& config) const {
    std::vector<model_runner*> ranks;
    for (const auto& r : runners) ranks.push_back(r.get());
    return eval::runner_driver(std::move(ranks), static_cast<int>(config.pipeline_parallel_size), limits);
  }
};

// What a configuration can run before anything loads: this process's
// stages, no LoRA, the limits (the backend refuses what it cannot hold),
// and sequences of `longest` tokens within max_model_len.
result<engine_limits> preflight(const engine_config& config, const command_setup& setup, const char* which,
                                int64_t longest) {
  if (config.distributed_port != 0) {
    return make_error(std::string(which) + ": eval kl runs every pipeline stage in this process "
                      "(distributed_port must be 0)");
  }
  if (config.enable_lora) return make_error(std::string(which) + ": eval kl does not take enable_lora");
  auto limits = derive_local_limits(config, setup.model);
  if (!limits) return make_error(std::string(which) + ": " + limits.error_message());
  if (longest > limits->max_model_len) {
    return make_error(std::string(which) + ": a prompt and its --output-len take " + std::to_string(longest) +
                      " tokens, more than max_model_len " + std::to_string(limits->max_model_len));
  }
  return limits;
}

// `limits`: the configuration's preflight.
result<loaded> load(const engine_config& config, const command_setup& setup, const char* which,
                    engine_limits limits) {
  std::fprintf(stderr, "eval kl: loading the %s configuration (%s)\n", which, config.model.c_str());
  auto runners = load_runners(config, setup.model, limits);  // (the memory plan sets num_blocks on cuda)
  if (!runners) return std::move(runners).take_error();
  loaded out;
  out.limits = limits;
  out.runners = std::move(runners.value());
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int run_eval_kl(const std::vector<std::string>& args) {
  const std::vector<bench::flag_spec> specs = kl_specs();
  if (show_help(args, eval_usage, bench::as_command_flags(specs), true)) return 0;
  auto parsed = parse_args(args, bench::as_command_flags(specs));
  if (!parsed) return print_error(parsed.error_message()), 2;
  const bench::flag_values flags = bench::flags_from_rest(parsed->rest, specs);
  // The compared configuration: the same arguments, each KEY=VALUE after them.
  std::vector<std::string> compared_args = args;
  for (const std::string& pair : flags.all("compare")) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return print_error("--compare '" + pair + "': expected KEY=VALUE (a config key, e.g. quantization=gptq)"), 2;
    }
    compared_args.push_back("--" + pair);
  }
  if (flags.all("compare").empty()) {
    return print_error("eval kl: --compare KEY=VALUE is required (what the compared configuration changes)"), 2;
  }
  auto compared_parsed = parse_args(compared_args, bench::as_command_flags(specs));
  if (!compared_parsed) return print_error("--compare: " + compared_parsed.error_message()), 2;
  engine_config reference_config = parsed->config, compared_config = compared_parsed->config;
  reference_config.offline = compared_config.offline = true;
  command_setup reference_setup, compared_setup;
  if (!prepare_command(reference_config, reference_setup)) return 2;
  if (!prepare_command(compared_config, compared_setup)) return 2;
  const int64_t vocab = reference_setup.model.vocab_size;
  if (compared_setup.model.vocab_size != vocab) {
    return print_error("eval kl: the compared model's vocabulary has " +
                       std::to_string(compared_setup.model.vocab_size) + " tokens, the reference's " +
                       std::to_string(vocab)), 2;
  }
  auto opts = bench::dataset_options_from(flags);
  if (!opts) return print_error(opts.error_message()), 2;
  opts->seed = static_cast<uint64_t>(reference_config.seed);
  opts->format = bench::prompt_format::ids;
  opts->output_len_set = true;
  auto samples = bench::make_dataset(*opts, {vocab, reference_setup.tok.get()});
  if (!samples) return print_error(samples.error_message()), 2;
  const int64_t output_len = opts->output_len;
  std::vector<std::vector<int32_t>> prompts;
  for (const bench::sample_request& s : *samples) prompts.push_back(s.prompt_ids);
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int64_t>(p.size()) + output_len);
  // Both configurations checked before the reference runs (minutes, on a
  // large model) rather than after.
  auto reference_limits = preflight(reference_config, reference_setup, "reference", longest);
  if (!reference_limits) return print_error(reference_limits.error_message()), 1;
  auto compared_limits = preflight(compared_config, compared_setup, "compared", longest);
  if (!compared_limits) return print_error(compared_limits.error_message()), 1;
  const double gib = static_cast<double>(prompts.size()) * static_cast<double>(output_len) *
                     static_cast<double>(vocab) * 4 / double(1 << 30);
  if (gib > max_reference_gib) {
    return print_error("eval kl: the reference's logits would take " + std::to_string(gib) +
                       " GiB of memory (prompts x output-len x vocab x 4 bytes; at most " +
                       std::to_string(max_reference_gib) + "): lower --num-prompts or --output-len"), 2;
  }

  // 1. The reference: greedy continuations, then its distributions.
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> reference_ids, sequences;
  std::vector<int64_t> first;
  // The reference's logits (float32, as computed) and each row's
  // log-sum-exp (double): its distributions, read in double.
  std::vector<float> reference(static_cast<size_t>(prompts.size()) * static_cast<size_t>(output_len) *
                               static_cast<size_t>(vocab));
  std::vector<double> reference_lse(prompts.size() * static_cast<size_t>(output_len));
  auto position = [&](size_t i, int64_t target) {
    return i * static_cast<size_t>(output_len) + static_cast<size_t>(target - first[i]);
  };
  auto reference_row = [&](size_t i, int64_t target) {
    const size_t at = position(i, target);
    return eval::logits_row{reference.data() + at * static_cast<size_t>(vocab), reference_lse[at]};
  };
  {
    auto ref = load(reference_config, reference_setup, "reference", *reference_limits);
    if (!ref) return print_error(ref.error_message()), 1;
    eval::runner_driver driver = ref->driver(reference_config);
    auto greedy = driver.greedy(prompts, output_len);
    if (!greedy) return print_error(greedy.error_message()), 1;
    reference_ids = std::move(*greedy);
    for (size_t i = 0; i < prompts.size(); ++i) {
      first.push_back(static_cast<int64_t>(prompts[i].size()));
      sequences.push_back(prompts[i]);
      sequences.back().insert(sequences.back().end(), reference_ids[i].begin(), reference_ids[i].end());
    }
    status s = driver.score(sequences, first, [&](size_t i, int64_t target, const float* logits) {
      const size_t at = position(i, target);
      std::copy(logits, logits + vocab, reference.data() + at * static_cast<size_t>(vocab));
      reference_lse[at] = eval::log_sum_exp(logits, vocab);
    });
    if (!s) return print_error(s.error_message()), 1;
  }
  std::fprintf(stderr, "eval kl: reference done in %.1f s\n", seconds_since(start));

  // 2. The compared configuration over the same prompts and sequences.
  eval::kl_report report;
  {
    auto cmp = load(compared_config, compared_setup, "compared", *compared_limits);
    if (!cmp) return print_error(cmp.error_message()), 1;
    eval::runner_driver driver = cmp->driver(compared_config);
    auto greedy = driver.greedy(prompts, output_len);
    if (!greedy) return print_error(greedy.error_message()), 1;
    for (size_t i = 0; i < prompts.size(); ++i) report.add_sequences(reference_ids[i], (*greedy)[i]);
    status s = driver.score(sequences, first, [&](size_t i, int64_t target, const float* logits) {
      const eval::logits_row p = reference_row(i, target), q = eval::row_of(logits, vocab);
      report.add_position(eval::kl_divergence(p, q, vocab),
                          eval::argmax(p.logits, vocab) == eval::argmax(logits, vocab), eval::entropy(p, vocab));
    });
    if (!s) return print_error(s.error_message()), 1;
  }
  const double elapsed = seconds_since(start);

  // 3. The report.
  std::string changes;
  for (const std::string& pair : flags.all("compare")) changes += (changes.empty() ? "" : ", ") + pair;
  const auto n = report.sequences();
  std::printf("eval kl: %s vs %s\n", reference_config.model.c_str(), changes.c_str());
  std::printf("Positions: %lld (%lld prompts x %lld tokens, teacher forced on the reference's greedy output)\n",
              static_cast<long long>(report.positions()), static_cast<long long>(n),
              static_cast<long long>(output_len));
  std::printf("KL divergence (reference || compared): mean %.4e, p99 %.4e, max %.4e\n", report.kl_mean(),
              report.kl_quantile(0.99), report.kl_max());
  std::printf("Argmax agreement (teacher forced): %.4f; the reference's entropy %.3f nats on average "
              "(uniform: %.3f)\n",
              report.argmax_agreement(), report.mean_reference_entropy(), std::log(static_cast<double>(vocab)));
  std::printf("First-token agreement: %.4f of %lld prompts\n", report.first_token_agreement(),
              static_cast<long long>(n));
  std::printf("Greedy-sequence agreement: %.4f identical; mean common prefix %.4f of %lld tokens\n",
              report.sequence_agreement(), report.common_prefix_fraction(), static_cast<long long>(output_len));
  std::printf("Elapsed time (s): %.1f\n", elapsed);
  std::fflush(stdout);
  if (const std::string path = flags.get("json-out"); !path.empty()) {
    json_writer w;
    w.begin_object();
    w.key("date").value(bench::iso_date_now());
    std::vector<std::string> argv = args;
    argv.insert(argv.begin(), {"troupe", "eval", "kl"});
    w.key("command_line").array(argv);
    w.key("model").value(reference_config.model);
    w.key("compare").array(flags.all("compare"));
    w.key("num_prompts").value(n);
    w.key("input_len").value(opts->input_len);
    w.key("output_len").value(output_len);
    w.key("positions").value(report.positions());
    w.key("kl_mean").value(report.kl_mean());
    w.key("kl_p99").value(report.kl_quantile(0.99));
    w.key("kl_max").value(report.kl_max());
    w.key("argmax_agreement").value(report.argmax_agreement());
    w.key("reference_entropy_mean").value(report.mean_reference_entropy());
    w.key("first_token_agreement").value(report.first_token_agreement());
    w.key("sequence_agreement").value(report.sequence_agreement());
    w.key("common_prefix_fraction").value(report.common_prefix_fraction());
    w.key("elapsed_time").value(elapsed);
    w.end_object();
    if (auto st = bench::write_text_file(path, w.take()); !st) return print_error(st.error_message()), 1;
  }
  return 0;
}

int run_eval(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(eval_usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "kl") {
    try {
      return run_eval_kl(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const std::exception& e) {  // a lost rank, a failed collective
      print_error(std::string("eval kl: ") + e.what());
      return 1;
    }
  }
  print_error("unknown eval command '" + args[0] + "'\n" + eval_usage);
  return 2;
}

}  // namespace troupe
