#include "cli/generate_inputs.h"

#include <simdjson.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace troupe {

namespace {

result<int64_t> parse_int(const std::string& flag, const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return make_error("--" + flag + ": expected an integer, got '" + text + "'");
  }
  return v;
}

result<float> parse_float(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return make_error("--" + flag + ": expected a number, got '" + text + "'");
  }
  return v;
}

result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto v = parse_int("prompt-ids", item);
    if (!v) return std::move(v).take_error();
    ids.push_back(static_cast<int32_t>(*v));
  }
  if (ids.empty()) return make_error("--prompt-ids: expected a comma-separated list of token ids");
  return ids;
}

// Applies one sampling flag; false when `flag` is not a sampling flag.
result<bool> apply_sampling_flag(const std::string& flag, const std::string& value,
                                 sampling_params& p) {
  auto as_int = [&](auto& field) -> status {
    auto v = parse_int(flag, value);
    if (!v) return std::move(v).take_error();
    field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    return {};
  };
  auto as_float = [&](float& field) -> status {
    auto v = parse_float(flag, value);
    if (!v) return std::move(v).take_error();
    field = *v;
    return {};
  };
  status s;
  if (flag == "max-tokens") s = as_int(p.max_tokens);
  else if (flag == "temperature") s = as_float(p.temperature);
  else if (flag == "top-p") s = as_float(p.top_p);
  else if (flag == "top-k") s = as_int(p.top_k);
  else if (flag == "min-p") s = as_float(p.min_p);
  else if (flag == "n") s = as_int(p.n);
  else if (flag == "logprobs") s = as_int(p.logprobs);
  else if (flag == "prompt-logprobs") s = as_int(p.prompt_logprobs);
  else if (flag == "presence-penalty") s = as_float(p.presence_penalty);
  else if (flag == "frequency-penalty") s = as_float(p.frequency_penalty);
  else if (flag == "repetition-penalty") s = as_float(p.repetition_penalty);
  else if (flag == "ignore-eos") p.ignore_eos = true;
  else return false;
  if (!s) return std::move(s).take_error();
  return true;
}

std::string line_error(const std::string& file, size_t line, const std::string& message) {
  return file + ":" + std::to_string(line) + ": " + message;
}

constexpr const char* no_tokenizer =
    "text prompts need a tokenizer (the model folder has no tokenizer.json: set --tokenizer "
    "DIR, or give token ids)";

// One JSONL line: {"prompt_ids": [...]} or {"prompt": "..."} plus overrides.
status parse_prompt_line(simdjson::dom::object obj, const tokenizer* tok, generate_prompt& out) {
  bool has_prompt = false;
  for (auto [key, value] : obj) {
    const std::string k(key);
    if (k == "prompt_ids") {
      simdjson::dom::array arr;
      if (value.get(arr)) return make_error("prompt_ids: expected a list of token ids");
      for (auto id : arr) {
        int64_t v = 0;
        if (id.get(v)) return make_error("prompt_ids: expected a list of token ids");
        out.prompt_ids.push_back(static_cast<int32_t>(v));
      }
      has_prompt = true;
    } else if (k == "prompt") {
      std::string_view text;
      if (value.get(text)) return make_error("prompt: expected a string");
      if (tok == nullptr) return make_error(std::string("prompt: ") + no_tokenizer);
      out.prompt_ids = tok->encode(text, true);
      has_prompt = true;
    } else if (k == "stop") {
      simdjson::dom::array arr;
      std::string_view one;
      if (!value.get(one)) {
        out.params.stop.emplace_back(one);
      } else if (!value.get(arr)) {
        for (auto item : arr) {
          if (item.get(one)) return make_error("stop: expected a string or a list of strings");
          out.params.stop.emplace_back(one);
        }
      } else {
        return make_error("stop: expected a string or a list of strings");
      }
    } else if (k == "lora") {
      std::string_view name;
      if (!value.is_null() && value.get(name)) return make_error("lora: expected an adapter's name");
      out.lora = std::string(name);
    } else if (k == "max_tokens" || k == "top_k" || k == "seed" || k == "n" || k == "priority") {
      int64_t v = 0;
      if (value.get(v)) return make_error(k + ": expected an integer");
      if (k == "priority") out.params.priority = v;
      if (k == "max_tokens") out.params.max_tokens = static_cast<int32_t>(v);
      if (k == "top_k") out.params.top_k = static_cast<int32_t>(v);
      if (k == "n") out.params.n = static_cast<int32_t>(v);
      if (k == "seed") out.params.seed = v;
    } else if (k == "temperature" || k == "top_p" || k == "min_p") {
      double v = 0;
      if (value.get(v)) return make_error(k + ": expected a number");
      if (k == "temperature") out.params.temperature = static_cast<float>(v);
      if (k == "top_p") out.params.top_p = static_cast<float>(v);
      if (k == "min_p") out.params.min_p = static_cast<float>(v);
    } else {
      return make_error("unknown field '" + k + "' (expected prompt_ids, prompt, max_tokens, "
                        "temperature, top_p, top_k, min_p, seed, n, stop, priority, lora)");
    }
  }
  if (!has_prompt) return make_error("each line needs prompt_ids or prompt");
  return {};
}

