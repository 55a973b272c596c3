// GBNF text to a grammar: a hand-written recursive-descent parser over the
// bytes of the text. Rules are created on their first appearance (a
// reference or the definition), so they may be used before they are
// defined; undefined ones are reported once the whole text is read.
// Errors are thrown inside the parser (parse_failure) and turned into a
// result at its one entry point, parse_ebnf.
#include "grammar/ebnf.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace troupe::grammar {
namespace {

constexpr int32_t kMaxBound = 10000;     // the largest {m,n} bound
constexpr int kMaxNesting = 1000;        // the deepest (group) nesting
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

struct parse_failure {
  size_t at;  // byte offset in the text
  std::string problem;
};

// "line L, column C", both 1-based, the column counted in bytes.
std::string describe_position(std::string_view text, size_t at) {
  at = std::min(at, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(at - line_start + 1);
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte as an error message shows it: 'x' when printable ASCII.
std::string show_byte(unsigned char c) {
  if (c >= 0x20 && c < 0x7F) return "'" + std::string(1, static_cast<char>(c)) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
  return buf;
}

// Every codepoint not in `ranges`.
codepoint_ranges complement(codepoint_ranges ranges) {
  std::sort(ranges.begin(), ranges.end());
  codepoint_ranges out;
  uint32_t next = 0;  // the lowest codepoint not yet covered or emitted
  bool done = false;
  for (const auto& [lo, hi] : ranges) {
    if (done) break;
    if (lo > next) out.emplace_back(next, lo - 1);
    if (hi >= kMaxCodepoint) {
      done = true;
    } else {
      next = std::max(next, hi + 1);
    }
  }
  if (!done) out.emplace_back(next, kMaxCodepoint);
  return out;
}

class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  grammar run() {
    skip_space();
    while (!at_end()) parse_rule();
    // Rules are numbered in order of first appearance, so the first
    // undefined one is the one referenced earliest.
    for (const rule_info& info : rules_) {
      if (!info.defined) fail(info.first_ref, "undefined rule '" + info.name + "'");
    }
    return std::move(g_);
  }

  bool has_root() const { return names_.count(std::string_view("root")) != 0; }
  int32_t root() const { return rules_[names_.find(std::string_view("root"))->second].id; }

 private:
  struct rule_info {
    std::string name;
    int32_t id = -1;  // in g_
    size_t first_ref = std::string_view::npos;
    bool defined = false;
  };

  [[noreturn]] static void fail(size_t at, std::string problem) {
    throw parse_failure{at, std::move(problem)};
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  unsigned char byte_at(size_t i) const { return static_cast<unsigned char>(text_[i]); }

  // Blanks, newlines and # comments.
  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view take_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Whether a `name ::=` starts at pos_ (which is left where it was).
  bool at_rule_start() {
    const size_t saved = pos_;
    take_name();
    skip_space();
    const bool yes = text_.substr(pos_).starts_with("::=");
    pos_ = saved;
    return yes;
  }

  // The rule's entry, created on first appearance.
  rule_info& rule_named(std::string_view name) {
    auto it = names_.find(name);
    if (it == names_.end()) {
      rule_info info;
      info.name = std::string(name);
      info.id = g_.add_rule(info.name);
      it = names_.emplace(info.name, rules_.size()).first;
      rules_.push_back(std::move(info));
    }
    return rules_[it->second];
  }

  void parse_rule() {
    const size_t name_pos = pos_;
    if (!is_name_char(peek())) {
      if (peek() == ')') fail(pos_, "unexpected ')'");
      fail(pos_, "expected a rule name, found " + show_byte(byte_at(pos_)));
    }
    const std::string_view name = take_name();
    skip_space();
    if (!text_.substr(pos_).starts_with("::=")) fail(pos_, "expected '::='");
    pos_ += 3;
    // The body is parsed before the entry is looked up again: parsing may
    // add rules and so move the entries.
    {
      rule_info& info = rule_named(name);
      if (info.defined) fail(name_pos, "rule '" + info.name + "' defined twice");
      info.defined = true;
    }
    const int32_t body = parse_alternatives(0);
    g_.set_body(rule_named(name).id, body);
  }

  int32_t parse_alternatives(int depth) {
    std::vector<int32_t> alts{parse_sequence(depth)};
    while (peek() == '|') {
      ++pos_;
      alts.push_back(parse_sequence(depth));
    }
    return alts.size() == 1 ? alts[0] : g_.alt(std::move(alts));
  }

  // Items up to a |, a ), the end, or the next `name ::=`; leaves pos_ there.
  int32_t parse_sequence(int depth) {
    std::vector<int32_t> items;
    for (;;) {
      skip_space();
      if (at_end()) break;
      const char c = peek();
      if (c == '|') break;
      if (c == ')') {
        if (depth == 0) fail(pos_, "unexpected ')'");
        break;
      }
      if (is_name_char(c)) {
        if (at_rule_start()) break;
        const size_t ref_pos = pos_;
        rule_info& info = rule_named(take_name());
        if (info.first_ref == std::string_view::npos) info.first_ref = ref_pos;
        items.push_back(g_.ref(info.id));
      } else if (c == '"' || c == '\'') {
        items.push_back(parse_literal());
      } else if (c == '[') {
        items.push_back(parse_class());
      } else if (c == '.') {
        ++pos_;
        items.push_back(g_.codepoints({{0, kMaxCodepoint}}));
      } else if (c == '(') {
        const size_t open = pos_++;
        if (depth + 1 > kMaxNesting) fail(open, "groups nested too deeply");
        const int32_t inner = parse_alternatives(depth + 1);
        if (peek() != ')') fail(open, "unclosed '('");
        ++pos_;
        items.push_back(inner);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) fail(pos_, "unexpected " + show_byte(byte_at(pos_)));
        items.back() = parse_postfix(items.back());
      } else {
        fail(pos_, "unexpected " + show_byte(byte_at(pos_)));
      }
    }
    return items.size() == 1 ? items[0] : g_.seq(std::move(items));
  }

  int32_t parse_postfix(int32_t item) {
    const char c = text_[pos_];
    if (c != '{') {
      ++pos_;
      if (c == '*') return g_.star(item);
      if (c == '+') return g_.plus(item);
      return g_.optional(item);
    }
    const size_t open = pos_++;
    const int64_t min = take_bound();
    int64_t max = min;
    skip_blanks();
    if (peek() == ',') {
      ++pos_;
      skip_blanks();
      max = (peek() >= '0' && peek() <= '9') ? take_bound() : -1;
      skip_blanks();
    }
    if (peek() != '}') fail(pos_, "expected '}' in repetition bound");
    ++pos_;
    if (min > kMaxBound || max > kMaxBound) fail(open, "bound too large");
    if (max >= 0 && max < min) {
      fail(open, "repetition bound {" + std::to_string(min) + "," + std::to_string(max) +
                     "}: max below min");
    }
    return g_.repeat(item, static_cast<int32_t>(min), static_cast<int32_t>(max));
  }

  void skip_blanks() {
    while (peek() == ' ' || peek() == '\t') ++pos_;
  }

  // A decimal number (after blanks), saturated just above kMaxBound.
  int64_t take_bound() {
    skip_blanks();
    if (!(peek() >= '0' && peek() <= '9')) fail(pos_, "expected a number in repetition bound");
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      value = std::min<int64_t>(value * 10 + (peek() - '0'), kMaxBound + 1);
      ++pos_;
    }
    return value;
  }

  // The codepoint of the valid UTF-8 sequence at pos_, advancing past it;
  // false (pos_ unchanged) when the bytes there are not valid UTF-8.
  bool take_utf8(uint32_t& cp) {
    const unsigned char b0 = byte_at(pos_);
    if (b0 < 0x80) {
      cp = b0;
      ++pos_;
      return true;
    }
    size_t len;
    uint32_t lowest;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, cp = b0 & 0x1F, lowest = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cp = b0 & 0x0F, lowest = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cp = b0 & 0x07, lowest = 0x10000;
    } else {
      return false;
    }
    if (pos_ + len > text_.size()) return false;
    for (size_t i = 1; i < len; ++i) {
      const unsigned char b = byte_at(pos_ + i);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < lowest || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    pos_ += len;
    return true;
  }

  // The escape at pos_ (a backslash), in a literal or a class that opened
  // at `start`; `unterminated` is the error when the text ends inside it.
  uint32_t take_escape(size_t start, const char* unterminated) {
    const size_t esc = pos_++;
    if (at_end() || peek() == '\n' || peek() == '\r') fail(start, unterminated);
    const char c = text_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^':
        return static_cast<unsigned char>(c);
      case 'x': case 'u': case 'U': break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F) {
          fail(esc, std::string("invalid escape '\\") + c + "'");
        }
        fail(esc, "invalid escape: '\\' followed by " + show_byte(static_cast<unsigned char>(c)));
    }
    const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
    uint32_t cp = 0;
    for (int i = 0; i < digits; ++i) {
      const int v = at_end() ? -1 : hex_value(peek());
      if (v < 0) {
        fail(esc, "invalid escape '" + std::string(text_.substr(esc, pos_ - esc)) +
                      "': expected " + std::to_string(digits) + " hex digits");
      }
      cp = cp * 16 + static_cast<uint32_t>(v);
      ++pos_;
    }
    if (cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "invalid codepoint U+%04X", cp);
      fail(esc, buf);
    }
    return cp;
  }

  int32_t parse_literal() {
    const size_t start = pos_;
    const char quote = text_[pos_++];
    std::string bytes;
    for (;;) {
      if (at_end() || peek() == '\n' || peek() == '\r') fail(start, "unterminated string literal");
      const char c = peek();
      if (c == quote) {
        ++pos_;
        break;
      }
      uint32_t cp = 0;
      if (c == '\\') {
        cp = take_escape(start, "unterminated string literal");
      } else if (!take_utf8(cp)) {
        fail(pos_, "invalid UTF-8 in string literal");
      }
      append_utf8(cp, bytes);
    }
    return g_.literal(bytes);
  }

  // One codepoint of a class: an escape or a raw (UTF-8) character.
  uint32_t take_class_char(size_t start) {
    if (at_end() || peek() == '\n' || peek() == '\r') fail(start, "unterminated character class");
    if (peek() == '\\') return take_escape(start, "unterminated character class");
    uint32_t cp;
    if (!take_utf8(cp)) fail(pos_, "invalid UTF-8 in character class");
    return cp;
  }

  int32_t parse_class() {
    const size_t start = pos_++;
    const bool negate = peek() == '^';
    if (negate) ++pos_;
    codepoint_ranges ranges;
    for (;;) {
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const size_t item = pos_;
      const uint32_t lo = take_class_char(start);
      uint32_t hi = lo;
      // A - before the closing ] is itself a member.
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = take_class_char(start);
        if (hi < lo) {
          fail(item, "reversed range '" + std::string(text_.substr(item, pos_ - item)) +
                         "' in character class");
        }
      }
      ranges.emplace_back(lo, hi);
    }
    return g_.codepoints(negate ? complement(std::move(ranges)) : std::move(ranges));
  }

  std::string_view text_;
  size_t pos_ = 0;
  grammar g_;
  std::vector<rule_info> rules_;
  std::map<std::string, size_t, std::less<>> names_;  // name -> index in rules_
};

}  // namespace

result<grammar> parse_ebnf(std::string_view text) {
  parser p(text);
  grammar g;
  try {
    g = p.run();
  } catch (const parse_failure& f) {
    return make_error("EBNF: " + f.problem + " at " + describe_position(text, f.at));
  }
  if (!p.has_root()) return make_error("EBNF: no rule named 'root'");
  g.set_root(p.root());
  return g;
}

}  // namespace troupe::grammar
