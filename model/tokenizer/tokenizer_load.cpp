// tokenizer::load: reads tokenizer.json into its parts, then the optional
// tokenizer_config.json and generation_config.json. Errors name the file.
#include <simdjson.h>

#include "common/file_util.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_settings_load.h"

namespace troupe {
namespace {

using tok::json;

result<std::vector<tok::added_token>> parse_added_tokens(std::optional<json> list_json) {
  std::vector<tok::added_token> out;
  simdjson::dom::array list;
  if (!list_json) return out;
  if (list_json->get(list) != simdjson::SUCCESS) return make_error("'added_tokens' must be a list");
  for (json item : list) {
    tok::added_token t;
    auto content = tok::json_string(item, "content");
    if (!content.ok() || !*content) return make_error("an added token has no 'content'");
    t.content = **content;
    auto single_word = tok::json_bool(item, "single_word", false);
    auto lstrip = tok::json_bool(item, "lstrip", false);
    auto rstrip = tok::json_bool(item, "rstrip", false);
    auto normalized = tok::json_bool(item, "normalized", true);
    auto special = tok::json_bool(item, "special", false);
    for (const auto* r : {&single_word, &lstrip, &rstrip, &normalized, &special}) {
      if (!r->ok()) return make_error("added token '" + t.content + "': " + r->error_message());
    }
    t.single_word = *single_word;
    t.lstrip = *lstrip;
    t.rstrip = *rstrip;
    t.normalized = *normalized;
    t.special = *special;
    out.push_back(std::move(t));
  }
  return out;
}

result<tok::tokenizer_parts> parse_parts(json root) {
  tok::tokenizer_parts parts;
  if (auto spec = tok::json_member(root, "normalizer")) {
    auto n = tok::normalizer::parse(*spec);
    if (!n.ok()) return std::move(n).take_error();
    parts.norm = std::move(n).value();
  }
  auto pre = tok::pre_tokenizer::parse(tok::json_member(root, "pre_tokenizer"));
  if (!pre.ok()) return std::move(pre).take_error();
  parts.pre = std::move(pre).value();
  const std::optional<json> model_spec = tok::json_member(root, "model");
  if (!model_spec) return make_error("no 'model'");
  auto model = tok::bpe_model::parse(*model_spec, parts.pre->byte_level());
  if (!model.ok()) return std::move(model).take_error();
  parts.model = std::move(model).value();
  if (auto spec = tok::json_member(root, "decoder")) {
    auto d = tok::decoder::parse(*spec);
    if (!d.ok()) return std::move(d).take_error();
    parts.dec = std::move(d).value();
  }
  if (auto spec = tok::json_member(root, "post_processor")) {
    auto p = tok::post_processor::parse(*spec);
    if (!p.ok()) return std::move(p).take_error();
    parts.post = std::move(p).value();
  }
  auto added = parse_added_tokens(tok::json_member(root, "added_tokens"));
  if (!added.ok()) return std::move(added).take_error();
  parts.added_tokens = std::move(added).value();
  return parts;
}

}  // namespace

result<std::unique_ptr<tokenizer>> tokenizer::load(const std::filesystem::path& dir) {
  auto text = read_text_file(dir / "tokenizer.json");
  if (!text.ok()) return std::move(text).take_error();
  simdjson::dom::parser parser;
  auto root = tok::json_parse(parser, *text, "tokenizer.json");
  if (!root.ok()) return std::move(root).take_error();
  auto parts = parse_parts(*root);
  if (!parts.ok()) return make_error("tokenizer.json: " + parts.error_message());
  auto settings = tok::load_tokenizer_settings(dir);
  if (!settings.ok()) return std::move(settings).take_error();
  return std::unique_ptr<tokenizer>(
      std::make_unique<tok::hf_tokenizer>(std::move(parts).value(), std::move(settings).value()));
}

}  // namespace troupe
