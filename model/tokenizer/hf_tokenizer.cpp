#include "model/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "model/tokenizer/utf8.h"

namespace troupe::tok {

hf_tokenizer::hf_tokenizer(tokenizer_parts parts, tokenizer_settings settings)
    : parts_(std::move(parts)), settings_(std::move(settings)) {
  register_added_tokens(std::move(parts_.added_tokens));
  if (const auto id = token_to_id(settings_.eos_token); id && !settings_.eos_token.empty()) {
    eos_token_ids_.push_back(*id);
  }
  for (const int64_t id : settings_.generation_eos_ids) {
    const auto id32 = static_cast<int32_t>(id);
    if (std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id32) == eos_token_ids_.end()) {
      eos_token_ids_.push_back(id32);
    }
  }
}

// tokenizers' AddedVocabulary::add_tokens: an added token takes the id its
// content already has (as an added or a model token), else the next free id.
void hf_tokenizer::register_added_tokens(std::vector<added_token> tokens) {
  const bpe_model& model = *parts_.model;
  int32_t next_id = static_cast<int32_t>(model.vocab_size());
  string_id_map by_content;
  std::map<int32_t, added_token> by_id;
  std::unordered_set<std::string> special_contents;
  for (added_token& t : tokens) {
    if (t.content.empty()) continue;
    int32_t id = by_content.find(t.content);
    if (id < 0) id = model.token_to_id(t.content);
    if (id < 0) id = next_id++;
    t.id = id;
    by_content.insert(t.content, id);
    if (t.special) special_contents.insert(t.content);
    by_id[id] = std::move(t);
  }
  std::vector<added_token> list;
  std::vector<std::string> normalized;
  int32_t max_id = model.max_id();
  for (auto& [id, t] : by_id) {
    std::string n = t.content;
    if (t.normalized && parts_.norm) parts_.norm->normalize(n);
    normalized.push_back(std::move(n));
    list.push_back(std::move(t));
    max_id = std::max(max_id, id);
  }
  added_index_by_id_.assign(static_cast<size_t>(max_id + 1), -1);
  vocab_size_ = static_cast<int64_t>(model.vocab_size());
  for (size_t i = 0; i < list.size(); ++i) {
    added_index_by_id_[list[i].id] = static_cast<int32_t>(i);
    added_by_content_.insert(list[i].content, list[i].id);
    added_decode_strings_.push_back(list[i].normalized ? normalized[i] : list[i].content);
    if (model.token_to_id(list[i].content) < 0) ++vocab_size_;
  }
  added_.build(std::move(list), normalized);
  skip_when_special_.assign(static_cast<size_t>(max_id + 1), false);
  for (int32_t id = 0; id <= max_id; ++id) {
    const std::string* s = token_string(id);
    skip_when_special_[id] = s != nullptr && special_contents.count(*s) > 0;
  }
}

std::vector<int32_t> hf_tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!utf8_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<text_segment> segments;
  added_.split(text, false, segments);
  for (const text_segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_segment(text.substr(s.start, s.end - s.start), s.start == 0, ids);
    }
  }
  if (add_special_tokens && parts_.post) parts_.post->process(ids);
  return ids;
}

void hf_tokenizer::encode_segment(std::string_view text, bool at_origin,
                                  std::vector<int32_t>& ids) const {
  std::string normalized;
  if (parts_.norm && !parts_.norm->empty()) {
    normalized.assign(text);
    parts_.norm->normalize(normalized);
    text = normalized;
  }
  const bpe_model& model = *parts_.model;
  const auto sink = [&](std::string_view piece, bool) { model.tokenize(piece, ids); };
  if (!added_.has_normalized_set()) {
    parts_.pre->pre_tokenize(text, at_origin, sink);
    return;
  }
  std::vector<text_segment> segments;
  added_.split(text, true, segments);
  for (const text_segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      parts_.pre->pre_tokenize(text.substr(s.start, s.end - s.start), at_origin && s.start == 0,
                               sink);
    }
  }
}

const std::string* hf_tokenizer::token_string(int32_t id) const {
  if (id < 0) return nullptr;
  if (static_cast<size_t>(id) < added_index_by_id_.size() && added_index_by_id_[id] >= 0) {
    return &added_decode_strings_[added_index_by_id_[id]];
  }
  return parts_.model->id_to_token(id);
}

std::string hf_tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* s = token_string(id);
    if (s == nullptr) continue;
    if (skip_special_tokens && skip_when_special_[id]) continue;
    tokens.push_back(*s);
  }
  if (parts_.dec) return parts_.dec->decode(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::optional<int32_t> hf_tokenizer::token_to_id(std::string_view token) const {
  int32_t id = added_by_content_.find(token);
  if (id < 0) id = parts_.model->token_to_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::string hf_tokenizer::id_to_token(int32_t id) const {
  const std::string* s = token_string(id);
  return s != nullptr ? *s : std::string();
}

std::string hf_tokenizer::token_bytes(int32_t id) const {
  const std::string* s = token_string(id);
  if (s == nullptr || is_special(id)) return {};
  return parts_.dec != nullptr ? parts_.dec->token_bytes(*s) : *s;
}

bool hf_tokenizer::is_special(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= added_index_by_id_.size()) return false;
  const int32_t index = added_index_by_id_[id];
  return index >= 0 && added_.tokens()[index].special;
}

}  // namespace troupe::tok
