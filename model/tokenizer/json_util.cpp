#include "model/tokenizer/json_util.h"

namespace troupe::tok {
namespace {

// Copies `text`, appending ".0" to integer literals of 20 digits or more
// (outside strings) so that simdjson reads them as doubles. Returns false
// when there is none (and leaves `out` alone).
bool widen_big_integers(const std::string& text, std::string& out) {
  bool changed = false;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      continue;
    }
    if (c < '0' || c > '9') continue;
    size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    const bool fraction =
        end < text.size() && (text[end] == '.' || text[end] == 'e' || text[end] == 'E');
    if (end - i >= 20 && !fraction) {
      out.append(text, copied, end - copied);
      out += ".0";
      copied = end;
      changed = true;
    }
    i = end - 1;
  }
  if (changed) out.append(text, copied, std::string::npos);
  return changed;
}

}  // namespace

result<json> json_parse(simdjson::dom::parser& parser, const std::string& text,
                        std::string_view file_name) {
  std::string widened;
  const std::string& source = widen_big_integers(text, widened) ? widened : text;
  const simdjson::padded_string padded(source);
  json root;
  if (const auto err = parser.parse(padded).get(root); err) {
    return make_error(std::string(file_name) + ": invalid JSON (" + simdjson::error_message(err) +
                      ")");
  }
  return root;
}

std::optional<json> json_member(json obj, std::string_view key) {
  simdjson::dom::object o;
  if (obj.get(o) != simdjson::SUCCESS) return std::nullopt;
  json value;
  if (o.at_key(key).get(value) != simdjson::SUCCESS || value.is_null()) return std::nullopt;
  return value;
}

result<std::optional<std::string>> json_string(json obj, std::string_view key) {
  const std::optional<json> value = json_member(obj, key);
  if (!value) return std::optional<std::string>();
  std::string_view s;
  if (value->get(s) != simdjson::SUCCESS) {
    return make_error("'" + std::string(key) + "' must be a string");
  }
  return std::optional<std::string>(std::string(s));
}

result<bool> json_bool(json obj, std::string_view key, bool fallback) {
  const std::optional<json> value = json_member(obj, key);
  if (!value) return fallback;
  bool b = false;
  if (value->get(b) != simdjson::SUCCESS) {
    return make_error("'" + std::string(key) + "' must be a boolean");
  }
  return b;
}

result<int64_t> json_int(json obj, std::string_view key, int64_t fallback) {
  const std::optional<json> value = json_member(obj, key);
  if (!value) return fallback;
  int64_t i = 0;
  if (value->get(i) != simdjson::SUCCESS) {
    return make_error("'" + std::string(key) + "' must be an integer");
  }
  return i;
}

std::string json_type(json obj) {
  const std::optional<json> value = json_member(obj, "type");
  std::string_view s;
  if (!value || value->get(s) != simdjson::SUCCESS) return "";
  return std::string(s);
}

result<regex> json_pattern(json spec, std::string* literal) {
  const std::optional<json> pattern = json_member(spec, "pattern");
  auto as_string = pattern ? json_string(*pattern, "String") : std::optional<std::string>();
  if (!as_string.ok()) return std::move(as_string).take_error();
  if (*as_string) {
    if (literal != nullptr) *literal = **as_string;
    return regex::compile(**as_string, true);
  }
  auto as_regex = pattern ? json_string(*pattern, "Regex") : std::optional<std::string>();
  if (!as_regex.ok()) return std::move(as_regex).take_error();
  if (!*as_regex) return make_error("'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
  return regex::compile(**as_regex, false);
}

}  // namespace troupe::tok
