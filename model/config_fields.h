// config_fields: typed reads of config.json's fields (model_config.cpp,
// quantization.cpp), every error naming the file and the key.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace troupe::config_fields {

using simdjson::dom::element;
using simdjson::dom::object;

// Evaluates expr (a result<T>); on error returns it from the enclosing
// function, else binds its value to var.
#define MODEL_CONFIG_TRY(var, expr)                                  \
  auto var##_result = (expr);                                        \
  if (!var##_result) return std::move(var##_result).take_error();    \
  auto var = std::move(var##_result).value()

// Typed access to the fields of one JSON object. Absent and null fields
// read as std::nullopt; a field of the wrong type is an error naming
// `source: 'prefix.key'`.
class field_reader {
 public:
  field_reader(object obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  std::optional<element> get(std::string_view key) const {
    element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
    return e;
  }

  result<std::optional<int64_t>> get_int(std::string_view key) const {
    auto e = get(key);
    if (!e) return std::optional<int64_t>{};
    int64_t v = 0;
    if (e->get_int64().get(v) != simdjson::SUCCESS) return fail(quoted(key) + " must be an integer");
    return std::optional<int64_t>{v};
  }

  result<std::optional<double>> get_number(std::string_view key) const {
    auto e = get(key);
    if (!e) return std::optional<double>{};
    double v = 0;
    if (e->get_double().get(v) != simdjson::SUCCESS) return fail(quoted(key) + " must be a number");
    return std::optional<double>{v};
  }

  result<std::optional<bool>> get_bool(std::string_view key) const {
    auto e = get(key);
    if (!e) return std::optional<bool>{};
    bool v = false;
    if (e->get_bool().get(v) != simdjson::SUCCESS) return fail(quoted(key) + " must be true or false");
    return std::optional<bool>{v};
  }

  result<std::optional<std::string>> get_string(std::string_view key) const {
    auto e = get(key);
    if (!e) return std::optional<std::string>{};
    std::string_view v;
    if (e->get_string().get(v) != simdjson::SUCCESS) return fail(quoted(key) + " must be a string");
    return std::optional<std::string>{std::string(v)};
  }

  result<std::optional<std::vector<int64_t>>> get_ints(std::string_view key) const {
    auto e = get(key);
    if (!e) return std::optional<std::vector<int64_t>>{};
    std::vector<int64_t> out;
    simdjson::dom::array a;
    if (e->get_array().get(a) != simdjson::SUCCESS) return fail(quoted(key) + " must be a list of integers");
    for (element x : a) {
      int64_t v = 0;
      if (x.get_int64().get(v) != simdjson::SUCCESS) return fail(quoted(key) + " must be a list of integers");
      out.push_back(v);
    }
    return std::optional<std::vector<int64_t>>{std::move(out)};
  }

  // A required integer > 0.
  result<int64_t> require_positive_int(std::string_view key) const {
    MODEL_CONFIG_TRY(v, get_int(key));
    if (!v) return fail("missing " + quoted(key));
    if (*v <= 0) return fail(quoted(key) + " must be positive");
    return *v;
  }

  // A required number (integer or float).
  result<double> require_number(std::string_view key) const {
    MODEL_CONFIG_TRY(v, get_number(key));
    if (!v) return fail("missing " + quoted(key));
    return *v;
  }

  std::string quoted(std::string_view key) const {
    return "'" + prefix_ + std::string(key) + "'";
  }
  error fail(const std::string& what) const { return make_error(source_ + ": " + what); }
  const std::string& source() const { return source_; }

 private:
  object obj_;
  std::string source_;
  std::string prefix_;
};

}  // namespace troupe::config_fields
