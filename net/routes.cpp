#include "net/routes.h"

#include "net/prometheus.h"

#include <ctime>

#include "common/json_writer.h"
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
};

}  // namespace

api_routes::api_routes(engine& eng, const engine_config& config)
    : engine_(eng), tok_(eng.get_tokenizer()), served_names_(config.served_model_name),
      model_root_(config.model), api_key_(config.api_key), created_(std::time(nullptr)) {
  if (served_names_.empty()) served_names_.push_back(config.model);
  if (tok_ != nullptr) {
    auto r = chat_renderer::create(*tok_);
    if (r) renderer_.emplace(std::move(r).value()); else renderer_error_ = r.error_message();
  } else {
    renderer_error_ = "the model is served without a tokenizer";
  }
}

route_result api_routes::handle(const http_request_view& req) const {
  std::string_view path = req.target.substr(0, req.target.find('?'));
  const route* found = nullptr;
  for (const route& r : known_routes) {
    if (r.path == path) found = &r;
  }
  if (found == nullptr) return error_reply({404, "Not Found: " + std::string(path), ""});
  if (found->method != req.method) {
    return error_reply({405, "Method Not Allowed: " + std::string(req.method) + " " + std::string(path), ""});
  }
  if (!api_key_.empty() && path.substr(0, 4) == "/v1/" &&
      req.authorization != "Bearer " + api_key_) {
    return error_reply({401, "Unauthorized: missing or wrong API key (Authorization: Bearer ...)", ""});
  }
  if (req.method == "POST" && !req.content_type.empty() &&
      req.content_type.substr(0, req.content_type.find(';')) != "application/json") {
    return error_reply(bad_request("Content-Type: expected application/json, got " +
                                   std::string(req.content_type)));
  }
  if (path == "/health") return http_reply{200, "application/json", "", {}};
  if (path == "/version") return json_reply(R"({"version":"0.1.0"})");
  if (path == "/v1/models") return models();
  if (path == "/metrics") return metrics();
  if (path == "/tokenize") return tokenize(req.body);
  if (path == "/detokenize") return detokenize(req.body);
  if (path == "/v1/completions") return completions(req.body);
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
  w.end_array().end_object();
  return json_reply(w.take());
}

http_reply api_routes::metrics() const {
  return http_reply{200, "text/plain; version=0.0.4",
                    render_prometheus(served_names_.front(), engine_.stats(), engine_.metrics()), {}};
}

std::optional<api_error> api_routes::check_model(const std::string& name) const {
  if (name.empty()) return std::nullopt;
  for (const std::string& served : served_names_) {
    if (served == name) return std::nullopt;
  }
  return api_error{404, "The model `" + name + "` does not exist.", "model"};
}

std::optional<api_error> api_routes::check_admission() const {
  const int64_t bound = 4 * engine_.limits().max_num_seqs;
  if (engine_.stats().num_waiting >= bound) {
    return api_error{503, "The server is overloaded: " + std::to_string(bound) +
                              " requests are already waiting; retry later.", ""};
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
    auto messages = parse_chat_messages(body);
    if (!messages) return error_reply(bad_request("messages: " + messages.error_message(), "messages"));
    auto rendered = renderer_->render(*messages, r.add_generation_prompt, nullptr);
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
