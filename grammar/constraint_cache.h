// The process-wide caches that turn an output_constraint into a compiled
// grammar (the edges, to refuse a bad one with a 400) and into a token
// grammar over the model's vocabulary (the worker, to mask the logits).
// Both are keyed by the constraint's whole text and options and keep the
// most recently used entries; thread-safe.
#pragma once

#include <memory>

#include "common/result.h"
#include "grammar/constraint.h"

namespace troupe {
namespace grammar {
class compiled_grammar;
class token_grammar;
class token_vocabulary;

// The constraint's automaton, or what is wrong with it (the problem and
// its position, "regex: unbalanced ')' at position 3").
result<std::shared_ptr<const compiled_grammar>> compile_constraint(const output_constraint& c);
// The same over a vocabulary (the worker's; its token masks fill in as
// the states are met).
result<std::shared_ptr<const token_grammar>> token_grammar_for(
    const output_constraint& c, const std::shared_ptr<const token_vocabulary>& vocab);

}  // namespace grammar
}  // namespace troupe
