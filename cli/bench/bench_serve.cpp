// `troupe bench serve`: drives an OpenAI-compatible server (troupe, vLLM,
// transformers serve, llama.cpp) over HTTP with streamed completions or
// chat completions and reports vLLM's serving metrics (docs/bench.md).
#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli/bench/arrivals.h"
#include "cli/bench/bench_commands.h"
#include "cli/help.h"
#include "cli/bench/bench_flags.h"
#include "cli/bench/report.h"
#include "cli/bench/serve_load.h"
#include "cli/commands.h"
#include "common/json_writer.h"

namespace troupe::bench {

namespace {

std::vector<flag_spec> serve_specs() {
  std::vector<flag_spec> s = {
      {"base-url", flag_kind::value, ""},        {"host", flag_kind::value, "127.0.0.1"},
      {"port", flag_kind::value, "8000"},        {"endpoint", flag_kind::value, "/v1/completions"},
      {"model", flag_kind::value, ""},           {"tokenizer", flag_kind::value, ""},
      {"vocab-size", flag_kind::value, "32000"},  {"prompt-format", flag_kind::value, "auto"},
      {"seed", flag_kind::value, "0"},           {"request-rate", flag_kind::value, "inf"},
      {"burstiness", flag_kind::value, "1"},     {"max-concurrency", flag_kind::value, "0"},
      {"ignore-eos", flag_kind::boolean, ""},    {"num-warmups", flag_kind::value, "1"},
      {"metric-percentiles", flag_kind::value, "90,99"},
      {"percentile-metrics", flag_kind::value, "ttft,tpot,itl,e2el"},
      {"goodput", flag_kind::multi, ""},         {"json-out", flag_kind::value, ""},
      {"header", flag_kind::multi, ""},          {"extra-body", flag_kind::value, ""},
      {"temperature", flag_kind::value, ""},     {"top-p", flag_kind::value, ""},
      {"top-k", flag_kind::value, ""},           {"min-p", flag_kind::value, ""},
      {"presence-penalty", flag_kind::value, ""}, {"frequency-penalty", flag_kind::value, ""},
      {"repetition-penalty", flag_kind::value, ""}, {"timeout", flag_kind::value, "21600"},
      {"disable-progress", flag_kind::boolean, ""}, {"disable-tqdm", flag_kind::boolean, ""},
      {"lora-modules", flag_kind::multi, ""}};
  for (flag_spec& d : dataset_flag_specs()) s.push_back(std::move(d));
  return s;
}

struct serve_setup {
  http_endpoint ep;
  std::string endpoint, model;
  // vLLM's --lora-modules: each request names one of these (drawn
  // uniformly, seeded) instead of `model`.
  std::vector<std::string> lora_modules;
  bool chat = false;
  header_list headers;
  std::unique_ptr<tokenizer> tok;
  dataset_options data;
  double rate = 0, burstiness = 1;
  int64_t max_concurrency = 0, num_warmups = 0, timeout_s = 0;
  int64_t vocab_size = 0;  // token ids without a tokenizer
  std::vector<double> percentiles;
  std::vector<std::string> percentile_metrics;
  goodput_slo slo;
  bool ignore_eos = false;
  std::string extra_body;  // a JSON object's members, without the braces
  std::vector<std::string> extra_keys;
  std::vector<std::pair<std::string, std::string>> sampling;  // name -> JSON number
};

// The --extra-body object: its keys and its members as raw JSON text.
status read_extra_body(const std::string& text, serve_setup& s) {
  if (text.empty()) return {};
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(text).get_object().get(obj)) return make_error("--extra-body: expected a JSON object");
  for (auto field : obj) {
    s.extra_keys.emplace_back(field.key);
    if (!s.extra_body.empty()) s.extra_body += ',';
    append_json_string(s.extra_body, field.key);
    s.extra_body += ':' + simdjson::minify(field.value);
  }
  return {};
}

status read_sampling(const flag_values& f, serve_setup& s) {
  for (const char* name : {"temperature", "top-p", "top-k", "min-p", "presence-penalty",
                           "frequency-penalty", "repetition-penalty"}) {
    if (!f.has(name)) continue;
    auto v = f.get_double(name);
    if (!v) return std::move(v).take_error();
    std::string key = name;
    for (char& c : key) c = c == '-' ? '_' : c;
    json_writer w;
    w.value(*v);
    s.sampling.emplace_back(key, w.take());
  }
  return {};
}

status read_load(const flag_values& f, serve_setup& s) {
  auto rate = f.get_double("request-rate");
  if (!rate) return std::move(rate).take_error();
  auto burst = f.get_double("burstiness");
  if (!burst) return std::move(burst).take_error();
  auto conc = f.get_int("max-concurrency");
  if (!conc) return std::move(conc).take_error();
  auto warm = f.get_int("num-warmups");
  if (!warm) return std::move(warm).take_error();
  auto timeout = f.get_int("timeout");
  if (!timeout) return std::move(timeout).take_error();
  if (!(*rate > 0)) return make_error("--request-rate: must be > 0 (or inf)");
  if (!(*burst > 0)) return make_error("--burstiness: must be > 0");
  if (*conc < 0) return make_error("--max-concurrency: must be >= 0 (0: no limit)");
  if (*warm < 0) return make_error("--num-warmups: must be >= 0");
  if (*timeout < 1) return make_error("--timeout: must be >= 1 (seconds)");
  s.rate = *rate;
  s.burstiness = *burst;
  s.max_concurrency = *conc;
  s.num_warmups = *warm;
  s.timeout_s = *timeout;
  return {};
}

status read_metrics_flags(const flag_values& f, serve_setup& s) {
  auto p = parse_percentiles(f.get("metric-percentiles"));
  if (!p) return std::move(p).take_error();
  s.percentiles = *p;
  std::string list = f.get("percentile-metrics");
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string m = list.substr(pos, comma - pos);
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      return make_error("--percentile-metrics: expected ttft, tpot, itl or e2el, got '" + m + "'");
    }
    s.percentile_metrics.push_back(m);
    pos = comma + 1;
  }
  auto slo = parse_goodput(f.all("goodput"));
  if (!slo) return std::move(slo).take_error();
  s.slo = *slo;
  return {};
}

