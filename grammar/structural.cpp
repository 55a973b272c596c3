#include "grammar/structural.h"

#include <simdjson.h>

#include "common/json_writer.h"

namespace troupe::grammar {

std::string structural_to_json(const structural_spec& spec) {
  json_writer w;
  w.begin_object().key("prefix").value(spec.prefix).key("separator").value(spec.separator);
  w.key("suffix").value(spec.suffix).key("min_items").value(spec.min_items);
  w.key("max_items").value(spec.max_items).key("items").begin_array();
  for (const structural_item& item : spec.items) {
    w.begin_object().key("begin").value(item.begin).key("schema").value(item.schema);
    w.key("end").value(item.end).key("strict").value(item.strict).end_object();
  }
  w.end_array().end_object();
  return w.take();
}

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

bool read_string(object o, std::string_view key, std::string& out) {
  std::string_view s;
  if (o.at_key(key).get_string().get(s) != simdjson::SUCCESS) return false;
  out = std::string(s);
  return true;
}

bool read_int(object o, std::string_view key, int32_t& out) {
  int64_t v = 0;
  if (o.at_key(key).get_int64().get(v) != simdjson::SUCCESS) return false;
  if (v < -1 || v > (1 << 20)) return false;
  out = static_cast<int32_t>(v);
  return true;
}

}  // namespace

result<structural_spec> parse_structural(std::string_view json) {
  const simdjson::padded_string padded(json);
  simdjson::dom::parser parser;
  object o;
  if (parser.parse(padded).get_object().get(o) != simdjson::SUCCESS) {
    return make_error("structural: expected a JSON object");
  }
  structural_spec spec;
  simdjson::dom::array items;
  if (!read_string(o, "prefix", spec.prefix) || !read_string(o, "separator", spec.separator) ||
      !read_string(o, "suffix", spec.suffix) || !read_int(o, "min_items", spec.min_items) ||
      !read_int(o, "max_items", spec.max_items) ||
      o.at_key("items").get_array().get(items) != simdjson::SUCCESS) {
    return make_error("structural: expected prefix, separator, suffix, min_items, max_items and items");
  }
  for (element e : items) {
    object item;
    structural_item out;
    if (e.get_object().get(item) != simdjson::SUCCESS || !read_string(item, "begin", out.begin) ||
        !read_string(item, "schema", out.schema) || !read_string(item, "end", out.end) ||
        item.at_key("strict").get_bool().get(out.strict) != simdjson::SUCCESS) {
      return make_error("structural: each item needs begin, schema, end and strict");
    }
    spec.items.push_back(std::move(out));
  }
  if (spec.items.empty()) return make_error("structural: no items");
  if (spec.min_items < 1 || (spec.max_items != -1 && spec.max_items < spec.min_items)) {
    return make_error("structural: need 1 <= min_items <= max_items (or max_items -1)");
  }
  return spec;
}

result<grammar> structural_grammar(std::string_view json, const json_options& options) {
  auto spec = parse_structural(json);
  if (!spec) return std::move(spec).take_error();
  grammar g;
  std::vector<int32_t> alternatives;
  for (size_t i = 0; i < spec->items.size(); ++i) {
    const structural_item& item = spec->items[i];
    json_options item_options = options;
    item_options.strict = item.strict;
    item_options.compact_separators = false;  // without whitespace: json.dumps' ", " and ": "
    auto value = json_schema_grammar(item.schema, item_options);
    if (!value) return make_error("items[" + std::to_string(i) + "]: " + value.error_message());
    const int32_t value_rule = g.embed(*value);
    alternatives.push_back(g.seq({g.literal(item.begin), g.ref(value_rule), g.literal(item.end)}));
  }
  const int32_t item = g.add_rule("item", g.alt(std::move(alternatives)));
  const int32_t more_max = spec->max_items < 0 ? -1 : spec->max_items - 1;
  const int32_t more = g.repeat(g.seq({g.literal(spec->separator), g.ref(item)}), spec->min_items - 1, more_max);
  g.set_root(g.add_rule("root", g.seq({g.literal(spec->prefix), g.ref(item), more, g.literal(spec->suffix)})));
  return g;
}

}  // namespace troupe::grammar
