#include "tests/grammar/accepts.h"

#include <gtest/gtest.h>

#include "grammar/compiled.h"
#include "grammar/stack_walker.h"

namespace troupe::grammar {

bool grammar_accepts(const grammar& g, std::string_view text) {
  auto compiled = compiled_grammar::compile(g);
  EXPECT_TRUE(compiled.ok()) << (compiled.ok() ? "" : compiled.error_message());
  if (!compiled.ok()) return false;
  stack_walker w;
  w.reset(**compiled);
  std::vector<int32_t> start;
  bool ended = false;
  w.expand(w.node((*compiled)->root_start(), stack_walker::kRoot), start, ended);
  if (text.empty()) return ended;
  return w.read(std::string(text), start) && w.final_ended(text.size());
}

}  // namespace troupe::grammar
