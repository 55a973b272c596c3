// ebnf: grammars written as text, in the GBNF dialect of EBNF that
// llama.cpp defined and vLLM's guided_grammar / xgrammar accept:
//
//   root   ::= object                 # the start rule is "root"
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ws ":" ws value
//   digit  ::= [0-9]
//   ws     ::= [ \t\n]*
//
// Rules are `name ::= alternatives` (names: letters, digits, - and _; a
// rule may span lines, it ends where the next `name ::=` starts);
// alternatives are separated by |; an item is a "literal" (escapes \n \r
// \t \\ \" \' \xHH \uHHHH \UHHHHHHHH), a class [a-z] / [^"\\] (same
// escapes), a rule name, a (group), or any of these followed by * + ? or
// {m} {m,} {m,n}; # starts a comment to the end of the line. Literals and
// classes are codepoints (UTF-8 encoded in the grammar).
//
// Errors name the problem and its line:column: an undefined rule, a rule
// defined twice, no root rule, an unterminated literal or class, bad
// escapes, bad repetition bounds.
#pragma once

#include <string_view>

#include "common/result.h"
#include "grammar/grammar.h"

namespace troupe::grammar {

result<grammar> parse_ebnf(std::string_view text);

}  // namespace troupe::grammar
