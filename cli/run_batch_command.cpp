// `troupe run-batch`: OpenAI's Batch API file format through the engine,
// as vLLM's run-batch.
//
//   troupe run-batch -i FILE.jsonl -o OUT.jsonl --model DIR [--config FILE] [--<config-key> VALUE]...
//
// Each input line is {"custom_id", "method": "POST", "url":
// "/v1/completions" | "/v1/chat/completions", "body": {...}}; every line is
// checked before the model loads (every problem listed, exit 2). The
// bodies go through the same routes as `troupe serve` (api_routes), so a
// line's response body is what the server would answer; a body the server
// would refuse gets that error as its response (its status code and
// OpenAI's error envelope) and the others go on. Output lines, in input
// order: {"id", "custom_id", "response": {"status_code", "request_id",
// "body"}, "error": null}. Requests run concurrently (up to max_num_seqs
// at a time); progress goes to stderr.
#include <simdjson.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

#include "actors/engine.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "common/json_writer.h"
#include "net/routes.h"

namespace troupe {

namespace {

struct batch_line {
  std::string custom_id;
  std::string url;
  std::string body;  // minified JSON object
};

// Every line of the input file, or every problem (with line numbers).
result<std::vector<batch_line>> read_batch(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("--input-file: cannot read '" + path + "'");
  std::vector<batch_line> lines;
  std::vector<std::string> problems;
  std::set<std::string> ids;
  simdjson::dom::parser parser;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    simdjson::dom::element doc;
    if (parser.parse(text).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
      problems.push_back(where + "not a JSON object");
      continue;
    }
    std::string_view custom_id, method, url;
    simdjson::dom::element body;
    if (doc["custom_id"].get(custom_id) != simdjson::SUCCESS) {
      problems.push_back(where + "custom_id: a string is required");
    } else if (!ids.insert(std::string(custom_id)).second) {
      problems.push_back(where + "custom_id '" + std::string(custom_id) + "' is used twice");
    }
    if (doc["method"].get(method) != simdjson::SUCCESS || method != "POST") {
      problems.push_back(where + "method: must be \"POST\"");
    }
    if (doc["url"].get(url) != simdjson::SUCCESS ||
        (url != "/v1/completions" && url != "/v1/chat/completions")) {
      problems.push_back(where + "url: must be \"/v1/completions\" or \"/v1/chat/completions\"");
    }
    if (doc["body"].get(body) != simdjson::SUCCESS || !body.is_object()) {
      problems.push_back(where + "body: a JSON object is required");
    }
    if (problems.empty()) {
      lines.push_back({std::string(custom_id), std::string(url), simdjson::minify(body)});
    }
  }
  if (!problems.empty()) {
    std::string message = "invalid batch file (" + std::to_string(problems.size()) +
                          (problems.size() == 1 ? " problem):" : " problems):");
    for (const std::string& p : problems) message += "\n  - " + p;
    return make_error(message);
  }
  if (lines.empty()) return make_error("--input-file: '" + path + "' has no requests");
  return lines;
}

// One output of a line's choice, from the request actors' threads.
struct arrival {
  size_t line = 0, choice = 0;
  request_output out;
};

class arrivals {
 public:
  void push(arrival a) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(a));
    cv_.notify_one();
  }
  arrival pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    arrival a = std::move(queue_.front());
    queue_.pop_front();
    return a;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<arrival> queue_;
};

class line_sink : public request_sink {
 public:
  line_sink(std::shared_ptr<arrivals> to, size_t line, size_t choice)
      : to_(std::move(to)), line_(line), choice_(choice) {}
  void on_output(const request_output& out) override { to_->push({line_, choice_, out}); }

 private:
  std::shared_ptr<arrivals> to_;
  size_t line_, choice_;
};

std::string random_hex(std::mt19937_64& rng) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

// One output line (OpenAI's batch output format).
std::string output_line(const batch_line& in, int status, const std::string& body,
                        std::mt19937_64& rng) {
  std::string line = "{\"id\":";
  append_json_string(line, "batch_req_" + random_hex(rng));
  line += ",\"custom_id\":";
  append_json_string(line, in.custom_id);
  line += ",\"response\":{\"status_code\":" + std::to_string(status) + ",\"request_id\":";
  append_json_string(line, "troupe-batch-" + random_hex(rng));
  line += ",\"body\":" + body + "},\"error\":null}";
  return line;
}

std::vector<std::string> expand_short_flags(std::vector<std::string> args) {
  for (std::string& a : args) {
    if (a == "-i") a = "--input-file";
    if (a == "-o") a = "--output-file";
  }
  return args;
}

}  // namespace

