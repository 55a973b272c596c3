// grammar: the node-pool builder, codepoint classes spelled as UTF-8 byte
// sequences, the readable form, and the UTF-8 helpers (grammar/grammar.h).
#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "common/check.h"

namespace troupe::grammar {

namespace {

constexpr uint32_t max_codepoint = 0x10FFFF;
constexpr uint32_t surrogate_lo = 0xD800, surrogate_hi = 0xDFFF;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// cp's n-byte UTF-8 encoding into out[0..n).
void encode(uint32_t cp, int n, uint8_t* out) {
  static constexpr uint8_t lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  for (int i = n - 1; i > 0; --i, cp >>= 6) out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  out[0] = static_cast<uint8_t>(lead[n] | cp);
}

byte_set range_set(uint8_t lo, uint8_t hi) {
  byte_set s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return s;
}

// A prefix tree of byte-set sequences: every root-to-leaf path is one
// sequence; sibling edges have disjoint sets.
struct edge;
struct trie {
  std::vector<edge> kids;  // none: the end of a sequence
};
struct edge {
  byte_set set;
  trie next;
};

// Adds the byte-range sequences that encode exactly [lo, hi] (no surrogates
// inside): split where the encoded length changes, then where lo and hi
// differ in a leading byte while a lower byte does not span its full range.
void add_range(uint32_t lo, uint32_t hi, trie& t) {
  for (uint32_t edge_cp : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge_cp && edge_cp < hi) {
      add_range(lo, edge_cp, t);
      add_range(edge_cp + 1, hi, t);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      add_range(lo, lo | m, t);
      add_range((lo | m) + 1, hi, t);
      return;
    }
    if ((hi & m) != m) {
      add_range(lo, (hi & ~m) - 1, t);
      add_range(hi & ~m, hi, t);
      return;
    }
  }
  uint8_t a[4], b[4];
  encode(lo, n, a);
  encode(hi, n, b);
  // Ranges come in codepoint order, so a shared prefix is the last edge.
  trie* at = &t;
  for (int k = 0; k < n; ++k) {
    const byte_set s = range_set(a[k], b[k]);
    if (at->kids.empty() || at->kids.back().set != s) at->kids.push_back({s, {}});
    at = &at->kids.back().next;
  }
}

bool same(const trie& a, const trie& b) {
  if (a.kids.size() != b.kids.size()) return false;
  for (size_t i = 0; i < a.kids.size(); ++i)
    if (a.kids[i].set != b.kids[i].set || !same(a.kids[i].next, b.kids[i].next)) return false;
  return true;
}

// Siblings followed by the same tails become one edge (their sets joined):
// [E1-EC][80-BF][80-BF] and [EE-EF][80-BF][80-BF] share one node.
void merge_tails(trie& t) {
  for (edge& e : t.kids) merge_tails(e.next);
  std::vector<edge> out;
  for (edge& e : t.kids) {
    auto it = std::find_if(out.begin(), out.end(), [&](const edge& o) { return same(o.next, e.next); });
    if (it != out.end()) {
      it->set |= e.set;
    } else {
      out.push_back(std::move(e));
    }
  }
  t.kids = std::move(out);
}

int32_t emit(grammar& g, const trie& t) {
  std::vector<int32_t> alts;
  for (const edge& e : t.kids) {
    const int32_t first = g.bytes(e.set);
    alts.push_back(e.next.kids.empty() ? first : g.seq({first, emit(g, e.next)}));
  }
  return g.alt(std::move(alts));
}

std::string escape_byte(uint8_t b, bool in_set) {
  switch (b) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (b < 0x20 || b >= 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", b);
    return buf;
  }
  const bool special = in_set ? (b == ']' || b == '[' || b == '\\' || b == '-' || b == '^')
                              : (b == '"' || b == '\\');
  return special ? std::string{'\\', static_cast<char>(b)} : std::string(1, static_cast<char>(b));
}

std::string set_string(const byte_set& set) {
  const bool negate = set.count() > 128 && !set.all();
  const byte_set s = negate ? ~set : set;
  std::string out = negate ? "[^" : "[";
  for (int b = 0; b < 256;) {
    if (!s.test(static_cast<size_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.test(static_cast<size_t>(e + 1))) ++e;
    out += escape_byte(static_cast<uint8_t>(b), true);
    if (e > b + 1) out += '-';
    if (e > b) out += escape_byte(static_cast<uint8_t>(e), true);
    b = e + 1;
  }
  return out + "]";
}

bool single_byte(const node& n) { return n.kind == node::bytes && n.set.count() == 1; }

uint8_t the_byte(const byte_set& s) {
  for (int b = 0; b < 256; ++b)
    if (s.test(static_cast<size_t>(b))) return static_cast<uint8_t>(b);
  return 0;
}

// prec: 0 where alternatives may stand bare, 1 inside a sequence, 2 the
// operand of a repetition.
void print(const grammar& g, int32_t id, int prec, std::string& out) {
  const node& n = g.at(id);
  switch (n.kind) {
    case node::bytes:
      if (single_byte(n)) {
        out += '"' + escape_byte(the_byte(n.set), false) + '"';
      } else {
        out += set_string(n.set);
      }
      return;
    case node::seq: {
      std::vector<std::string> parts;
      for (size_t i = 0; i < n.items.size();) {
        if (single_byte(g.at(n.items[i]))) {
          std::string lit = "\"";
          for (; i < n.items.size() && single_byte(g.at(n.items[i])); ++i)
            lit += escape_byte(the_byte(g.at(n.items[i]).set), false);
          parts.push_back(lit + '"');
        } else {
          std::string part;
          print(g, n.items[i++], 1, part);
          parts.push_back(std::move(part));
        }
      }
      if (parts.empty()) parts.push_back("\"\"");
      const bool paren = prec >= 2 && parts.size() > 1;
      if (paren) out += '(';
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? " " : "") + parts[i];
      if (paren) out += ')';
      return;
    }
    case node::alt:
      if (prec >= 1) out += '(';
      for (size_t i = 0; i < n.items.size(); ++i) {
        if (i) out += " | ";
        print(g, n.items[i], 0, out);
      }
      if (prec >= 1) out += ')';
      return;
    case node::repeat:
      print(g, n.items[0], 2, out);
      if (n.min == 0 && n.max == -1) {
        out += '*';
      } else if (n.min == 1 && n.max == -1) {
        out += '+';
      } else if (n.min == 0 && n.max == 1) {
        out += '?';
      } else if (n.max == n.min) {
        out += '{' + std::to_string(n.min) + '}';
      } else {
        out += '{' + std::to_string(n.min) + ',' + (n.max < 0 ? "" : std::to_string(n.max)) + '}';
      }
      return;
    case node::rule_ref:
      out += g.rules().at(static_cast<size_t>(n.rule)).name;
      return;
  }
}

}  // namespace

