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

namespace {

// One-to-one case mappings for ASCII, Latin-1, Latin Extended-A, Greek and
// Cyrillic (the one-to-many ones, ß and İ, are special-cased by callers).
uint32_t upper_of(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 0x20;
  if (cp < 0xb5) return cp;
  if (cp == 0xb5) return 0x39c;
  if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 0x20;
  if (cp == 0xff) return 0x178;
  if (cp == 0x131) return 'I';
  if (cp == 0x17f) return 'S';
  bool odd = cp & 1;
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177)) return odd ? cp - 1 : cp;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) return odd ? cp : cp - 1;
  if ((cp >= 0x3b1 && cp <= 0x3c1) || (cp >= 0x3c3 && cp <= 0x3cb)) return cp - 0x20;
  if (cp == 0x3c2) return 0x3a3;
  if (cp == 0x3ac) return 0x386;
  if (cp >= 0x3ad && cp <= 0x3af) return cp - 0x25;
  if (cp == 0x3cc) return 0x38c;
  if (cp == 0x3cd || cp == 0x3ce) return cp - 0x3f;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 0x20;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 0x50;
  return cp;
}

uint32_t lower_of(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 0x20;
  if (cp < 0xc0) return cp;
  if (cp <= 0xde && cp != 0xd7) return cp + 0x20;
  if (cp == 0x178) return 0xff;
  bool odd = cp & 1;
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177)) return odd ? cp : cp + 1;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) return odd ? cp + 1 : cp;
  if ((cp >= 0x391 && cp <= 0x3a1) || (cp >= 0x3a3 && cp <= 0x3ab)) return cp + 0x20;
  if (cp == 0x386) return 0x3ac;
  if (cp >= 0x388 && cp <= 0x38a) return cp + 0x25;
  if (cp == 0x38c) return 0x3cc;
  if (cp == 0x38e || cp == 0x38f) return cp + 0x3f;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 0x50;
  return cp;
}

bool is_cased(uint32_t cp) {
  return upper_of(cp) != cp || lower_of(cp) != cp || cp == 0xdf || cp == 0x130 || cp == 0x138 ||
         cp == 0x149 || (cp >= 'A' && cp <= 'Z');
}

enum class case_kind { upper, lower, title };

void append_cased(std::string& out, uint32_t cp, case_kind kind) {
  if (cp == 0xdf && kind != case_kind::lower) {
    out += kind == case_kind::upper ? "SS" : "Ss";
  } else if (cp == 0x130 && kind == case_kind::lower) {
    out += "i\xcc\x87";  // i + combining dot above
  } else {
    append_utf8(out, kind == case_kind::lower ? lower_of(cp) : upper_of(cp));
  }
}

// Python's final sigma rule: Σ lower-cases to ς after a cased letter when no
// cased letter follows.
bool final_sigma(std::string_view s, size_t start, size_t next) {
  if (start == 0) return false;
  size_t before = previous_start(s, start), probe = before;
  if (!is_cased(decode(s, probe))) return false;
  if (next >= s.size()) return true;
  size_t after = next;
  return !is_cased(decode(s, after));
}

std::string map_case(std::string_view s, case_kind kind) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t cp = decode(s, pos);
    if (cp < 0x80 && kind == case_kind::lower) out += static_cast<char>(lower_of(cp));
    else if (cp < 0x80) out += static_cast<char>(upper_of(cp));
    else if (cp == 0x3a3 && kind == case_kind::lower && final_sigma(s, start, pos)) append_utf8(out, 0x3c2);
    else append_cased(out, cp, kind);
  }
  return out;
}

}  // namespace

bool is_upper_char(uint32_t cp) { return lower_of(cp) != cp || cp == 0x130; }
bool is_lower_char(uint32_t cp) { return upper_of(cp) != cp || cp == 0xdf || cp == 0x138 || cp == 0x149; }

std::string to_upper(std::string_view s) { return map_case(s, case_kind::upper); }
std::string to_lower(std::string_view s) { return map_case(s, case_kind::lower); }

std::string capitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t pos = 0;
  uint32_t first = decode(s, pos);
  std::string out;
  append_cased(out, first, case_kind::title);
  return out + to_lower(s.substr(pos));
}

std::string title_case(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cp = decode(s, pos);
    bool cased = is_cased(cp);
    append_cased(out, cp, previous_cased ? case_kind::lower : case_kind::title);
    previous_cased = cased;
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
