// The two generation routes of api_routes: /v1/completions and
// /v1/chat/completions. They end in a prepared_generation (token ids and
// sampling parameters per choice) that the session submits.
#include <atomic>
#include <ctime>
#include <random>

#include "grammar/constraint_cache.h"
#include "net/openai_request.h"
#include "net/routes.h"

namespace troupe {

namespace {

std::string new_request_id(const char* prefix) {
  static const uint64_t salt = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  std::mt19937_64 gen(salt ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return std::string(prefix) + buf;
}

api_error too_long(int64_t max_model_len, int64_t prompt_len, int64_t max_tokens) {
  // Summed unsigned: max_tokens may be near INT64_MAX.
  const uint64_t requested = static_cast<uint64_t>(prompt_len) + static_cast<uint64_t>(max_tokens);
  return bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                     " tokens. However, you requested " + std::to_string(requested) +
                     " tokens (" + std::to_string(prompt_len) + " in the messages, " +
                     std::to_string(max_tokens) +
                     " in the completion). Please reduce the length of the messages or completion.");
}

// vLLM's bad_words as token ids: each word as written (its leading spaces
// dropped) and, when the leading space makes other tokens of the same
// count whose first differs, also with one space before it (the word in
// the middle of text).
std::vector<std::vector<int32_t>> bad_words_ids(const tokenizer& tok,
                                                const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = word.substr(std::min(word.find_first_not_of(' '), word.size()));
    std::vector<int32_t> alone = tok.encode(bare, false);
    if (alone.empty()) continue;
    std::vector<int32_t> spaced = tok.encode(" " + bare, false);
    const bool distinct = !spaced.empty() && spaced.size() == alone.size() && spaced[0] != alone[0];
    out.push_back(std::move(alone));
    if (distinct) out.push_back(std::move(spaced));
  }
  return out;
}

}  // namespace

std::optional<api_error> api_routes::finish_params(const std::string& model, generation_request& r,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   bool chat) const {
  if (auto e = check_model(model)) return e;
  // A LoRA adapter's name runs the request with it (the base's: none).
  if (const auto loras = engine_.loras(); loras && !model.empty()) r.params.lora_id = loras->id_of(model);
  const int64_t max_model_len = engine_.limits().max_model_len;
  const int64_t vocab = engine_.model().vocab_size;
  size_t longest = 0;
  for (const std::vector<int32_t>& p : prompts) {
    if (p.empty()) return bad_request("prompt: must not be empty", "prompt");
    for (int32_t id : p) {
      if (id < 0 || id >= vocab) {
        return bad_request("prompt: token id " + std::to_string(id) + " is out of range [0, " +
                           std::to_string(vocab) + ")", "prompt");
      }
    }
    longest = std::max(longest, p.size());
  }
  const int64_t prompt_len = static_cast<int64_t>(longest);
  if (prompt_len >= max_model_len) {
    return bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                       " tokens. However, your request has " + std::to_string(prompt_len) +
                       " input tokens. Please reduce the length of the input messages.");
  }
  int64_t max_tokens = r.max_tokens.value_or(chat ? max_model_len - prompt_len : 16);
  if (max_tokens < 1) return bad_request("max_tokens: must be at least 1, got " + std::to_string(max_tokens), "max_tokens");
  if (max_tokens > max_model_len - prompt_len) return too_long(max_model_len, prompt_len, max_tokens);
  const int64_t max_n = engine_.limits().max_n;
  if (r.params.n > max_n) {
    return bad_request("n: " + std::to_string(r.params.n) + " is larger than this server's max_n " +
                       std::to_string(max_n), "n");
  }
  r.params.max_tokens = static_cast<int32_t>(max_tokens);
  if (tok_ == nullptr && !r.params.stop.empty()) {
    return bad_request("stop: stop strings need a tokenizer; this model is served without one", "stop");
  }
  if (!r.bad_words.empty()) {
    if (tok_ == nullptr) {
      return bad_request("bad_words: needs a tokenizer; this model is served without one", "bad_words");
    }
    r.params.bad_words_ids = bad_words_ids(*tok_, r.bad_words);
  }
  if (is_constrained(r.params.structured)) {
    if (!structured_refusal_.empty()) return bad_request(structured_refusal_);
    r.params.structured.any_whitespace = r.params.structured.any_whitespace && any_whitespace_;
  }
  const std::string problem = validate_sampling_params(r.params, vocab);
  if (!problem.empty()) return bad_request(problem);
  return check_admission(prompts, r.params.n);
}

prepared_generation api_routes::prepare(generation_kind kind, const generation_request& r,
                                        std::vector<std::vector<int32_t>> prompts,
                                        bool want_logprobs) const {
  prepared_generation g;
  g.ctx.kind = kind;
  g.ctx.id = new_request_id(kind == generation_kind::chat ? "chatcmpl-" : "cmpl-");
  g.ctx.created = std::time(nullptr);
  g.ctx.model = r.model.empty() ? served_names_.front() : r.model;
  g.ctx.stream = r.stream;
  g.ctx.include_usage = r.include_usage;
  g.ctx.return_token_ids = r.return_token_ids;
  g.ctx.want_logprobs = want_logprobs;
  g.ctx.tok = tok_;
  g.ctx.return_prompt_logprobs = r.prompt_logprobs >= 0;
  const int32_t n = r.params.n;
  for (std::vector<int32_t>& prompt : prompts) {
    const int leader = static_cast<int>(g.choices.size());
    for (int32_t j = 0; j < n; ++j) {
      prepared_choice c;
      c.prompt_ids = prompt;
      c.params = r.params;
      c.params.n = 1;
      if (r.params.has_seed) c.params.seed = r.params.seed + j;  // each sample its own stream
      c.fork_of_index = j == 0 ? -1 : leader;
      g.ctx.choice_prompt_ids.push_back(prompt);
      g.ctx.choice_counts_prompt.push_back(j == 0);
      g.choices.push_back(std::move(c));
    }
  }
  return g;
}