int32_t grammar::add(node n) {
  for (int32_t item : n.items) TROUPE_CHECK(item >= 0 && static_cast<size_t>(item) < nodes_.size());
  nodes_.push_back(std::move(n));
  return static_cast<int32_t>(nodes_.size() - 1);
}

int32_t grammar::embed(const grammar& other) {
  TROUPE_CHECK(other.root_ >= 0);
  const auto node_base = static_cast<int32_t>(nodes_.size());
  const auto rule_base = static_cast<int32_t>(rules_.size());
  for (node n : other.nodes_) {
    for (int32_t& item : n.items) item += node_base;
    if (n.kind == node::rule_ref) n.rule += rule_base;
    nodes_.push_back(std::move(n));
  }
  for (const rule& r : other.rules_) rules_.push_back({r.name, r.body < 0 ? -1 : r.body + node_base});
  return other.root_ + rule_base;
}

int32_t grammar::bytes(const byte_set& s) {
  node n;
  n.kind = node::bytes;
  n.set = s;
  return add(std::move(n));
}

int32_t grammar::byte(uint8_t b) { return byte_range(b, b); }

int32_t grammar::byte_range(uint8_t lo, uint8_t hi) {
  TROUPE_CHECK(lo <= hi);
  return bytes(range_set(lo, hi));
}

