// The schema-independent parts of the JSON Schema compiler: the shared JSON
// rules and separators (json_builder), integer ranges spelled digit by
// digit, the "format" regexes, JSON literals, and where a schema text stops
// being valid JSON (for the error message).
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

#include "common/json_writer.h"
#include "grammar/json_schema_internal.h"

namespace troupe::grammar::json_schema_detail {
namespace {

int digit_count(uint64_t v) {
  int n = 1;
  for (; v >= 10; v /= 10) ++n;
  return n;
}

uint64_t pow10(int n) {
  uint64_t v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

bool all_of(std::string_view s, char c) { return s.find_first_not_of(c) == std::string_view::npos; }

int32_t any_digits(grammar& g, int32_t min, int32_t max) {
  return g.repeat(g.byte_range('0', '9'), min, max);
}

// Digit strings of x's length between x and y, both included (x <= y, the
// same length). Each step keeps the common first digit or splits into "x's
// first digit, then at least the rest of x", "a digit strictly between,
// then anything" and "y's first digit, then at most the rest of y"; a rest
// of all 0s / all 9s folds its branch into the middle one.
int32_t same_length(grammar& g, std::string_view x, std::string_view y) {
  if (x.empty()) return g.empty();
  const size_t rest = x.size() - 1;
  auto then = [&](int32_t first, int32_t tail) { return rest == 0 ? first : g.seq({first, tail}); };
  if (x[0] == y[0]) {
    return then(g.byte(uint8_t(x[0])), same_length(g, x.substr(1), y.substr(1)));
  }
  const bool x_low = all_of(x.substr(1), '0');
  const bool y_high = all_of(y.substr(1), '9');
  const char mid_lo = x_low ? x[0] : char(x[0] + 1);
  const char mid_hi = y_high ? y[0] : char(y[0] - 1);
  std::vector<int32_t> alts;
  if (!x_low) {
    alts.push_back(then(g.byte(uint8_t(x[0])), same_length(g, x.substr(1), std::string(rest, '9'))));
  }
  if (mid_lo <= mid_hi) {
    alts.push_back(then(g.byte_range(uint8_t(mid_lo), uint8_t(mid_hi)),
                        rest == 0 ? -1 : any_digits(g, int32_t(rest), int32_t(rest))));
  }
  if (!y_high) {
    alts.push_back(then(g.byte(uint8_t(y[0])), same_length(g, std::string(rest, '0'), y.substr(1))));
  }
  return alts.size() == 1 ? alts[0] : g.alt(std::move(alts));
}

// Canonical spellings of the naturals in [a, b] (a <= b): the digit counts
// strictly between those of a and b are "[1-9][0-9]{..}" in one piece.
int32_t natural_range(grammar& g, uint64_t a, uint64_t b) {
  const int la = digit_count(a), lb = digit_count(b);
  if (la == lb) return same_length(g, std::to_string(a), std::to_string(b));
  std::vector<int32_t> alts;
  alts.push_back(same_length(g, std::to_string(a), std::string(size_t(la), '9')));
  if (lb - la >= 2) alts.push_back(g.seq({g.byte_range('1', '9'), any_digits(g, la, lb - 2)}));
  alts.push_back(same_length(g, std::to_string(pow10(lb - 1)), std::to_string(b)));
  return g.alt(std::move(alts));
}

// Canonical spellings of the naturals >= a: a's digit count from a up,
// or more digits.
int32_t natural_at_least(grammar& g, uint64_t a) {
  const int la = digit_count(a);
  const int32_t same = same_length(g, std::to_string(a), std::string(size_t(la), '9'));
  return g.alt({same, g.seq({g.byte_range('1', '9'), any_digits(g, la, -1)})});
}

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v); }

size_t utf8_length(std::string_view s, size_t p) {
  const auto c = uint8_t(s[p]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (p + n > s.size()) return 0;
  for (size_t i = 1; i < n; ++i) {
    const auto d = uint8_t(s[p + i]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// A recursive-descent JSON checker that stops at the first bad byte.
class scanner {
 public:
  explicit scanner(std::string_view s) : s_(s) {}

  size_t first_error() {
    if (!value(0)) return p_;
    skip_ws();
    return p_ == s_.size() ? std::string_view::npos : p_;
  }

 private:
  bool at(char c) const { return p_ < s_.size() && s_[p_] == c; }
  bool digit() const { return p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9'; }
  void skip_ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\t' || s_[p_] == '\r')) ++p_;
  }

  bool word(std::string_view w) {
    for (char c : w) {
      if (!at(c)) return false;
      ++p_;
    }
    return true;
  }

  bool value(int depth) {
    skip_ws();
    if (p_ >= s_.size() || depth > 1024) return false;
    switch (s_[p_]) {
      case '{': return container(depth, '}', true);
      case '[': return container(depth, ']', false);
      case '"': return string();
      case 't': return word("true");
      case 'f': return word("false");
      case 'n': return word("null");
      default: return number();
    }
  }

  bool container(int depth, char close, bool keyed) {
    ++p_;
    skip_ws();
    if (at(close)) return ++p_, true;
    for (;;) {
      if (keyed) {
        skip_ws();
        if (!string()) return false;
        skip_ws();
        if (!at(':')) return false;
        ++p_;
      }
      if (!value(depth + 1)) return false;
      skip_ws();
      if (at(close)) return ++p_, true;
      if (!at(',')) return false;
      ++p_;
    }
  }

  bool string() {
    if (!at('"')) return false;
    for (++p_; p_ < s_.size();) {
      const auto c = uint8_t(s_[p_]);
      if (c == '"') return ++p_, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        ++p_;
        if (at('u')) {
          for (int i = 0; i < 4; ++i) {
            ++p_;
            if (p_ >= s_.size() || !std::isxdigit(uint8_t(s_[p_]))) return false;
          }
        } else if (p_ >= s_.size() || std::string_view("\"\\/bfnrt").find(s_[p_]) == std::string_view::npos) {
          return false;
        }
        ++p_;
        continue;
      }
      const size_t n = utf8_length(s_, p_);
      if (n == 0) return false;
      p_ += n;
    }
    return false;
  }

  bool number() {
    if (at('-')) ++p_;
    if (at('0')) {
      ++p_;
    } else if (digit()) {
      while (digit()) ++p_;
    } else {
      return false;
    }
    if (at('.')) {
      ++p_;
      if (!digit()) return false;
      while (digit()) ++p_;
    }
    if (at('e') || at('E')) {
      ++p_;
      if (at('+') || at('-')) ++p_;
      if (!digit()) return false;
      while (digit()) ++p_;
    }
    return true;
  }

  std::string_view s_;
  size_t p_ = 0;
};

}  // namespace

// ---- json_builder ------------------------------------------------------------

int32_t json_builder::cat(std::vector<int32_t> items) {
  std::erase(items, -1);
  if (items.size() == 1) return items[0];
  return g_.seq(std::move(items));
}

int32_t json_builder::any(std::vector<int32_t> items) {
  if (items.empty()) return g_.nothing();
  if (items.size() == 1) return items[0];
  return g_.alt(std::move(items));
}

int32_t json_builder::ws() {
  if (!o_.any_whitespace) return -1;
  if (ws_ < 0) {
    byte_set space;
    space.set(' ').set('\n').set('\t');
    const int32_t max = o_.max_whitespace < 0 ? -1 : o_.max_whitespace;
    ws_ = g_.add_rule("ws", g_.repeat(g_.bytes(space), 0, max));
  }
  return g_.ref(ws_);
}

int32_t json_builder::comma() {
  if (o_.any_whitespace) return cat({g_.byte(','), ws()});
  return g_.literal(o_.compact_separators ? "," : ", ");
}

int32_t json_builder::colon() {
  if (o_.any_whitespace) return cat({ws(), g_.byte(':'), ws()});
  return g_.literal(o_.compact_separators ? ":" : ": ");
}

int32_t json_builder::char_node() {
  byte_set simple_escape, hex;
  for (char c : std::string_view("\"\\/bfnrt")) simple_escape.set(uint8_t(c));
  for (char c : std::string_view("0123456789abcdefABCDEF")) hex.set(uint8_t(c));
  const int32_t unicode_escape = g_.seq({g_.byte('u'), g_.repeat(g_.bytes(hex), 4, 4)});
  const int32_t escape = g_.seq({g_.byte('\\'), g_.alt({g_.bytes(simple_escape), unicode_escape})});
  // Any codepoint but the controls, the quote and the backslash.
  const int32_t plain = g_.codepoints({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
  return g_.alt({plain, escape});
}

int32_t json_builder::chr() {
  if (char_ < 0) char_ = g_.add_rule("char", char_node());
  return g_.ref(char_);
}

int32_t json_builder::string_rule() {
  if (string_ < 0) {
    string_ = g_.add_rule("string", g_.seq({g_.byte('"'), g_.star(char_node()), g_.byte('"')}));
  }
  return string_;
}

int32_t json_builder::natural() {
  return g_.alt({g_.byte('0'), g_.seq({g_.byte_range('1', '9'), g_.star(g_.byte_range('0', '9'))})});
}

int32_t json_builder::integer_rule() {
  if (integer_ < 0) integer_ = g_.add_rule("integer", g_.seq({g_.optional(g_.byte('-')), natural()}));
  return integer_;
}

int32_t json_builder::number_rule() {
  if (number_ >= 0) return number_;
  byte_set e, sign;
  e.set('e').set('E');
  sign.set('+').set('-');
  const int32_t digits = g_.plus(g_.byte_range('0', '9'));
  const int32_t fraction = g_.optional(g_.seq({g_.byte('.'), digits}));
  const int32_t exponent = g_.optional(
      g_.seq({g_.bytes(e), g_.optional(g_.bytes(sign)), g_.plus(g_.byte_range('0', '9'))}));
  number_ = g_.add_rule("number", g_.seq({integer(), fraction, exponent}));
  return number_;
}

int32_t json_builder::unsigned_number() {
  byte_set e, sign;
  e.set('e').set('E');
  sign.set('+').set('-');
  const int32_t fraction = g_.optional(g_.seq({g_.byte('.'), g_.plus(g_.byte_range('0', '9'))}));
  const int32_t exponent = g_.optional(
      g_.seq({g_.bytes(e), g_.optional(g_.bytes(sign)), g_.plus(g_.byte_range('0', '9'))}));
  return g_.seq({natural(), fraction, exponent});
}

int32_t json_builder::boolean() {
  if (boolean_ < 0) boolean_ = g_.add_rule("boolean", g_.alt({g_.literal("true"), g_.literal("false")}));
  return g_.ref(boolean_);
}

int32_t json_builder::null() {
  if (null_ < 0) null_ = g_.add_rule("null", g_.literal("null"));
  return g_.ref(null_);
}

int32_t json_builder::value_rule() {
  define_values();
  return value_;
}

int32_t json_builder::object_rule() {
  define_values();
  return object_;
}

// value, object and array refer to each other: declared first, then defined.
void json_builder::define_values() {
  if (value_ >= 0) return;
  value_ = g_.add_rule("value");
  object_ = g_.add_rule("object");
  array_ = g_.add_rule("array");
  g_.set_body(value_, g_.alt({g_.ref(object_), g_.ref(array_), string(), number(), boolean(), null()}));
  auto pair = [&] { return cat({string(), colon(), g_.ref(value_), after()}); };
  const int32_t pairs = g_.optional(cat({pair(), g_.star(cat({comma(), pair()}))}));
  g_.set_body(object_, cat({g_.byte('{'), ws(), pairs, g_.byte('}')}));
  auto item = [&] { return cat({g_.ref(value_), after()}); };
  const int32_t items = g_.optional(cat({item(), g_.star(cat({comma(), item()}))}));
  g_.set_body(array_, cat({g_.byte('['), ws(), items, g_.byte(']')}));
}

// ---- integer ranges, formats, literals ----------------------------------------

int32_t integer_range(grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<int32_t> alts;
  if (!lo || *lo < 0) {  // the negative part: '-' then magnitudes
    const uint64_t mag_lo = (hi && *hi < 0) ? magnitude(*hi) : 1;
    alts.push_back(g.seq({g.byte('-'), lo ? natural_range(g, mag_lo, magnitude(*lo))
                                          : natural_at_least(g, mag_lo)}));
  }
  if (!hi || *hi >= 0) {  // the non-negative part
    const uint64_t from = (lo && *lo > 0) ? uint64_t(*lo) : 0;
    alts.push_back(hi ? natural_range(g, from, uint64_t(*hi)) : natural_at_least(g, from));
  }
  if (alts.empty()) return g.nothing();
  return alts.size() == 1 ? alts[0] : g.alt(std::move(alts));
}

const char* format_regex(std::string_view format) {
#define TROUPE_DATE R"re([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))re"
#define TROUPE_TIME \
  R"re(([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+\-]([01][0-9]|2[0-3]):[0-5][0-9]))re"
#define TROUPE_OCTET R"re((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))re"
#define TROUPE_ATOM R"re([A-Za-z0-9!#$%&'*+/=?\^_`{|}~\-]+)re"
#define TROUPE_LABEL R"re([A-Za-z0-9]([A-Za-z0-9\-]*[A-Za-z0-9])?)re"
  struct entry {
    std::string_view name;
    const char* regex;
  };
  static constexpr entry kFormats[] = {
      {"date", TROUPE_DATE},
      {"time", TROUPE_TIME},
      {"date-time", TROUPE_DATE "[Tt]" TROUPE_TIME},
      {"email", TROUPE_ATOM R"re((\.)re" TROUPE_ATOM ")*@" TROUPE_LABEL R"re((\.)re" TROUPE_LABEL ")*"},
      {"uuid", "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"},
      {"ipv4", TROUPE_OCTET R"re((\.)re" TROUPE_OCTET "){3}"},
      {"uri", R"re([A-Za-z][A-Za-z0-9+.\-]*:([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*)re"},
  };
#undef TROUPE_DATE
#undef TROUPE_TIME
#undef TROUPE_OCTET
#undef TROUPE_ATOM
#undef TROUPE_LABEL
  for (const entry& e : kFormats) {
    if (e.name == format) return e.regex;
  }
  return nullptr;
}

std::string json_quote(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string format_double(double value) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, r.ptr);
}

size_t json_error_offset(std::string_view text) { return scanner(text).first_error(); }

}  // namespace troupe::grammar::json_schema_detail
