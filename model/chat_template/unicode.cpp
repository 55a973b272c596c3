#include "model/chat_template/unicode.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace troupe::unicode {

uint32_t decode(std::string_view s, size_t& pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  uint32_t c = byte(pos);
  int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
  if (extra <= 0 || pos + extra >= s.size()) {
    ++pos;
    return c;
  }
  uint32_t cp = c & (0x3f >> extra);
  for (int k = 1; k <= extra; ++k) {
    uint32_t b = byte(pos + k);
    if ((b & 0xc0) != 0x80) {
      ++pos;
      return c;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  pos += extra + 1;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    decode(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) decode(s, pos);
  return n;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

bool is_space(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool is_linebreak(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  if (is_space(cp) || cp < 0xc0 || cp == 0xd7 || cp == 0xf7) return false;
  if ((cp >= 0x2000 && cp <= 0x2bff) || (cp >= 0x3000 && cp <= 0x303f)) return false;
  if ((cp >= 0xff00 && cp <= 0xff0f) || (cp >= 0xff1a && cp <= 0xff20)) return false;
  if ((cp >= 0xff3b && cp <= 0xff40) || (cp >= 0xff5b && cp <= 0xff65)) return false;
  return !(cp >= 0x1f000 && cp <= 0x1faff);
}

bool is_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return false;
  if ((cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff) return false;
  if ((cp >= 0xd800 && cp <= 0xf8ff) || (cp >= 0xfff9 && cp <= 0xfffb)) return false;
  return cp <= 0x10ffff;
}

namespace {

// Byte offset of the code point that ends right at `end`.
size_t previous_start(std::string_view s, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xc0) == 0x80 && end - p < 4) --p;
  return p;
}

template <class Pred>
std::string_view strip_if(std::string_view s, bool left, bool right, Pred pred) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!pred(decode(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = previous_start(s, end), probe = start;
      if (!pred(decode(s, probe)) || probe != end) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

}  // namespace

std::string_view strip(std::string_view s, bool left, bool right) {
  return strip_if(s, left, right, [](uint32_t cp) { return is_space(cp); });
}

std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<uint32_t> set;
  for (size_t pos = 0; pos < chars.size();) set.push_back(decode(chars, pos));
  return strip_if(s, left, right, [&](uint32_t cp) {
    return std::find(set.begin(), set.end(), cp) != set.end();
  });
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    s = strip(s.substr(pos), true, false);
    pos = 0;
    if (s.empty()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.emplace_back(s);
      break;
    }
    size_t end = 0;
    while (end < s.size()) {
      size_t next = end;
      if (is_space(decode(s, next))) break;
      end = next;
    }
    parts.emplace_back(s.substr(0, end));
    pos = end;
  }
  return parts;
}

std::vector<std::string> rsplit_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> parts;
  while (true) {
    s = strip(s, false, true);
    if (s.empty()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.emplace_back(s);
      break;
    }
    size_t begin = s.size();
    while (begin > 0) {
      size_t start = previous_start(s, begin), probe = start;
      if (is_space(decode(s, probe))) break;
      begin = start;
    }
    parts.emplace_back(s.substr(begin));
    s = s.substr(0, begin);
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_sep(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  parts.emplace_back(s.substr(pos));
  return parts;
}

std::vector<std::string> rsplit_sep(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0, pos = 0;
  while (pos < s.size()) {
    size_t at = pos;
    uint32_t cp = decode(s, pos);
    if (!is_linebreak(cp)) continue;
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    lines.emplace_back(s.substr(start, (keepends ? pos : at) - start));
    start = pos;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string to_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = to_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string title_case(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    if (lower && !previous_cased) c = static_cast<char>(c - 'a' + 'A');
    if (upper && previous_cased) c = static_cast<char>(c - 'A' + 'a');
    previous_cased = lower || upper;
  }
  return out;
}

std::string python_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t cp = decode(s, pos);
    if (cp == '\\' || cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      char buf[16];
      const char* format = cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof buf, format, cp);
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += quote;
  return out;
}

}  // namespace troupe::unicode