status read_target(const flag_values& f, serve_setup& s) {
  std::string url = f.get("base-url");
  if (url.empty()) url = "http://" + f.get("host") + ":" + f.get("port");
  auto ep = parse_base_url(url);
  if (!ep) return std::move(ep).take_error();
  s.ep = *ep;
  s.endpoint = f.get("endpoint");
  if (s.endpoint.empty() || s.endpoint.front() != '/') return make_error("--endpoint: expected a path like /v1/completions");
  s.chat = s.endpoint.find("chat/completions") != std::string::npos;
  s.model = f.get("model");
  s.lora_modules = f.all("lora-modules");
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
    s.headers.emplace_back("Authorization", std::string("Bearer ") + key);
  }
  for (const std::string& h : f.all("header")) {
    const size_t eq = h.find('=');
    if (eq == std::string::npos || eq == 0) return make_error("--header: expected KEY=VALUE, got '" + h + "'");
    s.headers.emplace_back(h.substr(0, eq), h.substr(eq + 1));
  }
  return {};
}

status read_dataset(const flag_values& f, serve_setup& s) {
  auto d = dataset_options_from(f);
  if (!d) return std::move(d).take_error();
  s.data = *d;
  auto seed = f.get_int("seed");
  if (!seed) return std::move(seed).take_error();
  s.data.seed = static_cast<uint64_t>(*seed);
  const std::string fmt = f.get("prompt-format");
  if (fmt == "auto") {
    s.data.format = s.chat || s.data.kind == dataset_kind::sharegpt ? prompt_format::text : prompt_format::ids;
  } else if (fmt == "ids" || fmt == "text") {
    s.data.format = fmt == "ids" ? prompt_format::ids : prompt_format::text;
  } else {
    return make_error("--prompt-format: expected auto, ids or text, got '" + fmt + "'");
  }
  if (s.chat && s.data.format == prompt_format::ids) {
    return make_error("--prompt-format ids: chat endpoints take text (use /v1/completions for token ids)");
  }
  auto vocab = f.get_int("vocab-size");
  if (!vocab) return std::move(vocab).take_error();
  if (*vocab < 1) return make_error("--vocab-size: must be >= 1");
  s.vocab_size = *vocab;
  // vLLM ignores EOS for its synthetic datasets so outputs reach their length.
  s.ignore_eos = f.get_bool("ignore-eos") || s.data.kind != dataset_kind::sharegpt;
  if (!f.get("tokenizer").empty()) {
    auto tok = tokenizer::load(f.get("tokenizer"));
    if (!tok) return make_error("--tokenizer: " + tok.error_message());
    s.tok = std::move(tok.value());
  }
  return {};
}

result<serve_setup> read_setup(const flag_values& f) {
  serve_setup s;
  for (auto step : {read_target, read_load, read_metrics_flags, read_dataset, read_sampling}) {
    if (auto st = step(f, s); !st) return std::move(st).take_error();
  }
  if (auto st = read_extra_body(f.get("extra-body"), s); !st) return std::move(st).take_error();
  return s;
}

