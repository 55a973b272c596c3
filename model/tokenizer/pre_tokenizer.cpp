#include "model/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr const char* kSupported = "Split, ByteLevel, Sequence, Metaspace";
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

result<split_behavior> parse_behavior(const std::string& name) {
  if (name == "Removed") return split_behavior::removed;
  if (name == "Isolated") return split_behavior::isolated;
  if (name == "MergedWithPrevious") return split_behavior::merged_with_previous;
  if (name == "MergedWithNext") return split_behavior::merged_with_next;
  if (name == "Contiguous") return split_behavior::contiguous;
  return make_error("unsupported Split behavior '" + name + "'");
}

}  // namespace

void apply_split_behavior(split_behavior behavior, std::vector<match_span>& spans) {
  std::vector<match_span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case split_behavior::isolated:
      return;
    case split_behavior::removed:
      std::erase_if(spans, [](const match_span& m) { return m.is_match; });
      return;
    case split_behavior::contiguous:
      for (const match_span& m : spans) {
        if (m.is_match == previous_match && !out.empty()) {
          out.back().end = m.end;
        } else {
          out.push_back(m);
        }
        previous_match = m.is_match;
      }
      break;
    case split_behavior::merged_with_previous:
      for (const match_span& m : spans) {
        if (m.is_match && !previous_match && !out.empty()) {
          out.back().end = m.end;
        } else {
          out.push_back(m);
        }
        previous_match = m.is_match;
      }
      break;
    case split_behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  spans = std::move(out);
}

result<std::unique_ptr<pre_tokenizer>> pre_tokenizer::parse(std::optional<json> spec) {
  auto p = std::make_unique<pre_tokenizer>();
  if (spec) {
    if (status s = p->add(*spec); !s.ok()) return std::move(s).take_error();
  }
  for (size_t i = 0; i < p->steps_.size(); ++i) {
    if (p->steps_[i].type == kind::byte_level && i + 1 != p->steps_.size()) {
      return make_error("unsupported pre_tokenizer: ByteLevel must be the last step");
    }
  }
  p->byte_level_ = !p->steps_.empty() && p->steps_.back().type == kind::byte_level;
  return p;
}

status pre_tokenizer::add(json spec) {
  const std::string type = json_type(spec);
  if (type == "Sequence") {
    return for_each_in_sequence(spec, "pretokenizers", "pre_tokenizer", [this](json item) { return add(item); });
  }
  if (type == "Split") return add_split(spec);
  if (type == "ByteLevel") return add_byte_level(spec);
  if (type == "Metaspace") return add_metaspace(spec);
  return make_error("unsupported pre_tokenizer '" + type + "' (supported: " + kSupported + ")");
}

status pre_tokenizer::add_split(json spec) {
  step s;
  s.type = kind::split;
  auto pattern = json_pattern(spec, nullptr);
  if (!pattern.ok()) return std::move(pattern).take_error();
  auto behavior_name = json_string(spec, "behavior");
  if (!behavior_name.ok()) return std::move(behavior_name).take_error();
  auto behavior = parse_behavior(behavior_name->value_or("Isolated"));
  if (!behavior.ok()) return std::move(behavior).take_error();
  auto invert = json_bool(spec, "invert", false);
  if (!invert.ok()) return std::move(invert).take_error();
  s.pattern = std::move(pattern).value();
  s.behavior = *behavior;
  s.invert = *invert;
  steps_.push_back(std::move(s));
  return {};
}

status pre_tokenizer::add_byte_level(json spec) {
  step s;
  s.type = kind::byte_level;
  auto prefix = json_bool(spec, "add_prefix_space", true);
  auto use_regex = json_bool(spec, "use_regex", true);
  if (!prefix.ok()) return std::move(prefix).take_error();
  if (!use_regex.ok()) return std::move(use_regex).take_error();
  s.add_prefix_space = *prefix;
  if (*use_regex) {
    auto r = regex::compile(kGpt2Pattern, false);
    if (!r.ok()) return std::move(r).take_error();
    s.pattern = std::move(r).value();
  }
  steps_.push_back(std::move(s));
  return {};
}

