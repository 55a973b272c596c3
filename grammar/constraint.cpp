#include "grammar/constraint_cache.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include "grammar/compiled.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/structural.h"

namespace troupe {

const char* constraint_kind_name(int32_t kind) {
  switch (kind) {
    case output_constraint::json_schema: return "json_schema";
    case output_constraint::json_object: return "json_object";
    case output_constraint::regex: return "regex";
    case output_constraint::choice: return "choice";
    case output_constraint::ebnf: return "grammar";
    case output_constraint::structural: return "structural";
    default: return "none";
  }
}

namespace grammar {
namespace {

std::string cache_key(const output_constraint& c) {
  std::string key = std::to_string(c.kind) + (c.any_whitespace ? "w" : "c") + (c.strict ? "s" : "l");
  key += std::to_string(c.text.size()) + ':' + c.text;
  for (const std::string& s : c.choices) key += std::to_string(s.size()) + ':' + s;
  return key;
}

result<grammar> grammar_of(const output_constraint& c) {
  json_options options;
  options.any_whitespace = c.any_whitespace;
  options.strict = c.strict;
  switch (c.kind) {
    case output_constraint::json_schema: return json_schema_grammar(c.text, options);
    case output_constraint::json_object: return json_object_grammar(options);
    case output_constraint::regex: return regex_grammar(c.text);
    case output_constraint::ebnf: return parse_ebnf(c.text);
    case output_constraint::structural: return structural_grammar(c.text, options);
    case output_constraint::choice: {
      if (c.choices.empty()) return make_error("choice: the list of choices is empty");
      grammar g;
      std::vector<int32_t> options_nodes;
      for (const std::string& s : c.choices) options_nodes.push_back(g.literal(s));
      g.set_root(g.add_rule("root", g.alt(std::move(options_nodes))));
      return g;
    }
    default: return make_error("no constraint");
  }
}

// A small most-recently-used cache.
template <class V>
class lru {
 public:
  explicit lru(size_t capacity) : capacity_(capacity) {}
  const V* find(const std::string& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }
  void put(const std::string& key, V value) {
    if (find(key) != nullptr) return;
    order_.emplace_front(key, std::move(value));
    map_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      map_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  size_t capacity_;
  std::list<std::pair<std::string, V>> order_;
  std::unordered_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> map_;
};

}  // namespace

result<std::shared_ptr<const compiled_grammar>> compile_constraint(const output_constraint& c) {
  using entry = result<std::shared_ptr<const compiled_grammar>>;
  static std::mutex mu;
  static lru<entry> cache(256);
  const std::string key = cache_key(c);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const entry* e = cache.find(key)) return *e;
  }
  entry compiled = [&]() -> entry {
    result<grammar> g = grammar_of(c);
    if (!g) return std::move(g).take_error();
    return compiled_grammar::compile(*g);
  }();
  std::lock_guard<std::mutex> lock(mu);
  cache.put(key, compiled);
  return compiled;
}

result<std::shared_ptr<const token_grammar>> token_grammar_for(
    const output_constraint& c, const std::shared_ptr<const token_vocabulary>& vocab) {
  static std::mutex mu;
  static lru<std::shared_ptr<const token_grammar>> cache(64);
  const std::string key = std::to_string(reinterpret_cast<uintptr_t>(vocab.get())) + '/' + cache_key(c);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto* e = cache.find(key)) return *e;
  }
  auto compiled = compile_constraint(c);
  if (!compiled) return std::move(compiled).take_error();
  auto tg = std::make_shared<const token_grammar>(*compiled, vocab);
  std::lock_guard<std::mutex> lock(mu);
  cache.put(key, tg);
  return std::shared_ptr<const token_grammar>(tg);
}

}  // namespace grammar
}  // namespace troupe