std::string request_body(const serve_setup& s, const sample_request& r, const std::string& model) {
  const auto ours = [&](const std::string& key) {
    return std::find(s.extra_keys.begin(), s.extra_keys.end(), key) == s.extra_keys.end();
  };
  json_writer w;
  w.begin_object();
  if (ours("model")) w.key("model").value(model);
  if (s.chat) {
    if (ours("messages")) {
      w.key("messages").begin_array().begin_object();
      w.key("role").value("user").key("content").value(r.prompt_text).end_object().end_array();
    }
    if (ours("max_completion_tokens")) w.key("max_completion_tokens").value(r.output_len);
  } else {
    if (ours("prompt")) {
      w.key("prompt");
      if (r.prompt_ids.empty() && !r.prompt_text.empty()) w.value(r.prompt_text);
      else w.array(r.prompt_ids);
    }
    if (ours("max_tokens")) w.key("max_tokens").value(r.output_len);
  }
  if (ours("stream")) w.key("stream").value(true);
  if (ours("stream_options")) w.key("stream_options").begin_object().key("include_usage").value(true).end_object();
  if (s.ignore_eos && ours("ignore_eos")) w.key("ignore_eos").value(true);
  std::string body = w.take();
  for (const auto& [k, v] : s.sampling) {
    if (!ours(k)) continue;
    body += ',';
    append_json_string(body, k);
    body += ':' + v;
  }
  if (!s.extra_body.empty()) body += ',' + s.extra_body;
  return body + '}';
}

result<std::string> first_served_model(const serve_setup& s) {
  const simple_response r = http_fetch(s.ep, "GET", "/v1/models", s.headers, "", std::chrono::seconds(30));
  if (r.status != 200) {
    return make_error("no --model given and GET " + s.ep.url() + "/v1/models failed: " +
                      (r.status == 0 ? r.error : "HTTP " + std::to_string(r.status)));
  }
  simdjson::dom::parser parser;
  std::string_view id;
  if (parser.parse(r.body)["data"].at(0)["id"].get_string().get(id)) {
    return make_error("no --model given and " + s.ep.url() + "/v1/models lists no model");
  }
  return std::string(id);
}

// The server's prefix-cache counters (troupe: or vllm: names), if exported.
std::optional<std::pair<double, double>> prefix_cache_counters(const serve_setup& s) {
  const simple_response r = http_fetch(s.ep, "GET", "/metrics", s.headers, "", std::chrono::seconds(5));
  if (r.status != 200) return std::nullopt;
  double queries = 0, hits = 0;
  bool found = false;
  size_t pos = 0;
  while (pos < r.body.size()) {
    size_t end = r.body.find('\n', pos);
    if (end == std::string::npos) end = r.body.size();
    const std::string line = r.body.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    const std::string name = line.substr(colon + 1, line.find_first_of("{ ", colon) - colon - 1);
    const double v = std::atof(line.substr(line.rfind(' ') + 1).c_str());
    if (name == "prefix_cache_queries_total") queries += v, found = true;
    else if (name == "prefix_cache_hits_total") hits += v;
  }
  if (!found) return std::nullopt;
  return std::make_pair(queries, hits);
}

// `seed` draws the adapters of --lora-modules.
std::vector<load_request> load_requests(const serve_setup& s, const std::vector<sample_request>& samples,
                                        uint64_t seed) {
  std::vector<load_request> out;
  out.reserve(samples.size());
  bench_rng pick(seed ^ 0x6c6f7261ULL);
  const auto last = static_cast<int64_t>(s.lora_modules.size()) - 1;
  for (const sample_request& r : samples) {
    const std::string& model = last < 0 ? s.model : s.lora_modules[static_cast<size_t>(pick.uniform_int(0, last))];
    out.push_back({std::make_shared<const std::string>(
                       build_request(s.ep, "POST", s.endpoint, s.headers, request_body(s, r, model))),
                   r.prompt_len});
  }
  return out;
}

serve_context make_context(const serve_setup& s, const flag_values& flags, const std::vector<std::string>& args) {
  serve_context ctx;
  ctx.date = iso_date_now();
  ctx.backend = s.chat ? "openai-chat" : "openai";
  ctx.base_url = s.ep.url();
  ctx.endpoint = s.endpoint;
  ctx.model_id = s.model;
  ctx.tokenizer_id = flags.get("tokenizer");
  ctx.dataset = dataset_kind_name(s.data.kind);
  ctx.num_prompts = s.data.num_prompts;
  ctx.request_rate = s.rate;
  ctx.burstiness = s.burstiness;
  ctx.max_concurrency = s.max_concurrency;
  ctx.percentiles = s.percentiles;
  ctx.percentile_metrics = s.percentile_metrics;
  ctx.slo = s.slo;
  ctx.command_line = args;
  ctx.command_line.insert(ctx.command_line.begin(), {"troupe", "bench", "serve"});
  ctx.flags = &flags;
  return ctx;
}

