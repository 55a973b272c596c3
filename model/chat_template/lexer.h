// lexer: turns template source into tokens exactly as Jinja2's lexer does
// with trim_blocks=True, lstrip_blocks=True and keep_trailing_newline=False:
// newlines normalised to "\n", one trailing newline dropped, `{%-`/`-%}`
// stripping, lstrip of whitespace before `{%` / `{#` at a line start
// (`{%+` opts out), the newline after `%}` / `#}` removed (`+%}` opts out),
// comments dropped and raw blocks passed through as data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace troupe {

enum class token_kind {
  data, block_begin, block_end, variable_begin, variable_end,
  name, string, integer, floating, op, eof
};

struct token {
  token_kind kind = token_kind::eof;
  std::string text;  // data, name, decoded string, operator, or number source
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// A syntax error names its line and column.
result<std::vector<token>> tokenize(std::string_view source);

// "line L, column C: message" for errors at a token.
std::string describe_position(const token& t);
// How Jinja names a token in "expected ..., got ..." messages.
std::string describe_token(const token& t);

}  // namespace troupe
