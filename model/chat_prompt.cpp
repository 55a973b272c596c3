#include "model/chat_prompt.h"

namespace troupe {

namespace {

// A message's content: a string, text parts joined with "\n", or null /
// absent, which templates see as "" (as vLLM renders them: many templates
// call string methods on every message's content).
result<value> normalize_content(const value& content, size_t index) {
  if (content.is_string()) return content;
  if (content.is_none() || content.is_undefined()) return value(std::string());
  if (!content.is_array()) {
    return make_error("messages[" + std::to_string(index) +
                      "].content: expected a string or a list of text parts");
  }
  std::string joined;
  bool first = true;
  for (const value& part : content.as_array()) {
    const value type = part.is_object() ? part.member("type") : value();
    const value text = part.is_object() ? part.member("text") : value();
    if (!type.is_string() || type.as_string() != "text" || !text.is_string()) {
      return make_error("messages[" + std::to_string(index) +
                        "].content: only {\"type\": \"text\", \"text\": ...} parts are supported");
    }
    if (!first) joined += "\n";
    joined += text.as_string();
    first = false;
  }
  return value(joined);
}

// An assistant message's tool_calls with each function's arguments parsed
// from JSON text (OpenAI's form) into the value templates expect.
result<value> normalize_tool_calls(const value& calls, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].tool_calls";
  if (!calls.is_array()) return make_error(where + ": expected a list");
  value_array out;
  for (size_t j = 0; j < calls.as_array().size(); ++j) {
    const value& call = calls.as_array()[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    const value function = call.is_object() ? call.member("function") : value();
    if (!function.is_object() || !function.member("name").is_string()) {
      return make_error(at + ": expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    }
    value_object f = function.as_object();
    const value arguments = function.member("arguments");
    if (arguments.is_string()) {
      auto parsed = parse_json_value(arguments.as_string());
      if (!parsed) return make_error(at + ".function.arguments: not valid JSON: " + parsed.error_message());
      f.set("arguments", std::move(parsed).value());
    }
    value_object c = call.as_object();
    c.set("function", value(std::move(f)));
    out.push_back(value(std::move(c)));
  }
  return value(std::move(out));
}

result<value> messages_of(const value& doc) {
  value list = doc.is_object() ? doc.member("messages") : doc;
  if (!list.is_array()) {
    return make_error("expected {\"messages\": [...]} or a list of messages");
  }
  value_array out;
  size_t index = 0;
  for (const value& m : list.as_array()) {
    if (!m.is_object()) return make_error("messages[" + std::to_string(index) + "]: expected an object");
    const value role = m.member("role");
    if (!role.is_string()) {
      return make_error("messages[" + std::to_string(index) + "].role: expected a string");
    }
    value_object copy;
    for (const auto& [key, v] : m.as_object()) {
      if (key == "content") {
        auto content = normalize_content(v, index);
        if (!content) return std::move(content).take_error();
        copy.set(key, std::move(content.value()));
      } else if (key == "tool_calls" && !v.is_none()) {
        auto calls = normalize_tool_calls(v, index);
        if (!calls) return std::move(calls).take_error();
        copy.set(key, std::move(calls).value());
      } else {
        copy.set(key, v);
      }
    }
    if (m.member("content").is_undefined()) copy.set("content", value(std::string()));
    out.push_back(value(std::move(copy)));
    ++index;
  }
  return value(std::move(out));
}

}  // namespace

result<value> parse_chat_messages(std::string_view json) {
  auto doc = parse_json_value(json);
  if (!doc) return std::move(doc).take_error();
  return messages_of(*doc);
}

result<chat_input> parse_chat_input(std::string_view json) {
  auto doc = parse_json_value(json);
  if (!doc) return std::move(doc).take_error();
  auto messages = messages_of(*doc);
  if (!messages) return std::move(messages).take_error();
  value tools = doc->is_object() ? doc->member("tools") : value();
  if (tools.is_undefined()) tools = value::none();
  return chat_input{std::move(messages).value(), std::move(tools)};
}

result<chat_renderer> chat_renderer::create(const tokenizer& tok, const std::string& template_text) {
  const std::string& source = template_text.empty() ? tok.chat_template() : template_text;
  if (source.empty()) {
    return make_error("the tokenizer has no chat template (tokenizer_config.json has no "
                      "chat_template; the chat_template config key gives one)");
  }
  auto tmpl = chat_template::parse(source);
  if (!tmpl) return make_error("chat template: " + tmpl.error_message());
  value_object specials;
  for (const auto& [key, token] : tok.special_tokens_map()) specials.set(key, value(token));
  return chat_renderer(std::move(tmpl.value()), std::move(specials));
}

result<std::string> chat_renderer::render(const value& messages, bool add_generation_prompt,
                                          const value* tools,
                                          const chat_template_render_options& options) const {
  value_object context = specials_;
  context.set("messages", messages);
  context.set("add_generation_prompt", value(add_generation_prompt));
  if (tools != nullptr) context.set("tools", *tools);
  auto text = template_.render(value(std::move(context)), options);
  if (!text) return make_error("chat template: " + text.error_message());
  return text;
}

}  // namespace troupe