// Requests of the same shape as the run's but other prompts (the dataset
// drawn with the next seed), so that the warm-up leaves nothing in the
// prefix cache that the run's prompts could hit.
void warm_up(const serve_setup& s, const token_source& src) {
  if (s.num_warmups == 0) return;
  std::fprintf(stderr, "bench: warming up with %lld request(s)\n", static_cast<long long>(s.num_warmups));
  dataset_options opts = s.data;
  opts.num_prompts = s.num_warmups;
  opts.seed = s.data.seed + 1;
  auto samples = make_dataset(opts, src);
  if (!samples) return;
  const std::vector<load_request> warm = load_requests(s, *samples, opts.seed);
  load_options lo;
  lo.arrivals.assign(warm.size(), 0.0);
  lo.max_concurrency = s.max_concurrency;
  lo.timeout = std::chrono::seconds(s.timeout_s);
  lo.progress = false;
  auto r = run_load(s.ep, warm, lo);
  if (!r) return;
  for (const request_record& rec : r->records) {
    if (!rec.success) {
      std::fprintf(stderr, "bench: warning: warm-up request failed: %s\n", rec.error.c_str());
      return;
    }
  }
}

}  // namespace

int run_bench_serve(const std::vector<std::string>& args) {
  if (show_help(args, "usage: troupe bench serve [options]   (docs/bench.md)\n"
                        "Loads an OpenAI-compatible server over HTTP (streaming), as vLLM's "
                        "benchmark_serving.py.",
                        as_command_flags(serve_specs()), false)) return 0;
  auto flags = parse_flags(args, serve_specs());
  if (!flags) return print_error(flags.error_message()), 2;
  auto setup = read_setup(*flags);
  if (!setup) return print_error(setup.error_message()), 2;
  serve_setup& s = *setup;
  const token_source src{s.tok ? s.tok->vocab_size() : s.vocab_size, s.tok.get()};
  auto samples = make_dataset(s.data, src);
  if (!samples) return print_error(samples.error_message()), 2;
  if (s.model.empty()) {
    auto m = first_served_model(s);
    if (!m) return print_error(m.error_message()), 1;
    s.model = *m;
  }
  const std::vector<load_request> requests = load_requests(s, *samples, s.data.seed);
  raise_open_file_limit();
  warm_up(s, src);
  bench_rng arrival_rng(s.data.seed ^ 0x9e3779b97f4a7c15ULL);
  load_options opts;
  opts.arrivals = arrival_times(static_cast<int64_t>(requests.size()), s.rate, s.burstiness, arrival_rng);
  opts.max_concurrency = s.max_concurrency;
  opts.timeout = std::chrono::seconds(s.timeout_s);
  opts.progress = !flags->get_bool("disable-progress") && !flags->get_bool("disable-tqdm");
  opts.label = "bench serve";
  std::string models = s.model;
  if (!s.lora_modules.empty()) {
    models = "LoRA adapters drawn uniformly from";
    for (const std::string& name : s.lora_modules) models += " " + name;
  }
  std::fprintf(stderr, "bench: %zu requests to %s%s (model %s), request rate %g, burstiness %g, max concurrency %s\n",
               requests.size(), s.ep.url().c_str(), s.endpoint.c_str(), models.c_str(), s.rate,
               s.burstiness, s.max_concurrency > 0 ? std::to_string(s.max_concurrency).c_str() : "none");
  const auto cache_before = prefix_cache_counters(s);
  auto run = run_load(s.ep, requests, opts);
  if (!run) return print_error(run.error_message()), 1;
  const auto cache_after = prefix_cache_counters(s);
  const serve_metrics m = compute_serve_metrics(run->records, run->duration, s.percentiles, s.slo);
  serve_context ctx = make_context(s, *flags, args);
  if (cache_before && cache_after && cache_after->first > cache_before->first) {
    ctx.prefix_cache_hit_rate =
        (cache_after->second - cache_before->second) / (cache_after->first - cache_before->first);
  }
  print_serve_table(stdout, ctx, m);
  if (const std::string path = flags->get("json-out"); !path.empty()) {
    if (auto st = write_text_file(path, serve_json(ctx, m, run->records)); !st) {
      return print_error(st.error_message()), 1;
    }
  }
  if (m.completed == 0) return print_error("all " + std::to_string(m.failed) + " requests failed"), 1;
  return 0;
}

}  // namespace troupe::bench