route_result api_routes::completions(std::string_view body) const {
  auto parsed = parse_completion_request(body);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  completion_request& r = std::get<completion_request>(parsed);
  if (auto e = check_model(r.common.model)) return error_reply(*e);
  std::vector<std::vector<int32_t>> prompts = std::move(r.id_prompts);
  if (r.prompt_is_text) {
    if (tok_ == nullptr) {
      return error_reply(bad_request("prompt: this model is served without a tokenizer; send token ids", "prompt"));
    }
    for (const std::string& text : r.text_prompts) prompts.push_back(tok_->encode(text, true));
  }
  if (r.echo && tok_ == nullptr) {
    return error_reply(bad_request("echo: needs a tokenizer; this model is served without one", "echo"));
  }
  // echo with max_tokens 0: the prompt (and its logprobs) only. The engine
  // runs one token, which the response leaves out.
  const bool echo_only = r.echo && r.common.max_tokens == 0;
  if (echo_only) r.common.max_tokens = 1;
  if (auto e = finish_params(r.common.model, r.common, prompts, false)) return error_reply(*e);
  std::vector<std::string> prompt_texts;
  if (r.echo) {  // as written, or decoded when given as ids (as vLLM)
    for (size_t i = 0; i < prompts.size(); ++i) {
      prompt_texts.push_back(r.prompt_is_text ? r.text_prompts[i] : tok_->decode(prompts[i], false));
    }
  }
  prepared_generation g = prepare(generation_kind::completion, r.common, std::move(prompts),
                                  r.common.params.logprobs >= 0);
  g.ctx.echo = r.echo;
  g.ctx.echo_only = echo_only;
  for (size_t i = 0; r.echo && i < g.ctx.choice_prompt_ids.size(); ++i) {
    g.ctx.choice_prompt_text.push_back(prompt_texts[i / static_cast<size_t>(r.common.params.n)]);
  }
  return g;
}

route_result api_routes::chat(std::string_view body) const {
  auto parsed = parse_chat_request(body);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  chat_request& r = std::get<chat_request>(parsed);
  if (auto e = check_model(r.common.model)) return error_reply(*e);
  if (!renderer_) return error_reply(bad_request("messages: " + renderer_error_, "messages"));
  auto input = parse_chat_input(body);
  if (!input) return error_reply(bad_request("messages: " + input.error_message(), "messages"));
  // The template sees the tools whenever they are given (tool_choice none
  // too, as vLLM renders them).
  auto text = renderer_->render(input->messages, r.add_generation_prompt, input->tools_or_null());
  if (!text) return error_reply(bad_request("messages: " + text.error_message(), "messages"));
  if (auto e = apply_tools(r.tools, r.common)) return error_reply(*e);
  std::vector<std::vector<int32_t>> prompts{tok_->encode(*text, false)};
  if (auto e = finish_params(r.common.model, r.common, prompts, true)) return error_reply(*e);
  prepared_generation g = prepare(generation_kind::chat, r.common, std::move(prompts), r.logprobs);
  g.ctx.tool_calls = tool_stream_for(r.tools, tool_parser_);
  return g;
}

std::optional<api_error> api_routes::apply_tools(const tool_request& tools, generation_request& r) const {
  if (tools.mode == tool_request::choice::automatic && (!tool_parser_ || !auto_tools_)) {
    return bad_request(std::string("tool_choice: \"auto\" needs a tool call parser: ") +
                       (auto_tools_ ? "this model's chat template implies none; set tool_call_parser "
                                      "(hermes, llama3_json or mistral)"
                                    : "enable_auto_tool_choice is false on this server") +
                       ", or send tool_choice \"required\", a named function or \"none\"", "tool_choice");
  }
  // The mistral parser reads [TOOL_CALLS], a special token (as vLLM's adjust_request).
  if (tools.mode != tool_request::choice::none && tool_parser_ == tool_parser_kind::mistral) {
    r.params.skip_special_tokens = false;
  }
  if (!tools.forced()) return std::nullopt;
  if (is_constrained(r.params.structured)) {
    return bad_request("tool_choice: a forced tool call cannot be combined with response_format or "
                       "structured_outputs", "tool_choice");
  }
  if (!structured_refusal_.empty()) {
    return bad_request("tool_choice: \"required\" and named functions are enforced with structured "
                       "outputs, and " + structured_refusal_, "tool_choice");
  }
  r.params.structured = forced_tool_constraint(tools, tool_parser_);
  // Compiled here (then cached for the worker) so that a schema's problem
  // names its tool.
  auto compiled = grammar::compile_constraint(r.params.structured);
  if (!compiled) {
    std::string message = compiled.error_message();
    const int64_t tool = tool_of_constraint_error(tools, message);
    if (tool < 0) return bad_request("tool_choice: " + message, "tool_choice");
    if (message.rfind("items[", 0) == 0) message.erase(0, message.find(": ") + 2);
    return bad_request("tools[" + std::to_string(tool) + "].function.parameters: " + message, "tools");
  }
  return std::nullopt;
}

}  // namespace troupe