int32_t grammar::literal(std::string_view text) {
  std::vector<int32_t> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(items));
}

int32_t grammar::seq(std::vector<int32_t> items) {
  if (items.size() == 1) {
    TROUPE_CHECK(items[0] >= 0 && static_cast<size_t>(items[0]) < nodes_.size());
    return items[0];
  }
  node n;
  n.kind = node::seq;
  n.items = std::move(items);
  return add(std::move(n));
}

int32_t grammar::alt(std::vector<int32_t> items) {
  if (items.empty()) return nothing();
  if (items.size() == 1) return seq(std::move(items));
  node n;
  n.kind = node::alt;
  n.items = std::move(items);
  return add(std::move(n));
}

int32_t grammar::repeat(int32_t item, int32_t min, int32_t max) {
  TROUPE_CHECK(min >= 0 && (max == -1 || max >= min));
  node n;
  n.kind = node::repeat;
  n.items = {item};
  n.min = min;
  n.max = max;
  return add(std::move(n));
}

int32_t grammar::ref(int32_t rule) {
  TROUPE_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size());
  node n;
  n.kind = node::rule_ref;
  n.rule = rule;
  return add(std::move(n));
}

int32_t grammar::codepoints(codepoint_ranges ranges) {
  for (auto& r : ranges) r.second = std::min(r.second, max_codepoint);
  std::erase_if(ranges, [](const auto& r) { return r.first > r.second; });
  std::sort(ranges.begin(), ranges.end());
  codepoint_ranges merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  trie t;
  for (const auto& [lo, hi] : merged) {
    if (hi < surrogate_lo || lo > surrogate_hi) {
      add_range(lo, hi, t);
      continue;
    }
    if (lo < surrogate_lo) add_range(lo, surrogate_lo - 1, t);
    if (hi > surrogate_hi) add_range(surrogate_hi + 1, hi, t);
  }
  merge_tails(t);
  return emit(*this, t);
}

int32_t grammar::add_rule(std::string name) {
  rules_.push_back(rule{std::move(name), -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

void grammar::set_body(int32_t rule, int32_t node) {
  TROUPE_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size());
  TROUPE_CHECK(node >= 0 && static_cast<size_t>(node) < nodes_.size());
  rules_[static_cast<size_t>(rule)].body = node;
}

int32_t grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

std::string grammar::to_string() const {
  std::string out;
  for (const rule& r : rules_) {
    out += r.name + " ::= ";
    if (r.body < 0) {
      out += "<undefined>";
    } else {
      print(*this, r.body, 0, out);
    }
    out += '\n';
  }
  return out;
}

bool decode_utf8(std::string_view text, std::vector<uint32_t>& out) {
  out.clear();
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, least;
    if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1Fu, least = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0Fu, least = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07u, least = 0x10000;
    } else {
      return false;  // a continuation byte or F8..FF
    }
    if (text.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    if (cp < least || cp > max_codepoint || (cp >= surrogate_lo && cp <= surrogate_hi)) return false;
    out.push_back(cp);
    i += len;
  }
  return true;
}

void append_utf8(uint32_t cp, std::string& out) {
  // Not a Unicode scalar value: written as U+FFFD, the replacement character.
  if (cp > max_codepoint || (cp >= surrogate_lo && cp <= surrogate_hi)) cp = 0xFFFD;
  uint8_t buf[4];
  const int n = utf8_length(cp);
  encode(cp, n, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace troupe::grammar
