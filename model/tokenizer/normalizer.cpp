#include "model/tokenizer/normalizer.h"

#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr const char* kSupported = "NFC, NFD, NFKC, NFKD, Sequence, Prepend, Replace, Strip";

}  // namespace

result<std::unique_ptr<normalizer>> normalizer::parse(json spec) {
  auto n = std::make_unique<normalizer>();
  if (status s = n->add(spec); !s.ok()) return std::move(s).take_error();
  return n;
}

status normalizer::add(json spec) {
  const std::string type = json_type(spec);
  step s;
  if (type == "Sequence") {
    return for_each_in_sequence(spec, "normalizers", "normalizer", [this](json item) { return add(item); });
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.type = kind::unicode;
    s.form = type == "NFC"    ? unicode_form::nfc
             : type == "NFD"  ? unicode_form::nfd
             : type == "NFKC" ? unicode_form::nfkc
                              : unicode_form::nfkd;
  } else if (type == "Prepend") {
    auto prepend = json_string(spec, "prepend");
    if (!prepend.ok()) return std::move(prepend).take_error();
    s.type = kind::prepend;
    s.content = prepend->value_or("");
  } else if (type == "Replace") {
    auto content = json_string(spec, "content");
    if (!content.ok()) return std::move(content).take_error();
    auto pattern = json_pattern(spec, &s.literal);
    if (!pattern.ok()) return std::move(pattern).take_error();
    s.type = kind::replace;
    s.content = content->value_or("");
    if (s.literal.empty()) s.pattern = std::move(pattern).value();
  } else if (type == "Strip") {
    auto left = json_bool(spec, "strip_left", true);
    auto right = json_bool(spec, "strip_right", true);
    if (!left.ok()) return std::move(left).take_error();
    if (!right.ok()) return std::move(right).take_error();
    s.type = kind::strip;
    s.strip_left = *left;
    s.strip_right = *right;
  } else {
    return make_error("unsupported normalizer '" + type + "' (supported: " + kSupported + ")");
  }
  steps_.push_back(std::move(s));
  return {};
}

void normalizer::replace(const step& s, std::string& text) {
  replace_pattern(s.literal, s.pattern, s.content, text);
}

void normalizer::normalize(std::string& text) const {
  for (const step& s : steps_) {
    switch (s.type) {
      case kind::unicode:
        unicode_normalize(s.form, text);
        break;
      case kind::prepend:
        if (!text.empty()) text.insert(0, s.content);
        break;
      case kind::replace:
        replace(s, text);
        break;
      case kind::strip:
        strip_white_space(text, s.strip_left, s.strip_right);
        break;
    }
  }
}

void strip_white_space(std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  char32_t cp = 0;
  while (left && begin < end) {
    const size_t n = utf8_decode(text, begin, cp);
    if (!is_white_space(cp)) break;
    begin += n;
  }
  while (right && end > begin) {
    cp = utf8_last(text, end);
    if (!is_white_space(cp)) break;
    end -= cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  text = text.substr(begin, end - begin);
}

}  // namespace troupe::tok
