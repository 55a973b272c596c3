#include "model/chat_template/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "model/chat_template/unicode.h"

namespace troupe {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's re `\s`: length in bytes of the whitespace code point at pos, or 0.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t next = pos;
  return unicode::is_space(unicode::decode(s, next)) ? next - pos : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

// Jinja lexes with all newlines as "\n" and drops one trailing newline.
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
result<std::string> decode_string_literal(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': continue;
      case '\\': out += '\\'; continue;
      case '\'': out += '\''; continue;
      case '"': out += '"'; continue;
      case 'a': out += '\a'; continue;
      case 'b': out += '\b'; continue;
      case 'f': out += '\f'; continue;
      case 'n': out += '\n'; continue;
      case 'r': out += '\r'; continue;
      case 't': out += '\t'; continue;
      case 'v': out += '\v'; continue;
      default: break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t cp = 0;
      size_t n = 0;
      for (; n < 3 && i + n < body.size() && body[i + n] >= '0' && body[i + n] <= '7'; ++n) {
        cp = cp * 8 + (body[i + n] - '0');
      }
      i += n - 1;
      unicode::append_utf8(out, cp);
      continue;
    }
    size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0) {
      if (e == 'N') return make_error("\\N{...} escapes are not supported");
      out += '\\';
      out += e;
      continue;
    }
    uint32_t cp = 0;
    for (size_t k = 1; k <= digits; ++k) {
      int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
      if (h < 0) return make_error(std::string("truncated \\") + e + " escape");
      cp = cp * 16 + static_cast<uint32_t>(h);
    }
    if (cp > 0x10ffff) return make_error("illegal Unicode character in escape");
    i += digits;
    unicode::append_utf8(out, cp);
  }
  return out;
}

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~",
                                  "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

class lexer {
 public:
  explicit lexer(std::string_view source) : src_(normalize_source(source)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') newlines_.push_back(i);
    }
  }

  result<std::vector<token>> run() {
    while (pos_ < src_.size()) {
      std::string error = lex_root();
      if (!error.empty()) return make_error(error);
    }
    push(token_kind::eof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  token& push(token_kind kind, std::string text, size_t at) {
    token t;
    t.kind = kind;
    t.text = std::move(text);
    auto it = std::lower_bound(newlines_.begin(), newlines_.end(), at);
    t.line = static_cast<int>(it - newlines_.begin()) + 1;
    size_t line_start = it == newlines_.begin() ? 0 : *(it - 1) + 1;
    t.column = static_cast<int>(at - line_start) + 1;
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  std::string error_at(size_t at, const std::string& message) {
    token t = push(token_kind::eof, "", at);
    tokens_.pop_back();
    return describe_position(t) + ": " + message;
  }

  // Data before a tag, stripped as Jinja's OptionalLStrip rule does.
  void push_data(std::string_view text, size_t at, char sign, bool lstrip_allowed) {
    if (sign == '-') {
      text = unicode::strip(text, false, true);
    } else if (sign != '+' && lstrip_allowed) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
      // Jinja 3.1.2: whitespace_re (\s+, Unicode) must match the whole tail.
      std::string_view tail = text.substr(l_pos);
      if ((l_pos > 0 || line_starting_) && !tail.empty() && unicode::strip(tail, true, false).empty()) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) push(token_kind::data, std::string(text), at);
  }

  // Length of a block end (`+%}`, `-%}\s*`, `%}\n?`) at pos, or 0.
  size_t block_end_at(size_t pos, std::string_view close) {
    std::string_view rest = std::string_view(src_).substr(pos);
    if (rest.starts_with("+") && rest.substr(1).starts_with(close)) return 1 + close.size();
    if (rest.starts_with("-") && rest.substr(1).starts_with(close)) {
      return skip_spaces(src_, pos + 1 + close.size()) - pos;
    }
    if (!rest.starts_with(close)) return 0;
    bool newline = pos + close.size() < src_.size() && src_[pos + close.size()] == '\n';
    return close.size() + (newline ? 1 : 0);
  }

  size_t raw_begin_at(size_t pos) {
    size_t p = pos + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(src_, p + 3) - pos;
    if (src_.compare(p, 2, "%}") == 0) return p + 2 - pos;
    return 0;
  }

  std::string lex_root() {
    size_t tag = pos_;
    while ((tag = src_.find('{', tag)) != std::string::npos) {
      char k = tag + 1 < src_.size() ? src_[tag + 1] : 0;
      if (k == '%' || k == '{' || k == '#') break;
      ++tag;
    }
    if (tag == std::string::npos) {
      push(token_kind::data, src_.substr(pos_), pos_);
      pos_ = src_.size();
      return "";
    }
    char kind = src_[tag + 1];
    char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
    push_data(text, pos_, sign, kind != '{');
    size_t raw = kind == '%' ? raw_begin_at(tag) : 0;
    if (raw) {
      finish_end(tag, raw);
      return lex_raw();
    }
    pos_ = tag + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') return lex_comment(tag);
    push(kind == '%' ? token_kind::block_begin : token_kind::variable_begin, "", tag);
    return lex_tag(kind == '%' ? "%}" : "}}");
  }

  std::string lex_comment(size_t begin) {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return error_at(begin, "Missing end of comment tag");
    size_t start = end;
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) start = end - 1;
    finish_end(start, block_end_at(start, "#}"));
    return "";
  }

  std::string lex_raw() {
    size_t search = pos_;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) return error_at(pos_, "Missing end of raw directive");
      size_t p = tag + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      p = skip_spaces(src_, p + (sign ? 1 : 0));
      if (src_.compare(p, 6, "endraw") == 0) {
        size_t end_start = skip_spaces(src_, p + 6);
        size_t end_len = block_end_at(end_start, "%}");
        if (end_len) {
          push_data(std::string_view(src_).substr(pos_, tag - pos_), pos_, sign, true);
          finish_end(end_start, end_len);
          return "";
        }
      }
      search = tag + 2;
    }
  }

  void finish_end(size_t start, size_t length) {
    pos_ = start + length;
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  std::string lex_tag(std::string_view close) {
    token_kind end_kind = close == "%}" ? token_kind::block_end : token_kind::variable_end;
    while (pos_ < src_.size()) {
      if (balance_.empty()) {
        size_t end = close == "%}" ? block_end_at(pos_, close) : variable_end_at(pos_);
        if (end) {
          push(end_kind, "", pos_);
          finish_end(pos_, end);
          return "";
        }
      }
      if (size_t n = space_at(src_, pos_)) {
        pos_ += n;
        continue;
      }
      std::string error = lex_expression_token();
      if (!error.empty()) return error;
    }
    return "";  // unterminated: the parser reports the unexpected end
  }

  size_t variable_end_at(size_t pos) {
    std::string_view rest = std::string_view(src_).substr(pos);
    if (rest.starts_with("-}}")) return skip_spaces(src_, pos + 3) - pos;
    return rest.starts_with("}}") ? 2 : 0;
  }

  std::string lex_expression_token() {
    char c = src_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      push(token_kind::name, src_.substr(pos_, end - pos_), pos_);
      pos_ = end;
      return "";
    }
    if (c == '\'' || c == '"') return lex_string();
    for (const char* op : kOperators) {
      std::string_view o(op);
      if (src_.compare(pos_, o.size(), o) != 0) continue;
      std::string error = track_balance(o);
      if (!error.empty()) return error;
      push(token_kind::op, std::string(o), pos_);
      pos_ += o.size();
      return "";
    }
    return error_at(pos_, "unexpected char " + unicode::python_repr(std::string(1, c)) + " at " + std::to_string(pos_));
  }

  std::string track_balance(std::string_view o) {
    if (o == "(" || o == "[" || o == "{") {
      balance_.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
    } else if (o == ")" || o == "]" || o == "}") {
      if (balance_.empty()) return error_at(pos_, "unexpected '" + std::string(o) + "'");
      if (balance_.back() != o[0]) {
        return error_at(pos_, "unexpected '" + std::string(o) + "', expected '" + balance_.back() + "'");
      }
      balance_.pop_back();
    }
    return "";
  }

  std::string lex_number();
  std::string lex_string();

  std::string src_;
  std::vector<size_t> newlines_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<token> tokens_;
  std::vector<char> balance_;
};

