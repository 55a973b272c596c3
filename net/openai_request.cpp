#include "net/openai_request.h"

#include "common/nearest_name.h"
#include "net/field_reader.h"
#include "net/structured_request.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace troupe {

namespace {

// The fields both generation routes read (read_generation).
constexpr std::string_view generation_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop",
    "stop_token_ids", "ignore_eos", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "skip_special_tokens", "include_stop_str_in_output", "stream",
    "return_token_ids", "prompt_logprobs", "min_tokens", "bad_words", "allowed_token_ids",
    "logit_bias", "user", "best_of", "seed", "stream_options"};

// A field the route does not know: a 400 naming it (with the nearest known
// name when one is close), rather than a request quietly run otherwise.
maybe_error reject_unknown(const field_reader& f, std::initializer_list<std::string_view> route_fields) {
  std::vector<std::string_view> known(std::begin(generation_fields), std::end(generation_fields));
  known.insert(known.end(), std::begin(structured_output_fields), std::end(structured_output_fields));
  known.insert(known.end(), route_fields);
  const std::string key = f.first_unknown(known);
  if (key.empty()) return std::nullopt;
  const std::vector<std::string> names(known.begin(), known.end());
  const std::string near = nearest_name(key, names);
  return bad_request(key + ": unknown field" + (near.empty() ? "" : " (did you mean '" + near + "'?)"),
                     key);
}

// Parses the body; the document lives in the thread's parser until the next
// call on this thread.
std::variant<object, api_error> parse_object(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc)) {
    return bad_request(std::string("invalid JSON in request body: ") + simdjson::error_message(err));
  }
  if (!doc.is_object()) return bad_request("request body: expected a JSON object");
  return object(doc);
}

maybe_error reject_unsupported(const field_reader& f, std::initializer_list<std::string_view> keys) {
  for (std::string_view k : keys) {
    if (f.has(k)) return bad_request(std::string(k) + ": not supported yet", std::string(k));
  }
  return std::nullopt;
}

// logit_bias: {"token id": bias, ...} (OpenAI's), sorted by token.
maybe_error read_logit_bias(const field_reader& f, std::vector<std::pair<int32_t, float>>& out) {
  element e;
  if (!f.get("logit_bias", e)) return std::nullopt;
  if (!e.is_object()) return type_error("logit_bias", "an object mapping token ids to biases");
  for (auto [key, value] : object(e)) {
    int64_t id = -1;
    const std::string k(key);
    size_t used = 0;
    try {
      id = std::stoll(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != k.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return bad_request("logit_bias: key '" + k + "' is not a token id", "logit_bias");
    }
    if (!value.is_number()) {
      return bad_request("logit_bias: the bias of token " + k + " must be a number", "logit_bias");
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(double(value)));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) {
      return bad_request("logit_bias: token " + std::to_string(out[i].first) + " is given twice",
                         "logit_bias");
    }
  }
  return std::nullopt;
}

// best_of: vLLM v1 returns the n samples it draws; best_of may only be n.
maybe_error read_best_of(const field_reader& f, int32_t n) {
  int32_t best_of = n;
  if (auto e = f.read_small_int("best_of", best_of)) return e;
  if (best_of < n) {
    return bad_request("best_of: must be >= n, got best_of " + std::to_string(best_of) + " and n " +
                       std::to_string(n), "best_of");
  }
  if (best_of > n) {
    return bad_request("best_of: " + std::to_string(best_of) +
                       " is not supported: troupe returns the n samples it draws (vLLM v1 does "
                       "too); send best_of equal to n, or leave it out", "best_of");
  }
  return std::nullopt;
}

