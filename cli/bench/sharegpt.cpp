#include "cli/bench/sharegpt.h"

#include <simdjson.h>

#include "common/file_util.h"

namespace troupe::bench {

namespace {

struct conversation {
  std::string prompt, completion;
};

result<std::vector<conversation>> read_conversations(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return make_error("--dataset-path: " + text.error_message());
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto err = parser.parse(simdjson::padded_string(*text)).get(doc); err) {
    return make_error("--dataset-path: " + path + ": not JSON (" + simdjson::error_message(err) + ")");
  }
  simdjson::dom::array entries;
  if (doc.get_array().get(entries)) {
    return make_error("--dataset-path: " + path + ": expected a JSON array of conversations");
  }
  std::vector<conversation> out;
  for (simdjson::dom::element entry : entries) {
    simdjson::dom::array turns;
    if (entry["conversations"].get_array().get(turns) || turns.size() < 2) continue;
    std::string_view prompt, completion;
    if (turns.at(0)["value"].get_string().get(prompt) || turns.at(1)["value"].get_string().get(completion)) continue;
    out.push_back({std::string(prompt), std::string(completion)});
  }
  return out;
}

// vLLM's is_valid_sequence with its default limits.
bool is_valid_sequence(int64_t prompt_len, int64_t output_len, bool fixed_output) {
  return prompt_len >= 4 && (fixed_output || output_len >= 4) && prompt_len <= 1024 &&
         prompt_len + output_len <= 2048;
}

int64_t estimate_tokens(const std::string& text) {
  return static_cast<int64_t>((text.size() + 3) / 4);
}

}  // namespace

result<std::vector<sample_request>> load_sharegpt(const dataset_options& opts,
                                                  const token_source& src, bench_rng& rng) {
  if (opts.dataset_path.empty()) return make_error("--dataset-path: required for --dataset sharegpt");
  if (opts.format == prompt_format::ids && src.tok == nullptr) {
    return make_error("--dataset sharegpt: token-id prompts need a tokenizer (--tokenizer DIR), "
                      "or use --prompt-format text");
  }
  auto convs = read_conversations(opts.dataset_path);
  if (!convs) return std::move(convs).take_error();
  rng.shuffle(*convs);
  std::vector<sample_request> samples;
  for (const conversation& c : *convs) {
    if (static_cast<int64_t>(samples.size()) >= opts.num_prompts) break;
    sample_request r;
    std::vector<int32_t> ids;
    if (src.tok != nullptr) {
      ids = src.tok->encode(c.prompt, true);
      r.prompt_len = static_cast<int64_t>(ids.size());
    } else {
      r.prompt_len = estimate_tokens(c.prompt);
    }
    r.output_len = opts.output_len_set ? opts.output_len
                   : src.tok != nullptr ? static_cast<int64_t>(src.tok->encode(c.completion, true).size())
                                        : estimate_tokens(c.completion);
    if (!is_valid_sequence(r.prompt_len, r.output_len, opts.output_len_set)) continue;
    if (opts.format == prompt_format::ids) r.prompt_ids = std::move(ids);
    else r.prompt_text = c.prompt;
    samples.push_back(std::move(r));
  }
  if (samples.empty()) {
    return make_error("--dataset-path: " + opts.dataset_path +
                      ": no conversation passes the length filter (prompt 4..1024 tokens, "
                      "prompt + output <= 2048)");
  }
  // vLLM's maybe_oversample_requests: repeat random samples up to the count.
  const int64_t found = static_cast<int64_t>(samples.size());
  while (static_cast<int64_t>(samples.size()) < opts.num_prompts) {
    samples.push_back(samples[static_cast<size_t>(rng.uniform_int(0, found - 1))]);
  }
  return samples;
}

}  // namespace troupe::bench
