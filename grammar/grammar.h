// grammar: the one form every structured-output constraint is turned into
// before it is compiled (grammar/compiled.h): a context-free grammar over
// bytes. Regexes (grammar/regex.h), JSON Schemas (grammar/json_schema.h),
// EBNF/GBNF text (grammar/ebnf.h) and choice lists all build one of these;
// text is UTF-8 and every codepoint class is spelled as its UTF-8 byte
// sequences (add_codepoints), so the compiled automaton reads bytes, the
// unit every tokenizer's tokens are made of.
//
// Nodes live in the grammar's pool and are named by index; a rule is a
// named node the others may reference (recursion goes through rules).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::grammar {

using byte_set = std::bitset<256>;

struct node {
  enum kind_t { bytes, seq, alt, repeat, rule_ref } kind = seq;
  byte_set set;                // bytes: exactly one byte of this set
  std::vector<int32_t> items;  // seq: in order; alt: any one; repeat: items[0]
  int32_t min = 0, max = -1;   // repeat: between min and max times (-1: unbounded)
  int32_t rule = -1;           // rule_ref: the rule's index
};

struct rule {
  std::string name;
  int32_t body = -1;  // a node; -1 while declared and not yet defined
};

// Inclusive codepoint ranges.
using codepoint_ranges = std::vector<std::pair<uint32_t, uint32_t>>;

class grammar {
 public:
  int32_t bytes(const byte_set& s);
  int32_t byte(uint8_t b);
  int32_t byte_range(uint8_t lo, uint8_t hi);
  int32_t literal(std::string_view text);  // these exact bytes
  int32_t seq(std::vector<int32_t> items);
  int32_t alt(std::vector<int32_t> items);
  int32_t repeat(int32_t item, int32_t min, int32_t max);
  int32_t optional(int32_t item) { return repeat(item, 0, 1); }
  int32_t star(int32_t item) { return repeat(item, 0, -1); }
  int32_t plus(int32_t item) { return repeat(item, 1, -1); }
  int32_t empty() { return seq({}); }         // the empty string
  int32_t nothing() { return bytes({}); }     // no string at all
  int32_t ref(int32_t rule);
  // Any one codepoint in `ranges` (merged and clipped to 0..0x10FFFF, the
  // surrogates D800..DFFF left out), UTF-8 encoded: alternatives of byte
  // sequences, shortest form only.
  int32_t codepoints(codepoint_ranges ranges);

  // Declares a rule (its body set later, so that rules may refer to each
  // other and themselves); names need not be unique, find_rule gives the first.
  int32_t add_rule(std::string name);
  void set_body(int32_t rule, int32_t node);
  int32_t add_rule(std::string name, int32_t body) {
    const int32_t r = add_rule(std::move(name));
    set_body(r, body);
    return r;
  }
  int32_t find_rule(std::string_view name) const;  // -1 when none
  // Copies every node and rule of `other` into this grammar (rule names
  // kept, references renumbered) and returns the index of other's root rule
  // here. REQUIRES: other.root() >= 0.
  int32_t embed(const grammar& other);

  const std::vector<node>& nodes() const { return nodes_; }
  const std::vector<rule>& rules() const { return rules_; }
  const node& at(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
  int32_t root() const { return root_; }
  void set_root(int32_t rule) { root_ = rule; }

  // A readable form for tests and error messages: one "name ::= ..." line a rule.
  std::string to_string() const;

 private:
  int32_t add(node n);
  std::vector<node> nodes_;
  std::vector<rule> rules_;
  int32_t root_ = -1;
};

// Codepoints of a UTF-8 string, or false where it is not valid UTF-8.
bool decode_utf8(std::string_view text, std::vector<uint32_t>& out);
void append_utf8(uint32_t cp, std::string& out);

}  // namespace troupe::grammar
