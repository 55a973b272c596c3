// The candidate closest to a misspelt name (Levenshtein distance), for the
// "did you mean ...?" of config keys, command flags and request fields.
#pragma once

#include <string>
#include <vector>

namespace troupe {

// Levenshtein-nearest of `candidates` to `word`, or "" when none is close
// (within max(2, |word| / 3) edits).
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace troupe
