// regex: a regular expression turned into a grammar node that matches
// exactly the strings the whole pattern matches (as vLLM's guided_regex and
// JSON Schema's "pattern": the match is anchored at both ends; a leading ^
// and trailing $ are accepted and change nothing).
//
// The syntax is the common subset of Python's re and ECMAScript that
// constrained-decoding users write: literals; escapes \n \r \t \f \v \0
// \xHH \uHHHH \u{H...} and escaped punctuation; classes \d \D \w \W \s \S;
// "." (any codepoint but \n); bracket classes [...] / [^...] with ranges
// and the escapes above; groups (...), (?:...) and named (?P<n>...) /
// (?<n>...); alternation |; quantifiers * + ? {n} {n,} {n,m}, each
// optionally lazy (a trailing ?, which changes nothing for a full match).
// Anything else (backreferences, lookaround, ^/$ inside the pattern, word
// boundaries) is an error naming it and its position.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"
#include "grammar/grammar.h"

namespace troupe::grammar {

// The node, or "regex: <problem> at position N" (N: a byte offset in pattern).
result<int32_t> add_regex(grammar& g, std::string_view pattern);

// A grammar whose root matches the pattern.
result<grammar> regex_grammar(std::string_view pattern);

}  // namespace troupe::grammar
