// regex: a recursive-descent parser over the pattern's codepoints that
// builds grammar nodes as it goes (grammar/regex.h has the syntax).
#include "grammar/regex.h"

#include <algorithm>
#include <string>
#include <vector>

namespace troupe::grammar {

namespace {

constexpr uint32_t max_codepoint = 0x10FFFF;
constexpr uint32_t end_of_pattern = 0xFFFFFFFF;
constexpr int64_t max_repeat = 10000;
constexpr int max_depth = 500;

const codepoint_ranges digit_set = {{'0', '9'}};
const codepoint_ranges word_set = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const codepoint_ranges space_set = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

codepoint_ranges complement(codepoint_ranges set) {
  std::sort(set.begin(), set.end());
  codepoint_ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : set) {
    if (lo > hi) continue;
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= max_codepoint) out.push_back({next, max_codepoint});
  return out;
}

bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_alnum(uint32_t c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int hex_value(uint32_t c) {
  if (is_digit(c)) return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

class parser {
 public:
  parser(grammar& g, std::string_view pattern, std::vector<uint32_t> cps)
      : g_(g), pattern_(pattern), cps_(std::move(cps)) {
    size_t at = 0;
    for (uint32_t c : cps_) {
      offsets_.push_back(at);
      at += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    }
    offsets_.push_back(at);
  }

  result<int32_t> run() {
    int32_t n = alternation();
    if (n >= 0 && !at_end()) n = fail(i_, "unbalanced ')'");  // only ')' stops it early
    if (n < 0) return make_error("regex: " + problem_ + " at position " + std::to_string(offsets_[where_]));
    return n;
  }

 private:
  enum class escape_kind { failed, single, set };

  bool at_end() const { return i_ >= cps_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < cps_.size() ? cps_[i_ + k] : end_of_pattern; }

  // Records the first problem (at codepoint index `at`); returns -1.
  int32_t fail(size_t at, std::string problem) {
    if (problem_.empty()) problem_ = std::move(problem), where_ = at;
    return -1;
  }

  int32_t literal(uint32_t cp) {
    std::string s;
    append_utf8(cp, s);
    return g_.literal(s);
  }

  int32_t alternation() {
    std::vector<int32_t> alts;
    while (true) {
      const int32_t c = concat();
      if (c < 0) return -1;
      alts.push_back(c);
      if (peek() != '|') break;
      ++i_;
    }
    return g_.alt(std::move(alts));
  }

  // Whether only '$'s stand between i_ and the end of this top-level alternative.
  bool anchor_at_end() const {
    size_t k = 1;
    while (peek(k) == '$') ++k;
    return peek(k) == end_of_pattern || peek(k) == '|';
  }

  int32_t concat() {
    std::vector<int32_t> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (depth_ > 0 || !items.empty()) return fail(i_, "'^' inside the pattern is not supported");
        ++i_;
        continue;
      }
      if (peek() == '$') {
        if (depth_ > 0 || !anchor_at_end()) return fail(i_, "'$' inside the pattern is not supported");
        ++i_;
        continue;
      }
      const int32_t q = quantified();
      if (q < 0) return -1;
      items.push_back(q);
    }
    return g_.seq(std::move(items));
  }

  // At '{' (index at): a {n} {n,} {n,m} or {,m} with its bounds (max -1 for
  // none) and the index past '}'; false where the brace is a literal.
  bool brace(size_t at, int64_t& min, int64_t& max, size_t& end) const {
    size_t k = at + 1;
    auto number = [&](int64_t& v) {
      const size_t start = k;
      v = 0;
      for (; k < cps_.size() && is_digit(cps_[k]); ++k) v = std::min<int64_t>(v * 10 + (cps_[k] - '0'), 1 << 30);
      return k > start;
    };
    const bool has_min = number(min);
    if (k < cps_.size() && cps_[k] == ',') {
      ++k;
      if (!number(max)) max = -1;
      if (!has_min && max < 0) return false;
    } else {
      if (!has_min) return false;
      max = min;
    }
    if (k >= cps_.size() || cps_[k] != '}') return false;
    end = k + 1;
    return true;
  }

  bool quantifier_here() const {
    int64_t lo, hi;
    size_t end;
    const uint32_t c = peek();
    return c == '*' || c == '+' || c == '?' || (c == '{' && brace(i_, lo, hi, end));
  }

  int32_t quantified() {
    const int32_t a = atom();
    if (a < 0 || !quantifier_here()) return a;
    const size_t at = i_;
    int64_t min = 0, max = -1;
    size_t end = i_ + 1;
    switch (peek()) {
      case '*': break;
      case '+': min = 1; break;
      case '?': max = 1; break;
      default: brace(i_, min, max, end); break;
    }
    i_ = end;
    if (min > max_repeat || max > max_repeat) return fail(at, "repetition bound too large");
    if (max >= 0 && max < min) return fail(at, "min repeat greater than max repeat");
    if (peek() == '?') ++i_;  // lazy: the same strings for a whole match
    if (quantifier_here()) return fail(i_, "multiple repeat");
    return g_.repeat(a, static_cast<int32_t>(min), static_cast<int32_t>(max));
  }

  int32_t atom() {
    const size_t at = i_;
    int64_t lo, hi;
    size_t end;
    switch (peek()) {
      case '(': return group();
      case '[': return char_class();
      case '.': ++i_; return g_.codepoints({{0, '\n' - 1}, {'\n' + 1, max_codepoint}});
      case '*': case '+': case '?': return fail(at, "nothing to repeat");
      case '{':
        if (brace(i_, lo, hi, end)) return fail(at, "nothing to repeat");
        ++i_;
        return literal('{');
      case '\\': {
        uint32_t cp = 0;
        codepoint_ranges set;
        switch (escape(false, cp, set)) {
          case escape_kind::failed: return -1;
          case escape_kind::single: return literal(cp);
          case escape_kind::set: return g_.codepoints(std::move(set));
        }
        return -1;
      }
      default: return literal(cps_[i_++]);
    }
  }

  // After "(?P<" or "(?<": a name and '>'.
  bool group_name() {
    const size_t start = i_;
    while (!at_end() && peek() != '>') {
      const uint32_t c = peek();
      if (!(c == '_' || c >= 0x80 || is_ascii_alnum(c)) || (i_ == start && is_digit(c)))
        return fail(i_, "bad group name") , false;
      ++i_;
    }
    if (at_end()) return fail(start, "unterminated group name"), false;
    if (i_ == start) return fail(i_, "missing group name"), false;
    ++i_;
    return true;
  }

  int32_t group() {
    const size_t open = i_++;
    if (peek() == '?') {
      const uint32_t k = peek(1), k2 = peek(2);
      if (k == ':') {
        i_ += 2;
      } else if (k == '=' || k == '!' || (k == '<' && (k2 == '=' || k2 == '!'))) {
        return fail(open, "lookaround is not supported");
      } else if (k == 'P' && k2 == '=') {
        return fail(open, "backreferences are not supported");
      } else if (k == 'P' && k2 == '<') {
        i_ += 3;
        if (!group_name()) return -1;
      } else if (k == '<') {
        i_ += 2;
        if (!group_name()) return -1;
      } else {
        return fail(open, "unsupported group syntax (inline flags, comments, atomic or conditional groups)");
      }
    }
    if (depth_ >= max_depth) return fail(open, "groups nested too deeply");
    ++depth_;
    const int32_t body = alternation();
    --depth_;
    if (body < 0) return -1;
    if (peek() != ')') return fail(open, "unbalanced '('");
    ++i_;
    return body;
  }

  // `count` hex digits (count 0: \u{...}, 1 to 6 digits and '}') into v.
  bool hex(int count, uint32_t& v) {
    v = 0;
    if (count == 0) {
      int n = 0;
      for (; hex_value(peek()) >= 0 && n < 7; ++n, ++i_) v = v * 16 + static_cast<uint32_t>(hex_value(peek()));
      if (n == 0 || n > 6 || peek() != '}' || v > max_codepoint) return false;
      ++i_;
      return true;
    }
    for (int n = 0; n < count; ++n, ++i_) {
      if (hex_value(peek()) < 0) return false;
      v = v * 16 + static_cast<uint32_t>(hex_value(peek()));
    }
    return true;
  }

  // \uHHHH or \u{H...} after the "\u"; a surrogate pair of \uHHHH escapes
  // is one codepoint.
  escape_kind unicode_escape(size_t at, uint32_t& cp) {
    const bool braced = peek() == '{';
    if (braced) ++i_;
    if (!hex(braced ? 0 : 4, cp)) return fail(at, "bad \\u escape"), escape_kind::failed;
    if (!braced && cp >= 0xD800 && cp <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      const size_t save = i_;
      i_ += 2;
      uint32_t low = 0;
      if (hex(4, low) && low >= 0xDC00 && low <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        return escape_kind::single;
      }
      i_ = save;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return fail(at, "lone surrogate in \\u escape"), escape_kind::failed;
    return escape_kind::single;
  }

  // At a backslash: one codepoint (cp) or a class (set).
  escape_kind escape(bool in_class, uint32_t& cp, codepoint_ranges& set) {
    const size_t at = i_++;
    if (at_end()) return fail(at, "trailing backslash"), escape_kind::failed;
    const uint32_t c = cps_[i_++];
    auto single = [&](uint32_t v) { cp = v; return escape_kind::single; };
    auto klass = [&](const codepoint_ranges& s, bool negate) {
      set = negate ? complement(s) : s;
      return escape_kind::set;
    };
    auto bad = [&](std::string problem) { fail(at, std::move(problem)); return escape_kind::failed; };
    switch (c) {
      case 'n': return single('\n');
      case 'r': return single('\r');
      case 't': return single('\t');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0': return is_digit(peek()) ? bad("octal escapes are not supported") : single(0);
      case 'x': {
        uint32_t v = 0;
        return hex(2, v) ? single(v) : bad("bad \\x escape");
      }
      case 'u': return unicode_escape(at, cp);
      case 'd': return klass(digit_set, false);
      case 'D': return klass(digit_set, true);
      case 'w': return klass(word_set, false);
      case 'W': return klass(word_set, true);
      case 's': return klass(space_set, false);
      case 'S': return klass(space_set, true);
      case 'b': return in_class ? single('\b') : bad("word boundaries are not supported");
      case 'B': return bad("word boundaries are not supported");
      case 'k': return bad("backreferences are not supported");
      case 'A': case 'Z': case 'z': case 'G':
        return bad(std::string("anchor \\") + static_cast<char>(c) + " is not supported");
      case 'p': case 'P': return bad("unicode property escapes are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') return bad("backreferences are not supported");
    if (is_ascii_alnum(c)) return bad(std::string("bad escape \\") + static_cast<char>(c));
    return single(c);  // escaped punctuation (or any other non-alphanumeric)
  }

  escape_kind class_item(uint32_t& cp, codepoint_ranges& set) {
    if (peek() == '\\') return escape(true, cp, set);
    cp = cps_[i_++];
    return escape_kind::single;
  }

  int32_t char_class() {
    const size_t open = i_++;
    const bool negate = peek() == '^';
    if (negate) ++i_;
    codepoint_ranges set;
    for (bool first = true;; first = false) {
      if (at_end()) return fail(open, "unterminated character class");
      if (peek() == ']' && !first) {  // a ']' first is a literal (as in Python)
        ++i_;
        break;
      }
      const size_t item_at = i_;
      uint32_t lo = 0, hi = 0;
      codepoint_ranges item;
      const escape_kind k = class_item(lo, item);
      if (k == escape_kind::failed) return -1;
      const bool range = peek() == '-' && peek(1) != ']' && peek(1) != end_of_pattern;
      if (!range) {
        if (k == escape_kind::set) {
          set.insert(set.end(), item.begin(), item.end());
        } else {
          set.push_back({lo, lo});
        }
        continue;
      }
      ++i_;  // '-'
      const escape_kind k2 = class_item(hi, item);
      if (k2 == escape_kind::failed) return -1;
      if (k == escape_kind::set || k2 == escape_kind::set || hi < lo) {
        const size_t from = offsets_[item_at];
        return fail(item_at, "bad character range " + std::string(pattern_.substr(from, offsets_[i_] - from)));
      }
      set.push_back({lo, hi});
    }
    return g_.codepoints(negate ? complement(std::move(set)) : std::move(set));
  }

  grammar& g_;
  std::string_view pattern_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;  // byte offset of each codepoint, then the pattern's size
  size_t i_ = 0;
  int depth_ = 0;
  std::string problem_;
  size_t where_ = 0;
};

// Byte offset of the first byte that does not start a valid UTF-8 sequence.
size_t first_invalid_byte(std::string_view text) {
  std::vector<uint32_t> one;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    if (!decode_utf8(text.substr(i, len), one)) return i;
    i += len;
  }
  return text.size();
}

}  // namespace

result<int32_t> add_regex(grammar& g, std::string_view pattern) {
  std::vector<uint32_t> cps;
  if (!decode_utf8(pattern, cps))
    return make_error("regex: pattern is not valid UTF-8 at position " + std::to_string(first_invalid_byte(pattern)));
  return parser(g, pattern, std::move(cps)).run();
}

result<grammar> regex_grammar(std::string_view pattern) {
  grammar g;
  result<int32_t> body = add_regex(g, pattern);
  if (!body) return std::move(body).take_error();
  g.set_root(g.add_rule("root", *body));
  return g;
}

}  // namespace troupe::grammar
