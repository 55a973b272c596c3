#include "model/tokenizer/post_processor.h"

#include <map>
#include <string>

namespace troupe::tok {
namespace {

constexpr const char* kSupported = "TemplateProcessing, ByteLevel, Sequence";

// The "special_tokens" map of a TemplateProcessing: name -> ids.
result<std::map<std::string, std::vector<int32_t>, std::less<>>> parse_special_tokens(json spec) {
  std::map<std::string, std::vector<int32_t>, std::less<>> out;
  simdjson::dom::object map;
  const std::optional<json> member = json_member(spec, "special_tokens");
  if (!member) return out;
  if (member->get(map) != simdjson::SUCCESS)
    return make_error("'special_tokens' must be an object");
  for (auto [name, token] : map) {
    simdjson::dom::array ids;
    const std::optional<json> list = json_member(token, "ids");
    if (!list || list->get(ids) != simdjson::SUCCESS) {
      return make_error("special token '" + std::string(name) + "' needs 'ids'");
    }
    std::vector<int32_t>& v = out[std::string(name)];
    for (json id : ids) {
      int64_t value = 0;
      if (id.get(value) != simdjson::SUCCESS)
        return make_error("special token ids must be integers");
      v.push_back(static_cast<int32_t>(value));
    }
  }
  return out;
}

}  // namespace

result<std::unique_ptr<post_processor>> post_processor::parse(json spec) {
  auto p = std::make_unique<post_processor>();
  if (status s = p->add(spec); !s.ok()) return std::move(s).take_error();
  return p;
}

status post_processor::add(json spec) {
  const std::string type = json_type(spec);
  if (type == "Sequence") {
    return for_each_in_sequence(spec, "processors", "post_processor", [this](json item) { return add(item); });
  }
  if (type == "ByteLevel") return {};  // only trims offsets
  if (type == "TemplateProcessing") return add_template(spec);
  return make_error("unsupported post_processor '" + type + "' (supported: " + kSupported + ")");
}

status post_processor::add_template(json spec) {
  auto special = parse_special_tokens(spec);
  if (!special.ok()) return std::move(special).take_error();
  simdjson::dom::array pieces;
  const std::optional<json> single = json_member(spec, "single");
  if (!single || single->get(pieces) != simdjson::SUCCESS) {
    return make_error("TemplateProcessing needs a 'single' list");
  }
  single_template t;
  bool seen_sequence = false;
  for (json piece : pieces) {
    if (json_member(piece, "Sequence")) {
      if (seen_sequence) return make_error("TemplateProcessing: 'single' names its sequence twice");
      seen_sequence = true;
      continue;
    }
    const std::optional<json> token = json_member(piece, "SpecialToken");
    auto name = token ? json_string(*token, "id") : std::optional<std::string>();
    if (!name.ok() || !*name) return make_error("TemplateProcessing: bad 'single' piece");
    const auto it = special->find(**name);
    if (it == special->end()) {
      return make_error("TemplateProcessing: missing special token '" + **name + "'");
    }
    auto& target = seen_sequence ? t.after : t.before;
    target.insert(target.end(), it->second.begin(), it->second.end());
  }
  templates_.push_back(std::move(t));
  return {};
}

void post_processor::process(std::vector<int32_t>& ids) const {
  for (const single_template& t : templates_) {
    ids.insert(ids.begin(), t.before.begin(), t.before.end());
    ids.insert(ids.end(), t.after.begin(), t.after.end());
  }
}

}  // namespace troupe::tok
