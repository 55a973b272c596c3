#include "model/tokenizer/tokenizer_settings_load.h"

#include <simdjson.h>

#include "common/file_util.h"

namespace troupe::tok {
namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                             "sep_token", "cls_token", "mask_token"};

// A special token value: a string or an AddedToken object's "content".
std::optional<std::string> token_content(json value) {
  std::string_view s;
  if (value.get(s) == simdjson::SUCCESS) return std::string(s);
  const std::optional<json> content = json_member(value, "content");
  if (content && content->get(s) == simdjson::SUCCESS) return std::string(s);
  return std::nullopt;
}

// chat_template: a string, or a list of {name, template} (the "default" one).
result<std::string> chat_template_of(json root) {
  const std::optional<json> value = json_member(root, "chat_template");
  if (!value) return std::string();
  std::string_view s;
  if (value->get(s) == simdjson::SUCCESS) return std::string(s);
  simdjson::dom::array list;
  if (value->get(list) != simdjson::SUCCESS) {
    return make_error("'chat_template' must be a string or a list of {name, template}");
  }
  for (json item : list) {
    auto name = json_string(item, "name");
    auto tmpl = json_string(item, "template");
    if (!name.ok() || !tmpl.ok()) return make_error("bad 'chat_template' entry");
    if (*name && **name == "default" && *tmpl) return **tmpl;
  }
  return std::string();
}

result<std::optional<std::string>> read_optional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<std::string>();
  auto text = read_text_file(path);
  if (!text.ok()) return std::move(text).take_error();
  return std::optional<std::string>(std::move(text).value());
}

status read_config(const std::filesystem::path& dir, tokenizer_settings& out) {
  auto text = read_optional(dir / "tokenizer_config.json");
  if (!text.ok()) return std::move(text).take_error();
  if (!*text) return {};
  simdjson::dom::parser parser;
  auto root = json_parse(parser, **text, "tokenizer_config.json");
  if (!root.ok()) return std::move(root).take_error();
  for (const char* key : kSpecialTokenKeys) {
    const std::optional<json> value = json_member(*root, key);
    const std::optional<std::string> content = value ? token_content(*value) : std::nullopt;
    if (!content) continue;
    out.special_tokens_map.emplace_back(key, *content);
    if (std::string_view(key) == "bos_token") out.bos_token = *content;
    if (std::string_view(key) == "eos_token") out.eos_token = *content;
  }
  auto tmpl = chat_template_of(*root);
  if (!tmpl.ok()) return make_error("tokenizer_config.json: " + tmpl.error_message());
  out.chat_template = std::move(tmpl).value();
  return {};
}

status read_generation_config(const std::filesystem::path& dir, tokenizer_settings& out) {
  auto text = read_optional(dir / "generation_config.json");
  if (!text.ok()) return std::move(text).take_error();
  if (!*text) return {};
  simdjson::dom::parser parser;
  auto root = json_parse(parser, **text, "generation_config.json");
  if (!root.ok()) return std::move(root).take_error();
  const std::optional<json> value = json_member(*root, "eos_token_id");
  if (!value) return {};
  int64_t id = 0;
  simdjson::dom::array list;
  if (value->get(id) == simdjson::SUCCESS) {
    out.generation_eos_ids.push_back(id);
  } else if (value->get(list) == simdjson::SUCCESS) {
    for (json item : list) {
      if (item.get(id) != simdjson::SUCCESS) {
        return make_error("generation_config.json: 'eos_token_id' must be integers");
      }
      out.generation_eos_ids.push_back(id);
    }
  } else {
    return make_error("generation_config.json: 'eos_token_id' must be an integer or a list");
  }
  return {};
}

}  // namespace

result<tokenizer_settings> load_tokenizer_settings(const std::filesystem::path& dir) {
  tokenizer_settings settings;
  if (status s = read_config(dir, settings); !s.ok()) return std::move(s).take_error();
  if (status s = read_generation_config(dir, settings); !s.ok()) return std::move(s).take_error();
  return settings;
}

}  // namespace troupe::tok