int run_run_batch(const std::vector<std::string>& argv) {
  const std::vector<command_flag> flags = {{"input-file", true}, {"output-file", true}};
  if (show_help(argv, "usage: troupe run-batch -i FILE.jsonl -o OUT.jsonl --model DIR "
                        "[--config FILE] [options]\n"
                        "OpenAI's Batch API file format through the engine, as vLLM's "
                        "run-batch (docs/server.md); -i and -o are\n--input-file and "
                        "--output-file.",
                        flags, true)) return 0;
  auto parsed = parse_args(expand_short_flags(argv), flags);
  if (!parsed) return print_error(parsed.error_message()), 2;
  std::string input, output;
  for (const auto& [flag, value] : parsed->rest) (flag == "input-file" ? input : output) = value;
  if (input.empty() || output.empty()) {
    return print_error("run-batch: -i/--input-file and -o/--output-file are required"), 2;
  }
  auto lines = read_batch(input);
  if (!lines) return print_error(lines.error_message()), 2;
  engine_config config = parsed->config;
  config.offline = true;  // a whole batch at once: vLLM's offline defaults
  command_setup setup;
  if (!prepare_command(config, setup)) return 2;
  auto eng = engine::create(config, setup.tok);
  if (!eng) return print_error(eng.error_message()), 1;
  const api_routes routes(**eng, config);
  const size_t total = lines->size();
  std::vector<std::unique_ptr<generation>> gens(total);
  std::vector<std::string> results(total);
  auto queue = std::make_shared<arrivals>();
  std::mt19937_64 rng(std::random_device{}());
  const auto window = static_cast<size_t>(std::max<int64_t>(1, (*eng)->limits().max_num_seqs));
  size_t next = 0, in_flight = 0, done = 0;
  bool queue_full = false;  // a 503 while others ran: wait for one to finish
  const std::string authorization = config.api_key.empty() ? "" : "Bearer " + config.api_key;
  auto finish = [&](size_t i, int status, const std::string& body) {
    results[i] = output_line((*lines)[i], status, body, rng);
    if (++done % 100 == 0 || done == total) {
      std::fprintf(stderr, "run-batch: %zu/%zu requests done\n", done, total);
    }
  };
  while (done < total) {
    while (next < total && in_flight < window && !queue_full) {
      const batch_line& l = (*lines)[next];
      const http_request_view view{"POST", l.url, authorization, "application/json", l.body};
      route_result r = routes.handle(view);
      if (auto* reply = std::get_if<http_reply>(&r)) {
        // The queue is full now (503 while others run): again once one ends.
        if (reply->status == 503 && in_flight > 0) {
          queue_full = true;
          break;
        }
        finish(next++, reply->status, reply->body);
        continue;
      }
      if (!std::holds_alternative<prepared_generation>(r)) {  // not a generation route
        finish(next++, 400, api_error_body(bad_request("url: not available in a batch", "url")));
        continue;
      }
      prepared_generation& g = std::get<prepared_generation>(r);
      if (g.ctx.stream) {
        finish(next++, 400, api_error_body(bad_request("stream: not available in a batch", "stream")));
        continue;
      }
      std::vector<engine::submission> batch;
      for (size_t c = 0; c < g.choices.size(); ++c) {
        batch.push_back({std::move(g.choices[c].prompt_ids), g.choices[c].params,
                         std::make_shared<line_sink>(queue, next, c), g.choices[c].fork_of_index,
                         c == 0 ? -1 : 0});
      }
      gens[next] = std::make_unique<generation>(std::move(g.ctx));
      (*eng)->submit_batch(std::move(batch));
      ++in_flight;
      ++next;
    }
    if (in_flight == 0) continue;
    arrival a = queue->pop();
    generation& gen = *gens[a.line];
    gen.on_output(a.choice, a.out);
    if (!gen.done()) continue;
    --in_flight;
    queue_full = false;
    if (gen.first_error().empty()) {
      finish(a.line, 200, gen.response_body());
    } else {
      const api_error e = gen.first_error_reply();
      finish(a.line, e.status, api_error_body(e));
    }
    gens[a.line].reset();
  }
  std::ofstream out(output);
  for (const std::string& line : results) out << line << "\n";
  out.flush();
  if (!out) return print_error("--output-file: cannot write '" + output + "'"), 1;
  std::fprintf(stderr, "run-batch: wrote %zu responses to %s\n", total, output.c_str());
  return 0;
}

}  // namespace troupe