// Reads every field the two generation routes share.
maybe_error read_generation(const field_reader& f, generation_request& r) {
  sampling_params& p = r.params;
  if (auto e = f.read_string("model", r.model)) return e;
  int64_t max_tokens = -1;
  if (auto e = f.read_int("max_tokens", max_tokens)) return e;
  if (f.has("max_tokens")) r.max_tokens = max_tokens;
  for (maybe_error e : {f.read_float("temperature", p.temperature), f.read_float("top_p", p.top_p),
                        f.read_small_int("top_k", p.top_k), f.read_float("min_p", p.min_p),
                        f.read_small_int("n", p.n), f.read_strings("stop", p.stop),
                        f.read_ids("stop_token_ids", p.stop_token_ids),
                        f.read_bool("ignore_eos", p.ignore_eos),
                        f.read_float("presence_penalty", p.presence_penalty),
                        f.read_float("frequency_penalty", p.frequency_penalty),
                        f.read_float("repetition_penalty", p.repetition_penalty),
                        f.read_bool("skip_special_tokens", p.skip_special_tokens),
                        f.read_bool("include_stop_str_in_output", p.include_stop_str_in_output),
                        f.read_bool("stream", r.stream),
                        f.read_bool("return_token_ids", r.return_token_ids),
                        f.read_small_int("prompt_logprobs", p.prompt_logprobs),
                        f.read_small_int("min_tokens", p.min_tokens),
                        f.read_strings("bad_words", r.bad_words),
                        f.read_ids("allowed_token_ids", p.allowed_token_ids),
                        read_logit_bias(f, p.logit_bias), f.read_string("user", r.user)}) {
    if (e) return e;
  }
  if (f.has("allowed_token_ids") && p.allowed_token_ids.empty()) {
    return bad_request("allowed_token_ids: must not be empty", "allowed_token_ids");
  }
  if (auto e = read_best_of(f, p.n)) return e;
  if (auto e = read_structured_outputs(f, p.structured)) return e;
  if (f.has("prompt_logprobs") && p.prompt_logprobs < 0) {
    return bad_request("prompt_logprobs: must be a non-negative integer, got " +
                       std::to_string(p.prompt_logprobs), "prompt_logprobs");
  }
  if (r.stream && p.prompt_logprobs >= 0) {
    return bad_request("prompt_logprobs: not available when stream is true", "prompt_logprobs");
  }
  r.prompt_logprobs = p.prompt_logprobs;
  if (f.has("seed")) {
    if (auto e = f.read_int("seed", p.seed)) return e;
    p.has_seed = true;
  }
  element opts;
  if (f.get("stream_options", opts)) {
    if (!opts.is_object()) return type_error("stream_options", "an object");
    if (auto e = field_reader(object(opts)).read_bool("include_usage", r.include_usage)) {
      return bad_request("stream_options." + e->message, "stream_options");
    }
    if (!r.stream) return bad_request("stream_options: only allowed when stream is true", "stream_options");
  }
  return std::nullopt;
}

// prompt: a string, a list of strings, a list of ids, or a list of lists.
maybe_error read_prompt(const field_reader& f, completion_request& r) {
  element e;
  if (!f.get("prompt", e)) return bad_request("prompt: required", "prompt");
  const api_error wrong = type_error("prompt", "a string, a list of strings, a list of integers or a list of lists of integers");
  if (e.is_string()) {
    r.prompt_is_text = true;
    r.text_prompts.emplace_back(std::string_view(e));
    return std::nullopt;
  }
  if (!e.is_array()) return wrong;
  simdjson::dom::array items = e.get_array();
  if (items.size() == 0) return bad_request("prompt: must not be empty", "prompt");
  element first = items.at(0).value();
  r.prompt_is_text = first.is_string();
  if (first.is_int64()) r.id_prompts.emplace_back();
  for (element x : items) {
    if (r.prompt_is_text) {
      if (!x.is_string()) return wrong;
      r.text_prompts.emplace_back(std::string_view(x));
    } else if (first.is_int64()) {
      if (!x.is_int64()) return wrong;
      if (auto err = push_token_id("prompt", x, r.id_prompts.back())) return err;
    } else {
      if (!x.is_array()) return wrong;
      r.id_prompts.emplace_back();
      for (element id : x.get_array()) {
        if (!id.is_int64()) return wrong;
        if (auto err = push_token_id("prompt", id, r.id_prompts.back())) return err;
      }
      if (r.id_prompts.back().empty()) return bad_request("prompt: must not be empty", "prompt");
    }
  }
  return std::nullopt;
}

}  // namespace

