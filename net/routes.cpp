#include "net/routes.h"

#include "net/prometheus.h"

#include <ctime>

#include "common/json_writer.h"
#include "config/config_loader.h"
#include "net/openai_request.h"

namespace troupe {

http_reply error_reply(const api_error& e) {
  http_reply r;
  r.status = e.status;
  r.body = api_error_body(e);
  return r;
}

namespace {

http_reply json_reply(std::string body) {
  http_reply r;
  r.body = std::move(body);
  return r;
}

struct route {
  std::string_view path;
  std::string_view method;
};

constexpr route known_routes[] = {
    {"/health", "GET"},          {"/version", "GET"},    {"/v1/models", "GET"},
    {"/metrics", "GET"},         {"/tokenize", "POST"},  {"/detokenize", "POST"},
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/v1/load_lora_adapter", "POST"}, {"/v1/unload_lora_adapter", "POST"},
};

}  // namespace

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Time depends on the lengths only, never on where the bytes differ.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

api_routes::api_routes(engine& eng, const engine_config& config)
    : engine_(eng), tok_(eng.get_tokenizer()), served_names_(config.served_model_name),
      model_root_(config.model), api_key_(config.api_key), created_(std::time(nullptr)),
      runtime_lora_(config.enable_lora && config.allow_runtime_lora_updating && eng.loras() != nullptr),
      lora_allowed_dirs_(config.lora_allowed_dirs),
      any_whitespace_(!config.structured_outputs_disable_any_whitespace) {
  if (served_names_.empty()) served_names_.push_back(config.model);
  if (tok_ == nullptr) {
    structured_refusal_ = "structured outputs need a tokenizer; this model is served without one";
  } else if (config.distributed_port > 0) {
    structured_refusal_ = "structured outputs are not served with pipeline stages in other processes "
                          "(distributed_port)";
  }
  if (tok_ != nullptr) {
    auto text = chat_template_text(config.chat_template);
    auto r = text ? chat_renderer::create(*tok_, *text) : result<chat_renderer>(std::move(text).take_error());
    if (r) renderer_.emplace(std::move(r).value()); else renderer_error_ = r.error_message();
    const std::string& tmpl = text && !text->empty() ? *text : tok_->chat_template();
    tool_parser_ = config.tool_call_parser == "auto" ? detect_tool_parser(tmpl)
                                                    : tool_parser_by_name(config.tool_call_parser);
  } else {
    renderer_error_ = "the model is served without a tokenizer";
  }
  auto_tools_ = config.enable_auto_tool_choice;
}

route_result api_routes::handle(const http_request_view& req) const {
  std::string_view path = req.target.substr(0, req.target.find('?'));
  const route* found = nullptr;
  for (const route& r : known_routes) {
    if (r.path == path) found = &r;
  }
  // As vLLM: every /v1/ path needs the key, known or not (no probing for
  // routes without it).
  if (!api_key_.empty() && path.substr(0, 4) == "/v1/" &&
      !constant_time_equals(req.authorization, "Bearer " + api_key_)) {
    http_reply r =
        error_reply({401, "Unauthorized: missing or wrong API key (Authorization: Bearer ...)", ""});
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  const bool lora_route = path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter";
  if (found == nullptr || (lora_route && !runtime_lora_)) {
    return error_reply({404, "Not Found: " + std::string(path), ""});
  }
  if (found->method != req.method) {
    return error_reply({405, "Method Not Allowed: " + std::string(req.method) + " " + std::string(path), ""});
  }
  if (req.method == "POST" && !req.content_type.empty() &&
      req.content_type.substr(0, req.content_type.find(';')) != "application/json") {
    return error_reply(bad_request("Content-Type: expected application/json, got " +
                                   std::string(req.content_type)));
  }
  if (path == "/health") {
    if (engine_.health().ok()) return http_reply{200, "application/json", "", {}};
    return error_reply({503, "the model's workers are gone (" + engine_.health().reason() + ")", ""});
  }
  if (path == "/version") return json_reply(R"({"version":"0.1.0"})");
  if (path == "/v1/models") return models();
  if (path == "/metrics") return metrics();
  if (path == "/tokenize") return tokenize(req.body);
  if (path == "/detokenize") return detokenize(req.body);
  if (path == "/v1/completions") return completions(req.body);
  if (path == "/v1/load_lora_adapter") return load_lora(req.body);
  if (path == "/v1/unload_lora_adapter") return unload_lora(req.body);
  return chat(req.body);
}

http_reply api_routes::models() const {
  json_writer w;
  w.begin_object().key("object").value("list").key("data").begin_array();
  for (const std::string& name : served_names_) {
    w.begin_object().key("id").value(name).key("object").value("model");
    w.key("created").value(created_).key("owned_by").value("troupe");
    w.key("root").value(model_root_).key("parent").null();
    w.key("max_model_len").value(engine_.limits().max_model_len);
    w.end_object();
  }
  // LoRA adapters, as vLLM lists them: root is the adapter's path, parent
  // the base model's served name.
  if (const auto loras = engine_.loras()) {
    for (const lora_registry::entry& e : loras->list()) {
      w.begin_object().key("id").value(e.name).key("object").value("model");
      w.key("created").value(created_).key("owned_by").value("troupe");
      w.key("root").value(e.path.string()).key("parent").value(served_names_.front());
      w.key("max_model_len").value(engine_.limits().max_model_len);
      w.end_object();
    }
  }
  w.end_array().end_object();
  return json_reply(w.take());
}

http_reply api_routes::metrics() const {
  std::map<int64_t, std::string> lora_names;  // removed adapters still running included
  if (const auto loras = engine_.loras()) {
    for (const lora_registry::entry& e : loras->all()) lora_names[e.id] = e.name;
  }
  return http_reply{200, "text/plain; version=0.0.4",
                    render_prometheus(served_names_.front(), engine_.stats(), engine_.metrics(), lora_names),
                    {}};
}

std::optional<api_error> api_routes::check_model(const std::string& name) const {
  if (name.empty()) return std::nullopt;
  for (const std::string& served : served_names_) {
    if (served == name) return std::nullopt;
  }
  if (const auto loras = engine_.loras(); loras && loras->id_of(name) != 0) return std::nullopt;
  return api_error{404, "The model `" + name + "` does not exist.", "model"};
}

std::optional<api_error> api_routes::check_admission(
    const std::vector<std::vector<int32_t>>& prompts, int64_t n) const {
  if (!engine_.health().ok()) {
    return api_error{503, "the model's workers are gone (" + engine_.health().reason() +
                              "); this server cannot generate until it is restarted", ""};
  }
  const engine_limits& l = engine_.limits();
  const int64_t seqs = static_cast<int64_t>(prompts.size()) * n;
  int64_t tokens = 0;  // the samples of a prompt share its tokens
  for (const std::vector<int32_t>& p : prompts) tokens += static_cast<int64_t>(p.size());
  if (seqs > l.max_waiting_seqs) {
    return bad_request("this request asks for " + std::to_string(seqs) + " sequences (" +
                       std::to_string(prompts.size()) + " prompt(s) x n " + std::to_string(n) +
                       "), more than the server queues (max_waiting_seqs " +
                       std::to_string(l.max_waiting_seqs) + ")", "n");
  }
  if (tokens > l.max_waiting_tokens) {
    return bad_request("this request has " + std::to_string(tokens) +
                       " prompt tokens, more than the server queues (max_waiting_tokens " +
                       std::to_string(l.max_waiting_tokens) + ")", "prompt");
  }
  const engine_stats s = engine_.stats();
  if (s.num_waiting > 0 && (s.num_waiting + seqs > l.max_waiting_seqs ||
                            s.num_waiting_tokens + tokens > l.max_waiting_tokens)) {
    return api_error{503, "The server is overloaded: " + std::to_string(s.num_waiting) +
                              " sequences (" + std::to_string(s.num_waiting_tokens) +
                              " prompt tokens) are already waiting; retry later.", ""};
  }
  return std::nullopt;
}

http_reply api_routes::tokenize(std::string_view body) const {
  auto parsed = parse_tokenize_request(body);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  const tokenize_request& r = std::get<tokenize_request>(parsed);
  if (auto e = check_model(r.model)) return error_reply(*e);
  if (tok_ == nullptr) return error_reply(bad_request("tokenize: the model is served without a tokenizer"));
  std::string text = r.prompt;
  if (r.has_messages) {
    if (!renderer_) return error_reply(bad_request("messages: " + renderer_error_, "messages"));
    auto input = parse_chat_input(body);
    if (!input) return error_reply(bad_request("messages: " + input.error_message(), "messages"));
    auto rendered = renderer_->render(input->messages, r.add_generation_prompt, input->tools_or_null());
    if (!rendered) return error_reply(bad_request("messages: " + rendered.error_message(), "messages"));
    text = std::move(rendered).value();
  }
  const std::vector<int32_t> ids = tok_->encode(text, r.add_special_tokens);
  json_writer w;
  w.begin_object().key("count").value(static_cast<int64_t>(ids.size()));
  w.key("max_model_len").value(engine_.limits().max_model_len);
  w.key("tokens").array(ids).key("token_strs").null().end_object();
  return json_reply(w.take());
}

http_reply api_routes::detokenize(std::string_view body) const {
  auto parsed = parse_detokenize_request(body);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  const detokenize_request& r = std::get<detokenize_request>(parsed);
  if (auto e = check_model(r.model)) return error_reply(*e);
  if (tok_ == nullptr) return error_reply(bad_request("detokenize: the model is served without a tokenizer"));
  json_writer w;
  w.begin_object().key("prompt").value(tok_->decode(r.tokens, false)).end_object();
  return json_reply(w.take());
}

}  // namespace troupe