status pre_tokenizer::add_metaspace(json spec) {
  step s;
  s.type = kind::metaspace;
  auto replacement = json_string(spec, "replacement");
  auto scheme = json_string(spec, "prepend_scheme");
  auto prefix = json_bool(spec, "add_prefix_space", true);
  auto split = json_bool(spec, "split", true);
  if (!replacement.ok()) return std::move(replacement).take_error();
  if (!scheme.ok()) return std::move(scheme).take_error();
  if (!prefix.ok()) return std::move(prefix).take_error();
  if (!split.ok()) return std::move(split).take_error();
  s.replacement = replacement->value_or("\xE2\x96\x81");  // U+2581
  const std::string name = scheme->value_or("always");
  if (name == "always") {
    s.scheme = prepend_scheme::always;
  } else if (name == "first") {
    s.scheme = prepend_scheme::first;
  } else if (name == "never") {
    s.scheme = prepend_scheme::never;
  } else {
    return make_error("unsupported Metaspace prepend_scheme '" + name + "'");
  }
  if (!*prefix) s.scheme = prepend_scheme::never;
  s.split = *split;
  steps_.push_back(std::move(s));
  return {};
}

void pre_tokenizer::run(size_t index, std::string_view text, bool at_origin,
                        piece_sink sink) const {
  if (text.empty()) return;  // tokenizers drops empty splits
  if (index == steps_.size()) {
    sink(text, at_origin);
    return;
  }
  switch (steps_[index].type) {
    case kind::split:
      run_split(index, text, at_origin, sink);
      break;
    case kind::byte_level:
      run_byte_level(index, text, at_origin, sink);
      break;
    case kind::metaspace:
      run_metaspace(index, text, at_origin, sink);
      break;
  }
}

void pre_tokenizer::run_split(size_t index, std::string_view text, bool at_origin,
                              piece_sink sink) const {
  const step& s = steps_[index];
  if (s.behavior == split_behavior::isolated && !s.invert) {
    // The common case, streamed (regex::find_matches inlined): every match
    // and every gap is a piece; run() drops empty ones.
    size_t prev = 0, search = 0, start = 0, end = 0;
    while (search <= text.size() && s.pattern->find(text, search, start, end)) {
      if (prev != start)
        run(index + 1, text.substr(prev, start - prev), at_origin && prev == 0, sink);
      run(index + 1, text.substr(start, end - start), at_origin && start == 0, sink);
      prev = end;
      if (end > start) {
        search = end;
      } else if (end < text.size()) {
        search = end + utf8_len(static_cast<unsigned char>(text[end]));
      } else {
        break;
      }
    }
    if (prev != text.size()) run(index + 1, text.substr(prev), at_origin && prev == 0, sink);
    return;
  }
  std::vector<match_span> spans;
  s.pattern->find_matches(text, spans);
  if (s.invert) {
    for (match_span& m : spans) m.is_match = !m.is_match;
  }
  apply_split_behavior(s.behavior, spans);
  for (const match_span& m : spans) {
    run(index + 1, text.substr(m.start, m.end - m.start), at_origin && m.start == 0, sink);
  }
}

void pre_tokenizer::run_byte_level(size_t index, std::string_view text, bool at_origin,
                                   piece_sink sink) const {
  const step& s = steps_[index];
  std::string prefixed;
  if (s.add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  if (!s.pattern) {
    run(index + 1, text, at_origin, sink);
    return;
  }
  std::vector<match_span> spans;
  s.pattern->find_matches(text, spans);
  for (const match_span& m : spans) {
    run(index + 1, text.substr(m.start, m.end - m.start), at_origin && m.start == 0, sink);
  }
}

void pre_tokenizer::run_metaspace(size_t index, std::string_view text, bool at_origin,
                                  piece_sink sink) const {
  const step& s = steps_[index];
  std::string replaced;
  replaced.reserve(text.size() + s.replacement.size() * 4);
  const bool starts_with_space = text.front() == ' ';
  const bool prepend =
      (s.scheme == prepend_scheme::always || (s.scheme == prepend_scheme::first && at_origin)) &&
      !starts_with_space && !text.starts_with(s.replacement);
  if (prepend) replaced += s.replacement;
  for (const char c : text) {
    if (c == ' ') {
      replaced += s.replacement;
    } else {
      replaced += c;
    }
  }
  if (!s.split) {
    run(index + 1, replaced, at_origin, sink);
    return;
  }
  // Split on the replacement, each occurrence starting a new piece
  // (MergedWithNext).
  const std::string_view all = replaced;
  size_t start = 0;
  for (size_t at = all.find(s.replacement, 1); at != std::string_view::npos;
       at = all.find(s.replacement, at + s.replacement.size())) {
    run(index + 1, all.substr(start, at - start), at_origin && start == 0, sink);
    start = at;
  }
  run(index + 1, all.substr(start), at_origin && start == 0, sink);
}

}  // namespace troupe::tok