parse_result<completion_request> parse_completion_request(std::string_view body) {
  auto obj = parse_object(body);
  if (auto* e = std::get_if<api_error>(&obj)) return *e;
  const field_reader f(std::get<object>(obj));
  completion_request r;
  if (auto e = read_generation(f, r.common)) return *e;
  if (auto e = read_prompt(f, r)) return *e;
  if (auto e = f.read_small_int("logprobs", r.common.params.logprobs)) return *e;
  // -1 is the engine's "none": asked for explicitly it is an error, as in vLLM.
  if (f.has("logprobs") && r.common.params.logprobs < 0) {
    return bad_request("logprobs: must be a non-negative integer, got " +
                       std::to_string(r.common.params.logprobs), "logprobs");
  }
  if (auto e = f.read_bool("echo", r.echo)) return *e;
  // Echoed logprobs cover the prompt too: the engine computes them.
  if (r.echo && r.common.params.logprobs >= 0) {
    r.common.params.prompt_logprobs = std::max(r.common.params.prompt_logprobs, r.common.params.logprobs);
  }
  if (auto e = reject_unsupported(f, {"suffix"})) return *e;
  if (auto e = reject_unknown(f, {"prompt", "logprobs", "echo"})) return *e;
  return r;
}

parse_result<chat_request> parse_chat_request(std::string_view body) {
  auto obj = parse_object(body);
  if (auto* e = std::get_if<api_error>(&obj)) return *e;
  const field_reader f(std::get<object>(obj));
  chat_request r;
  for (std::string_view legacy : {"functions", "function_call"}) {
    if (f.has(legacy)) {
      return bad_request(std::string(legacy) + ": deprecated by OpenAI and not served; send tools and "
                         "tool_choice", std::string(legacy));
    }
  }
  if (auto e = read_generation(f, r.common)) return *e;
  if (auto e = read_tool_request(f, r.tools)) return *e;
  int64_t max_completion_tokens = 0;
  if (auto e = f.read_int("max_completion_tokens", max_completion_tokens)) return *e;
  if (f.has("max_completion_tokens")) r.common.max_tokens = max_completion_tokens;
  if (auto e = f.read_bool("logprobs", r.logprobs)) return *e;
  if (auto e = f.read_small_int("top_logprobs", r.top_logprobs)) return *e;
  if (r.top_logprobs < 0) {
    return bad_request("top_logprobs: must be a non-negative integer, got " +
                       std::to_string(r.top_logprobs), "top_logprobs");
  }
  if (auto e = f.read_bool("add_generation_prompt", r.add_generation_prompt)) return *e;
  if (r.top_logprobs > 0 && !r.logprobs) {
    return bad_request("top_logprobs: requires logprobs to be true", "top_logprobs");
  }
  if (r.logprobs) r.common.params.logprobs = r.top_logprobs;
  if (!f.has("messages")) return bad_request("messages: required", "messages");
  // OpenAI's optional hints troupe does not act on are accepted: user,
  // store, metadata, service_tier, reasoning_effort, and modalities (text).
  if (auto e = reject_unknown(f, {"messages", "max_completion_tokens",
                                  "logprobs", "top_logprobs", "add_generation_prompt", "store",
                                  "metadata", "service_tier", "reasoning_effort", "modalities",
                                  "tools", "tool_choice", "parallel_tool_calls"})) {
    return *e;
  }
  element modalities;
  if (f.get("modalities", modalities)) {
    const bool text_only = modalities.is_array() && [&] {
      for (element m : modalities.get_array()) {
        if (!m.is_string() || std::string_view(m) != "text") return false;
      }
      return true;
    }();
    if (!text_only) return bad_request("modalities: only [\"text\"] is served", "modalities");
  }
  return r;
}

parse_result<tokenize_request> parse_tokenize_request(std::string_view body) {
  auto obj = parse_object(body);
  if (auto* e = std::get_if<api_error>(&obj)) return *e;
  const field_reader f(std::get<object>(obj));
  tokenize_request r;
  r.has_messages = f.has("messages");
  if (r.has_messages) r.add_special_tokens = false;  // the template writes them
  if (!r.has_messages && !f.has("prompt")) return bad_request("prompt or messages: required", "prompt");
  for (maybe_error e : {f.read_string("model", r.model), f.read_string("prompt", r.prompt),
                        f.read_bool("add_special_tokens", r.add_special_tokens),
                        f.read_bool("add_generation_prompt", r.add_generation_prompt)}) {
    if (e) return *e;
  }
  return r;
}

parse_result<detokenize_request> parse_detokenize_request(std::string_view body) {
  auto obj = parse_object(body);
  if (auto* e = std::get_if<api_error>(&obj)) return *e;
  const field_reader f(std::get<object>(obj));
  detokenize_request r;
  if (!f.has("tokens")) return bad_request("tokens: required", "tokens");
  if (auto e = f.read_string("model", r.model)) return *e;
  if (auto e = f.read_ids("tokens", r.tokens)) return *e;
  return r;
}

}  // namespace troupe