result<std::vector<generate_prompt>> read_prompts_file(const std::string& path,
                                                       const sampling_params& defaults,
                                                       const std::string& lora,
                                                       const tokenizer* tok) {
  std::ifstream in(path);
  if (!in) return make_error("--prompts-file: cannot read '" + path + "'");
  std::vector<generate_prompt> prompts;
  simdjson::dom::parser parser;
  std::string text;
  size_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    simdjson::dom::object obj;
    if (parser.parse(text).get(obj)) {
      return make_error(line_error(path, line_no, "not a JSON object"));
    }
    generate_prompt p;
    p.params = defaults;
    p.lora = lora;
    if (status s = parse_prompt_line(obj, tok, p); !s) {
      return make_error(line_error(path, line_no, s.error_message()));
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return make_error("--prompts-file: '" + path + "' holds no prompts");
  return prompts;
}

}  // namespace

const std::vector<command_flag>& generate_flags() {
  static const std::vector<command_flag> flags = {
      {"prompt-ids", true},   {"prompt", true},          {"prompts-file", true},
      {"max-tokens", true, "16"},   {"temperature", true, "1.0"},     {"top-p", true, "1.0"},
      {"top-k", true, "0 (off)"},   {"min-p", true, "0"},           {"n", true, "1"},
      {"logprobs", true, "none"},   {"prompt-logprobs", true, "none"},
      {"presence-penalty", true, "0"}, {"frequency-penalty", true, "0"},
      {"repetition-penalty", true, "1.0"},
      {"stop", true},         {"ignore-eos", false},     {"json", false},
      {"lora", true, "the base model"},
  };
  return flags;
}

result<generate_inputs> build_generate_inputs(
    const std::vector<std::pair<std::string, std::string>>& flags, int64_t default_seed,
    int64_t vocab_size, const tokenizer* tok) {
  generate_inputs out;
  sampling_params defaults;
  defaults.has_seed = true;
  defaults.seed = default_seed;
  std::string prompt_ids, prompts_file, prompt_text, lora;
  bool has_text = false;
  int sources = 0;
  for (const auto& [flag, value] : flags) {
    if (flag == "prompt-ids") { prompt_ids = value; ++sources; continue; }
    if (flag == "prompts-file") { prompts_file = value; ++sources; continue; }
    if (flag == "prompt") { prompt_text = value; has_text = true; ++sources; continue; }
    if (flag == "stop") { defaults.stop.push_back(value); continue; }
    if (flag == "json") { out.json = true; continue; }
    if (flag == "lora") { lora = value; continue; }
    auto applied = apply_sampling_flag(flag, value, defaults);
    if (!applied) return std::move(applied).take_error();
  }
  if (sources != 1) {
    return make_error("generate needs exactly one of --prompt-ids, --prompt, --prompts-file");
  }
  if (has_text) {
    if (tok == nullptr) return make_error(std::string("--prompt: ") + no_tokenizer);
    out.prompts.push_back({tok->encode(prompt_text, true), defaults, lora});
  } else if (!prompt_ids.empty()) {
    auto ids = parse_ids(prompt_ids);
    if (!ids) return std::move(ids).take_error();
    out.prompts.push_back({std::move(ids.value()), defaults, lora});
  } else {
    auto prompts = read_prompts_file(prompts_file, defaults, lora, tok);
    if (!prompts) return std::move(prompts).take_error();
    out.prompts = std::move(prompts.value());
  }
  for (size_t i = 0; i < out.prompts.size(); ++i) {
    const generate_prompt& p = out.prompts[i];
    const std::string where = out.prompts.size() > 1 ? "prompt " + std::to_string(i) + ": " : "";
    for (int32_t id : p.prompt_ids) {
      if (id < 0 || id >= vocab_size) {
        return make_error(where + "prompt_ids: token id " + std::to_string(id) +
                          " is out of range for vocab_size " + std::to_string(vocab_size));
      }
    }
    if (std::string problem = validate_sampling_params(p.params, vocab_size); !problem.empty()) {
      return make_error(where + problem);
    }
    if (!p.params.stop.empty() && tok == nullptr) {
      return make_error(where + "stop: stop strings need a tokenizer");
    }
  }
  return out;
}

}  // namespace troupe
