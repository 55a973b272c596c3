// `troupe bench throughput`: offline throughput through the engine (no
// HTTP), as vLLM's `bench throughput`: every prompt of the dataset in one
// batch, temperature 1 (unless --temperature), top_p 1, EOS ignored, each
// request seeded with the config's seed + its index. Prints requests/s,
// total tokens/s, output tokens/s and the elapsed time; --json-out.
#include <algorithm>
#include <cstdio>

#include "cli/bench/bench_commands.h"
#include "cli/bench/bench_offline.h"
#include "cli/bench/report.h"
#include "cli/commands.h"

namespace troupe::bench {

namespace {

std::vector<flag_spec> throughput_specs() {
  std::vector<flag_spec> s = dataset_flag_specs();
  s.push_back({"json-out", flag_kind::value, ""});
  s.push_back({"num-warmups", flag_kind::value, "0"});
  s.push_back({"temperature", flag_kind::value, "1"});
  return s;
}

result<std::vector<offline_request>> build_requests(const offline_setup& s, double temperature) {
  auto opts = dataset_options_from(s.flags);
  if (!opts) return std::move(opts).take_error();
  opts->seed = static_cast<uint64_t>(s.config.seed);
  opts->format = prompt_format::ids;
  if (opts->kind == dataset_kind::sharegpt && s.setup.tok == nullptr) {
    return make_error("--dataset sharegpt: the model has no tokenizer (set `tokenizer`)");
  }
  auto samples = make_dataset(*opts, {s.setup.model.vocab_size, s.setup.tok.get()});
  if (!samples) return std::move(samples).take_error();
  std::vector<offline_request> out;
  for (size_t i = 0; i < samples->size(); ++i) {
    offline_request r;
    r.prompt_ids = std::move((*samples)[i].prompt_ids);
    r.params.temperature = static_cast<float>(temperature);
    r.params.top_p = 1.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = static_cast<int32_t>((*samples)[i].output_len);
    r.params.has_seed = true;
    r.params.seed = s.config.seed + static_cast<int64_t>(i);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

int run_bench_throughput(const std::vector<std::string>& args) {
  const std::vector<flag_spec> specs = throughput_specs();
  offline_setup s = start_offline(args, specs, "throughput");
  if (s.exit_code != 0) return std::max(s.exit_code, 0);  // -1: --help printed
  auto temperature = s.flags.get_double("temperature");
  auto warmups = s.flags.get_int("num-warmups");
  if (!temperature || !warmups) {
    print_error(!temperature ? temperature.error_message() : warmups.error_message());
    return 2;
  }
  auto requests = build_requests(s, *temperature);
  if (!requests) return print_error(requests.error_message()), 2;
  int64_t prompt_tokens = 0;
  for (const offline_request& r : *requests) prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
  if (*warmups > 0) {
    std::fprintf(stderr, "bench throughput: %lld warm-up request(s)\n", static_cast<long long>(*warmups));
    run_offline_batch(*s.eng, std::vector<offline_request>(static_cast<size_t>(*warmups), requests->front()));
  }
  const engine_stats before = s.eng->stats();
  std::fprintf(stderr, "bench throughput: %zu requests (%lld prompt tokens)\n", requests->size(),
               static_cast<long long>(prompt_tokens));
  const offline_result r = run_offline_batch(*s.eng, *requests);
  const engine_stats after = s.eng->stats();
  const int64_t output_tokens = r.total_output_tokens();
  const double n = static_cast<double>(requests->size());
  engine_stats delta;
  delta.prefix_cache_queries = after.prefix_cache_queries - before.prefix_cache_queries;
  delta.prefix_cache_hits = after.prefix_cache_hits - before.prefix_cache_hits;
  const int64_t preemptions = after.num_preemptions - before.num_preemptions;
  const int64_t recomputed = after.num_recomputed_tokens - before.num_recomputed_tokens;
  const int64_t swap_outs = after.num_swap_outs - before.num_swap_outs;
  const int64_t swap_bytes =
      (after.num_blocks_swapped_out + after.num_blocks_swapped_in - before.num_blocks_swapped_out -
       before.num_blocks_swapped_in) * after.kv_bytes_per_block;
  const double preempted_seconds = after.preempted_seconds - before.preempted_seconds;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", n / r.elapsed,
              static_cast<double>(prompt_tokens + output_tokens) / r.elapsed,
              static_cast<double>(output_tokens) / r.elapsed);
  std::printf("Total num prompt tokens:  %lld\n", static_cast<long long>(prompt_tokens));
  std::printf("Total num output tokens:  %lld\n", static_cast<long long>(output_tokens));
  std::printf("Elapsed time (s):  %.3f\n", r.elapsed);
  std::printf("Prefix cache hit rate:  %.4f\n", prefix_cache_hit_rate(delta));
  std::printf("Preemptions:  %lld (%lld by swap, %.1f MiB swapped out and in; %lld computed tokens "
              "thrown away to recompute; %.2f s spent preempted, summed over requests)\n",
              static_cast<long long>(preemptions), static_cast<long long>(swap_outs),
              static_cast<double>(swap_bytes) / (1 << 20), static_cast<long long>(recomputed),
              preempted_seconds);
  const int64_t drafts = after.spec_num_drafts - before.spec_num_drafts;
  const int64_t draft_tokens = after.spec_num_draft_tokens - before.spec_num_draft_tokens;
  const int64_t accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens;
  if (s.eng->limits().num_speculative_tokens > 0) {
    std::printf("Spec decode: %lld verifications, %lld draft tokens, %lld accepted (rate %.4f), "
                "mean acceptance length %.3f\n",
                static_cast<long long>(drafts), static_cast<long long>(draft_tokens),
                static_cast<long long>(accepted),
                draft_tokens > 0 ? static_cast<double>(accepted) / static_cast<double>(draft_tokens) : 0.0,
                drafts > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts) : 0.0);
  }
  std::fflush(stdout);
  if (const std::string path = s.flags.get("json-out"); !path.empty()) {
    json_writer w;
    w.begin_object();
    w.key("date").value(iso_date_now());
    w.key("elapsed_time").value(r.elapsed);
    w.key("num_requests").value(static_cast<int64_t>(requests->size()));
    w.key("failed").value(r.num_failed());
    w.key("total_prompt_tokens").value(prompt_tokens);
    w.key("total_output_tokens").value(output_tokens);
    w.key("total_num_tokens").value(prompt_tokens + output_tokens);
    w.key("requests_per_second").value(n / r.elapsed);
    w.key("tokens_per_second").value(static_cast<double>(prompt_tokens + output_tokens) / r.elapsed);
    w.key("output_tokens_per_second").value(static_cast<double>(output_tokens) / r.elapsed);
    w.key("prefix_cache_hit_rate").value(prefix_cache_hit_rate(delta));
    w.key("num_preemptions").value(preemptions);
    w.key("num_swap_outs").value(swap_outs);
    w.key("num_preempted_tokens_recomputed").value(recomputed);
    w.key("kv_swap_bytes").value(swap_bytes);
    w.key("preempted_seconds").value(preempted_seconds);
    w.key("spec_num_drafts").value(drafts);
    w.key("spec_num_draft_tokens").value(draft_tokens);
    w.key("spec_num_accepted_tokens").value(accepted);
    std::vector<std::string> argv = args;
    argv.insert(argv.begin(), {"troupe", "bench", "throughput"});
    write_engine_settings(w, s, argv);
    w.key("output_lens").array(r.output_tokens);
    w.key("errors").array(r.errors);
    w.end_object();
    if (auto st = write_text_file(path, w.take()); !st) return print_error(st.error_message()), 1;
  }
  s.eng.reset();
  if (r.num_failed() > 0) {
    for (size_t i = 0; i < r.errors.size(); ++i) {
      if (!r.errors[i].empty()) {
        print_error(std::to_string(r.num_failed()) + " requests failed; request " + std::to_string(i) +
                    ": " + r.errors[i]);
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace troupe::bench
