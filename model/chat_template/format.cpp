// Python string formatting used by templates: `"%s" % x` (and the format
// filter) and str.format(). The common conversions are covered (s r d i f e
// g x o c with flags, width and precision); anything else is an error rather
// than a silently different string.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "model/chat_template/runtime.h"
#include "model/chat_template/unicode.h"

namespace troupe {

std::string str_format(const std::string& format, const call_args& args);

namespace {

std::string pad(const std::string& text, size_t width, char align, const std::string& fill) {
  size_t len = unicode::length(text);
  if (width <= len) return text;
  size_t total = width - len, left = align == '<' ? 0 : align == '^' ? total / 2 : total;
  std::string out;
  for (size_t i = 0; i < left; ++i) out += fill;
  out += text;
  for (size_t i = left; i < total; ++i) out += fill;
  return out;
}

std::string c_format(const std::string& spec, const value& v, char conv) {
  char buf[512];
  if (conv == 'd' || conv == 'x' || conv == 'X' || conv == 'o') {
    std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), static_cast<long long>(v.as_int()));
  } else {
    std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
  }
  return buf;
}

std::string percent_one(const value& v, const std::string& flags, const std::string& width,
                        const std::string& precision, char conv) {
  if (conv == 's' || conv == 'r' || conv == 'a') {
    std::string text = conv == 's' ? to_display_string(v) : to_repr(v);
    if (!precision.empty()) {
      std::vector<size_t> offsets = unicode::code_point_offsets(text);
      size_t keep = std::min(offsets.size() - 1, static_cast<size_t>(std::stoul(precision)));
      text = text.substr(0, offsets[keep]);
    }
    size_t w = width.empty() ? 0 : std::stoul(width);
    return pad(text, w, flags.find('-') != std::string::npos ? '<' : '>', " ");
  }
  if (conv == 'c') return v.is_string() ? v.as_string() : [&] { std::string s; unicode::append_utf8(s, static_cast<uint32_t>(v.as_int())); return s; }();
  std::string spec = "%" + flags + width + (precision.empty() ? "" : "." + precision);
  if (!v.is_number()) {
    fail(std::string("%") + conv + " format: a real number is required, not " + python_type_name(v));
  }
  if (conv == 'i' || conv == 'u') conv = 'd';
  if ((conv == 'x' || conv == 'X' || conv == 'o') && v.is_float()) {
    fail(std::string("%") + conv + " format: an integer is required, not float");
  }
  if (std::string("dxXofFeEgG").find(conv) == std::string::npos) {
    fail(std::string("unsupported format character '") + conv + "'");
  }
  return c_format(spec, v, conv);
}

}  // namespace

std::string percent_format(const std::string& format, const value& args) {
  value_array list = args.is_tuple() ? args.as_array() : value_array{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    if (format[i] == '(') fail("%(name) formats are not supported");
    size_t start = i;
    while (i < format.size() && std::string("-+ 0#").find(format[i]) != std::string::npos) ++i;
    std::string flags = format.substr(start, i - start);
    start = i;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) ++i;
    std::string width = format.substr(start, i - start), precision;
    if (i < format.size() && format[i] == '.') {
      start = ++i;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) ++i;
      precision = format.substr(start, i - start);
      if (precision.empty()) precision = "0";
    }
    if (i >= format.size()) fail("incomplete format");
    if (next >= list.size()) fail("not enough arguments for format string");
    out += percent_one(list[next++], flags, width, precision, format[i]);
  }
  // A lone mapping argument (Undefined counts: it has __getitem__) is not
  // "unconverted".
  if (next < list.size() && (args.is_tuple() || next == 0) && !args.is_object() && !args.is_undefined()) {
    fail("not all arguments converted during string formatting");
  }
  return out;
}

namespace {

// format(v, spec) for the common [[fill]align][sign][0][width][.precision][type].
std::string apply_format_spec(const value& v, const std::string& spec) {
  if (spec.empty()) return to_display_string(v);
  size_t i = 0;
  std::string fill = " ";
  char align = v.is_number() ? '>' : '<';
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^'; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec.substr(0, 1);
    align = spec[1];
    i = 2;
  } else if (is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  std::string sign;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec.substr(i++, 1);
  if (i < spec.size() && spec[i] == '0') {
    fill = "0";
    align = '>';
    ++i;
  }
  size_t start = i;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) ++i;
  size_t width = i > start ? std::stoul(spec.substr(start, i - start)) : 0;
  std::string precision;
  if (i < spec.size() && spec[i] == '.') {
    start = ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) ++i;
    precision = spec.substr(start, i - start);
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) fail("unsupported format spec '" + spec + "'");
  std::string text;
  if (type == 0 || type == 's') {
    text = to_display_string(v);
    if (!precision.empty() && v.is_string()) text = percent_one(v, "", "", precision, 's');
  } else {
    text = percent_one(v, sign == "-" ? "" : sign, "", precision.empty() && type != 'd' ? "6" : precision,
                       type);
  }
  return pad(text, width, align, fill);
}

value resolve_field(const std::string& field, const call_args& args, size_t& auto_index) {
  size_t end = field.find_first_of(".[");
  std::string head = field.substr(0, end);
  value v;
  if (head.empty() || std::isdigit(static_cast<unsigned char>(head[0]))) {
    size_t index = head.empty() ? auto_index++ : std::stoul(head);
    if (index >= args.positional.size()) fail("Replacement index " + std::to_string(index) + " out of range");
    v = args.positional[index];
  } else {
    bool found = false;
    for (const auto& [k, item] : args.named) {
      if (k == head) {
        v = item;
        found = true;
      }
    }
    if (!found) fail("KeyError: '" + head + "'");
  }
  while (end != std::string::npos && end < field.size()) {
    if (field[end] == '.') {
      size_t next = field.find_first_of(".[", end + 1);
      v = get_attribute(v, field.substr(end + 1, next - end - 1));
      end = next;
    } else {
      size_t close = field.find(']', end);
      if (close == std::string::npos) fail("Missing ']' in format string");
      std::string key = field.substr(end + 1, close - end - 1);
      bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
      v = get_item(v, digits ? value(static_cast<int64_t>(std::stoll(key))) : value(key));
      end = close + 1 < field.size() ? close + 1 : std::string::npos;
    }
  }
  return v;
}

}  // namespace

std::string str_format(const std::string& format, const call_args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else fail("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1), spec;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    char conv = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    value v = resolve_field(field, args, auto_index);
    if (conv == 'r' || conv == 'a') v = value(to_repr(v));
    else if (conv == 's') v = value(to_display_string(v));
    out += apply_format_spec(v, spec);
    i = close;
  }
  return out;
}

}  // namespace troupe