size_t digits_with_underscores(std::string_view s, size_t pos) {
  size_t p = pos;
  if (p >= s.size() || !is_digit(s[p])) return 0;
  while (p < s.size() && (is_digit(s[p]) || (s[p] == '_' && p + 1 < s.size() && is_digit(s[p + 1])))) ++p;
  return p - pos;
}

std::string lexer::lex_number() {
  std::string_view s(src_);
  size_t int_len = digits_with_underscores(s, pos_);
  size_t p = pos_ + int_len;
  bool is_float = false;
  if (p + 1 < s.size() && s[p] == '.' && is_digit(s[p + 1])) {
    p += 1 + digits_with_underscores(s, p + 1);
    is_float = true;
  }
  if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
    size_t q = p + 1;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    if (size_t n = digits_with_underscores(s, q)) {
      p = q + n;
      is_float = true;
    }
  }
  std::string text;
  for (size_t i = pos_; i < p; ++i) if (s[i] != '_') text += s[i];
  token& t = push(is_float ? token_kind::floating : token_kind::integer, text, pos_);
  if (is_float) t.float_value = std::strtod(text.c_str(), nullptr);
  else t.int_value = std::strtoll(text.c_str(), nullptr, 10);
  pos_ = p;
  return "";
}

std::string lexer::lex_string() {
  char quote = src_[pos_];
  size_t p = pos_ + 1;
  while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
  if (p >= src_.size()) {
    return error_at(pos_, "unexpected char " + unicode::python_repr(std::string(1, quote)) + " at " + std::to_string(pos_));
  }
  result<std::string> decoded = decode_string_literal(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1));
  if (!decoded) return error_at(pos_, decoded.error_message());
  push(token_kind::string, std::move(decoded).value(), pos_);
  pos_ = p + 1;
  return "";
}

}  // namespace

result<std::vector<token>> tokenize(std::string_view source) { return lexer(source).run(); }

std::string describe_position(const token& t) {
  return "line " + std::to_string(t.line) + ", column " + std::to_string(t.column);
}

std::string describe_token(const token& t) {
  switch (t.kind) {
    case token_kind::eof: return "end of template";
    case token_kind::block_end: return "end of statement block";
    case token_kind::variable_end: return "end of print statement";
    case token_kind::block_begin: return "begin of statement block";
    case token_kind::variable_begin: return "begin of print statement";
    case token_kind::data: return "template data / text";
    case token_kind::string: return "'" + t.text + "'";
    default: return t.text;
  }
}

}  // namespace troupe
