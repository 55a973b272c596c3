#include "model/tokenizer/decoder.h"

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr const char* kSupported =
    "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

result<std::unique_ptr<decoder>> decoder::parse(json spec) {
  auto d = std::make_unique<decoder>();
  if (status s = d->add(spec); !s.ok()) return std::move(s).take_error();
  return d;
}

status decoder::add(json spec) {
  const std::string type = json_type(spec);
  step s;
  if (type == "Sequence") {
    return for_each_in_sequence(spec, "decoders", "decoder", [this](json item) { return add(item); });
  }
  if (type == "ByteLevel") {
    s.type = kind::byte_level;
  } else if (type == "ByteFallback") {
    s.type = kind::byte_fallback;
  } else if (type == "Fuse") {
    s.type = kind::fuse;
  } else if (type == "Replace") {
    auto content = json_string(spec, "content");
    if (!content.ok()) return std::move(content).take_error();
    auto pattern = json_pattern(spec, &s.literal);
    if (!pattern.ok()) return std::move(pattern).take_error();
    s.type = kind::replace;
    s.content = content->value_or("");
    if (s.literal.empty()) s.pattern = std::move(pattern).value();
  } else if (type == "Strip") {
    auto content = json_string(spec, "content");
    auto start = json_int(spec, "start", 0);
    auto stop = json_int(spec, "stop", 0);
    if (!content.ok()) return std::move(content).take_error();
    if (!start.ok() || !stop.ok())
      return make_error("Strip decoder: 'start'/'stop' must be integers");
    s.type = kind::strip;
    s.content = content->value_or(" ");
    s.strip_start = static_cast<size_t>(std::max<int64_t>(0, *start));
    s.strip_stop = static_cast<size_t>(std::max<int64_t>(0, *stop));
  } else if (type == "Metaspace") {
    auto replacement = json_string(spec, "replacement");
    auto scheme = json_string(spec, "prepend_scheme");
    auto prefix = json_bool(spec, "add_prefix_space", true);
    if (!replacement.ok() || !scheme.ok() || !prefix.ok())
      return make_error("bad Metaspace decoder");
    s.type = kind::metaspace;
    s.literal = replacement->value_or("\xE2\x96\x81");
    s.prepend = scheme->value_or("always") != "never" && *prefix;
  } else {
    return make_error("unsupported decoder '" + type + "' (supported: " + kSupported + ")");
  }
  steps_.push_back(std::move(s));
  return {};
}

std::string decoder::decode(std::vector<std::string> tokens) const {
  for (const step& s : steps_) {
    switch (s.type) {
      case kind::byte_level:
        byte_level(tokens);
        break;
      case kind::byte_fallback:
        byte_fallback(tokens);
        break;
      case kind::replace:
        replace(s, tokens);
        break;
      case kind::strip:
        strip(s, tokens);
        break;
      case kind::metaspace:
        metaspace(s, tokens);
        break;
      case kind::fuse: {
        std::string joined;
        for (const std::string& t : tokens) joined += t;
        tokens.assign(1, std::move(joined));
        break;
      }
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string decoder::token_bytes(std::string token) const {
  for (const step& s : steps_) {
    switch (s.type) {
      case kind::byte_level: {
        std::string bytes;
        if (byte_level_decode(token, bytes)) token = std::move(bytes);
        break;
      }
      case kind::byte_fallback:
        if (const int b = parse_byte_token(token); b >= 0) token.assign(1, static_cast<char>(b));
        break;
      case kind::replace:
        replace_pattern(s.literal, s.pattern, s.content, token);
        break;
      case kind::metaspace: {
        std::string out;
        size_t from = 0;
        for (size_t at = token.find(s.literal); at != std::string::npos; at = token.find(s.literal, from)) {
          out.append(token, from, at - from);
          out += ' ';
          from = at + s.literal.size();
        }
        out.append(token, from, std::string::npos);
        token = std::move(out);
        break;
      }
      case kind::strip:
      case kind::fuse:
        break;
    }
  }
  return token;
}

void decoder::byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    if (!byte_level_decode(t, bytes)) bytes += t;  // not byte-level text: its own bytes
  }
  tokens.assign(1, utf8_valid(bytes) ? std::move(bytes) : utf8_lossy(bytes));
}

void decoder::byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;  // consecutive <0xXX> bytes
  size_t pending_count = 0;
  const auto flush = [&] {
    if (pending_count == 0) return;
    if (utf8_valid(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string& t : tokens) {
    if (const int b = parse_byte_token(t); b >= 0) {
      pending.push_back(static_cast<char>(b));
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void decoder::replace(const step& s, std::vector<std::string>& tokens) {
  for (std::string& t : tokens) replace_pattern(s.literal, s.pattern, s.content, t);
}

void decoder::strip(const step& s, std::vector<std::string>& tokens) {
  char32_t content = 0;
  if (!s.content.empty()) utf8_decode(s.content, 0, content);
  for (std::string& t : tokens) {
    std::vector<std::pair<size_t, size_t>> chars;  // byte offset and length of each char
    for (size_t i = 0; i < t.size();) {
      const size_t n = utf8_len(static_cast<unsigned char>(t[i]));
      chars.emplace_back(i, n);
      i += n;
    }
    const auto is_content = [&](size_t k) {
      char32_t cp = 0;
      utf8_decode(t, chars[k].first, cp);
      return cp == content;
    };
    size_t start_cut = 0;
    for (size_t k = 0; k < s.strip_start && k < chars.size() && is_content(k); ++k)
      start_cut = k + 1;
    size_t stop_cut = chars.size();
    for (size_t k = 0; k < s.strip_stop && k < chars.size(); ++k) {
      const size_t index = chars.size() - k - 1;
      if (!is_content(index)) break;
      stop_cut = index;
    }
    if (stop_cut <= start_cut) {
      t.clear();
      continue;
    }
    const size_t begin = start_cut < chars.size() ? chars[start_cut].first : t.size();
    const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
    t = t.substr(begin, end - begin);
  }
}

void decoder::metaspace(const step& s, std::vector<std::string>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string out;
    const std::string& t = tokens[i];
    size_t from = 0;
    for (size_t at = t.find(s.literal); at != std::string::npos; at = t.find(s.literal, from)) {
      out.append(t, from, at - from);
      if (!(i == 0 && s.prepend)) out += ' ';
      from = at + s.literal.size();
    }
    out.append(t, from, std::string::npos);
    tokens[i] = std::move(out);
  }
}

}  // namespace troupe::tok
