// Test helper: whether a grammar accepts a whole string, through the
// compiled automaton (grammar/compiled.h) that serving uses.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace troupe::grammar {

// Whether the root rule matches exactly `text` (the grammar must compile).
bool grammar_accepts(const grammar& g, std::string_view text);

}  // namespace troupe::grammar
