// `troupe bench latency`: one batch of a fixed size, as vLLM's `bench
// latency` (random token-id prompts, temperature 1, top_p 1, EOS ignored),
// run --num-iters-warmup times untimed and --num-iters times timed. Each
// iteration's prompts are new (drawn from the seed and the iteration), so
// the prefix cache never shortens a prefill. Per iteration: end-to-end
// latency, prefill time (submit until every request of the batch has its
// first token) and decode time (the rest); averages, std and the 10, 25,
// 50, 75, 90 and 99th percentiles. --json-out.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/bench/bench_commands.h"
#include "cli/bench/bench_offline.h"
#include "cli/bench/metrics.h"
#include "cli/bench/report.h"
#include "cli/commands.h"

namespace troupe::bench {

namespace {

std::vector<flag_spec> latency_specs() {
  return {{"batch-size", flag_kind::value, "8"},        {"input-len", flag_kind::value, "32"},
          {"output-len", flag_kind::value, "128"},      {"num-iters", flag_kind::value, "30"},
          {"num-iters-warmup", flag_kind::value, "10"}, {"json-out", flag_kind::value, ""}};
}

struct latency_args {
  int64_t batch_size = 0, input_len = 0, output_len = 0, num_iters = 0, num_warmup = 0;
};

result<latency_args> read_args(const flag_values& f, const engine_limits& limits) {
  latency_args a;
  struct item {
    const char* name;
    int64_t* field;
    int64_t min;
  };
  for (const item& i : {item{"batch-size", &a.batch_size, 1}, item{"input-len", &a.input_len, 1},
                        item{"output-len", &a.output_len, 1}, item{"num-iters", &a.num_iters, 1},
                        item{"num-iters-warmup", &a.num_warmup, 0}}) {
    auto v = f.get_int(i.name);
    if (!v) return std::move(v).take_error();
    if (*v < i.min) return make_error("--" + std::string(i.name) + ": must be >= " + std::to_string(i.min));
    *i.field = *v;
  }
  if (a.input_len + a.output_len > limits.max_model_len) {
    return make_error("--input-len + --output-len (" + std::to_string(a.input_len + a.output_len) +
                      ") exceeds max_model_len " + std::to_string(limits.max_model_len));
  }
  return a;
}

std::vector<offline_request> make_batch(const latency_args& a, int64_t vocab, int64_t seed, int64_t iteration) {
  bench_rng rng(static_cast<uint64_t>(seed) * 1000003ULL + static_cast<uint64_t>(iteration));
  std::vector<offline_request> batch(static_cast<size_t>(a.batch_size));
  for (size_t i = 0; i < batch.size(); ++i) {
    offline_request& r = batch[i];
    for (int64_t t = 0; t < a.input_len; ++t) {
      r.prompt_ids.push_back(static_cast<int32_t>(rng.uniform_int(0, std::min<int64_t>(vocab, 10000) - 1)));
    }
    r.params.temperature = 1.0f;
    r.params.top_p = 1.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = static_cast<int32_t>(a.output_len);
    r.params.has_seed = true;
    r.params.seed = seed + iteration * a.batch_size + static_cast<int64_t>(i);
  }
  return batch;
}

const std::vector<double> latency_percentiles = {10, 25, 50, 75, 90, 99};

void print_series(const char* name, const std::vector<double>& v) {
  const distribution d = summarize(v, latency_percentiles, 1.0);
  std::printf("Avg %s: %.6f seconds\n", name, d.mean);
  std::printf("Std %s: %.6f seconds\n", name, d.std);
  for (const auto& [p, value] : d.percentiles) {
    std::printf("%s%% percentile %s: %.6f seconds\n", percentile_name(p).c_str(), name, value);
  }
}

void write_series(json_writer& w, const std::string& name, const std::string& plural,
                  const std::vector<double>& v) {
  const distribution d = summarize(v, latency_percentiles, 1.0);
  w.key("avg_" + name).value(d.mean);
  w.key("std_" + name).value(d.std);
  w.key(plural).array(v);
  w.key(name + "_percentiles").begin_object();
  for (const auto& [p, value] : d.percentiles) w.key(percentile_name(p)).value(value);
  w.end_object();
}

}  // namespace

int run_bench_latency(const std::vector<std::string>& args) {
  offline_setup s = start_offline(args, latency_specs(), "latency");
  if (s.exit_code != 0) return std::max(s.exit_code, 0);  // -1: --help printed
  auto a = read_args(s.flags, s.eng->limits());
  if (!a) return print_error(a.error_message()), 2;
  const int64_t vocab = s.setup.model.vocab_size;
  std::vector<double> latencies, prefills, decodes;
  for (int64_t it = 0; it < a->num_warmup + a->num_iters; ++it) {
    const bool warm = it < a->num_warmup;
    const offline_result r = run_offline_batch(*s.eng, make_batch(*a, vocab, s.config.seed, it));
    if (r.num_failed() > 0) {
      for (const std::string& e : r.errors) {
        if (!e.empty()) return print_error("a request failed: " + e), 1;
      }
    }
    std::fprintf(stderr, "bench latency: %s %lld/%lld: %.4f s (prefill %.4f s)\n",
                 warm ? "warm-up" : "iteration", static_cast<long long>(warm ? it + 1 : it - a->num_warmup + 1),
                 static_cast<long long>(warm ? a->num_warmup : a->num_iters), r.elapsed, r.batch_first_token());
    if (warm) continue;
    latencies.push_back(r.elapsed);
    prefills.push_back(r.batch_first_token());
    decodes.push_back(r.elapsed - r.batch_first_token());
  }
  print_series("latency", latencies);
  print_series("prefill time", prefills);
  print_series("decode time", decodes);
  const double decode_ms_per_token =
      a->output_len > 1 ? summarize(decodes, {}, 1000.0).mean / static_cast<double>(a->output_len - 1) : 0.0;
  std::printf("Avg decode time per output token (ms): %.3f\n", decode_ms_per_token);
  std::fflush(stdout);
  if (const std::string path = s.flags.get("json-out"); !path.empty()) {
    json_writer w;
    w.begin_object();
    w.key("date").value(iso_date_now());
    w.key("batch_size").value(a->batch_size);
    w.key("input_len").value(a->input_len);
    w.key("output_len").value(a->output_len);
    w.key("num_iters").value(a->num_iters);
    w.key("num_iters_warmup").value(a->num_warmup);
    write_series(w, "latency", "latencies", latencies);
    w.key("percentiles").begin_object();  // vLLM's key for the latency percentiles
    for (const auto& [p, v] : summarize(latencies, latency_percentiles, 1.0).percentiles) {
      w.key(percentile_name(p)).value(v);
    }
    w.end_object();
    write_series(w, "prefill_time", "prefill_times", prefills);
    write_series(w, "decode_time", "decode_times", decodes);
    w.key("avg_decode_ms_per_output_token").value(decode_ms_per_token);
    std::vector<std::string> argv = args;
    argv.insert(argv.begin(), {"troupe", "bench", "latency"});
    write_engine_settings(w, s, argv);
    w.end_object();
    if (auto st = write_text_file(path, w.take()); !st) return print_error(st.error_message()), 1;
  }
  s.eng.reset();
  return 0;
}

}  // namespace troupe::bench
