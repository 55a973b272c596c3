// unicode: UTF-8 helpers giving Python str semantics over UTF-8 bytes
// (lengths and indices count code points, whitespace is Python's
// str.isspace() set). Case mapping covers ASCII, Latin-1, Latin Extended-A,
// Greek and Cyrillic; letters of other scripts keep their case.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::unicode {

// Decodes the code point at s[pos] and advances pos (invalid bytes decode as
// themselves, one byte each).
uint32_t decode(std::string_view s, size_t& pos);
void append_utf8(std::string& out, uint32_t cp);

// Byte offset of every code point, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

bool is_space(uint32_t cp);        // str.isspace()
bool is_linebreak(uint32_t cp);    // str.splitlines() boundaries
bool is_word_char(uint32_t cp);    // regex \w (approximate beyond ASCII)
bool is_printable(uint32_t cp);    // str.isprintable() (approximate)

// str.strip / lstrip / rstrip: with chars empty and default_ws, whitespace.
std::string_view strip(std::string_view s, bool left, bool right);
std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

// str.split() with no separator: runs of whitespace, maxsplit < 0 unlimited.
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit);
std::vector<std::string> rsplit_whitespace(std::string_view s, int64_t maxsplit);
std::vector<std::string> split_sep(std::string_view s, std::string_view sep, int64_t maxsplit);
std::vector<std::string> rsplit_sep(std::string_view s, std::string_view sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);

bool is_upper_char(uint32_t cp);  // a cased letter in upper case
bool is_lower_char(uint32_t cp);  // a cased letter in lower case
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize()
std::string title_case(std::string_view s);   // str.title()

// Python's repr() of a str.
std::string python_repr(std::string_view s);

}  // namespace troupe::unicode
