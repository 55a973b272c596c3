// natives: the attribute objects templates see besides plain data — Jinja's
// LoopContext (`loop.index`, `loop.cycle(...)`, ...) and Namespace (the one
// mutable object, assigned through `{% set ns.attr = ... %}`).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "model/chat_template/runtime.h"

namespace troupe {

class loop_object : public value_native {
 public:
  explicit loop_object(value_array items)
      : items_(std::move(items)), last_changed_(std::make_shared<std::optional<value_array>>()) {}
  // REQUIRES: i < length; the evaluator moves it once per iteration.
  void set_index(size_t i) { index0_ = i; }

  value get_attr(std::string_view name) const override;
  std::string repr() const override;
  std::string type_name() const override { return "jinja2.runtime.LoopContext"; }
  bool truthy() const override { return !items_.empty(); }
  void release() override { items_.clear(); }
  std::optional<int64_t> length() const override { return static_cast<int64_t>(items_.size()); }

 private:
  value_array items_;
  size_t index0_ = 0;
  std::shared_ptr<std::optional<value_array>> last_changed_;  // loop.changed() memory
};

class namespace_object : public value_native {
 public:
  explicit namespace_object(value_object attrs) : attrs_(std::move(attrs)) {}

  value get_attr(std::string_view name) const override;
  bool set_attr(const std::string& name, value v) override;
  std::string repr() const override;
  std::string type_name() const override { return "jinja2.utils.Namespace"; }
  void release() override { attrs_ = value_object(); }

 private:
  value_object attrs_;
};

class iterator_object : public value_native {
 public:
  iterator_object(std::string type_name, value_array items) : type_(std::move(type_name)), items_(std::move(items)) {}
  // A generator whose body fails when first iterated (Python evaluates them lazily).
  iterator_object(std::string type_name, std::string error) : type_(std::move(type_name)), error_(std::move(error)) {}

  value get_attr(std::string_view name) const override;
  std::string repr() const override { return "<" + type_ + " object>"; }
  std::string type_name() const override { return type_; }
  void release() override { items_.clear(); }
  std::optional<value_array> iterate() override;
  bool iterable() const override { return true; }

 private:
  std::string type_;
  value_array items_;  // what has not been consumed yet
  std::optional<std::string> error_;
};

class dict_view_object : public value_native {
 public:
  dict_view_object(std::string type_name, value_array items) : type_(std::move(type_name)), items_(std::move(items)) {}

  value get_attr(std::string_view name) const override;
  std::string repr() const override { return type_ + "(" + to_repr(value(items_)) + ")"; }
  std::string type_name() const override { return type_; }
  bool truthy() const override { return !items_.empty(); }
  void release() override { items_.clear(); }
  std::optional<value_array> iterate() override { return items_; }
  bool iterable() const override { return true; }
  std::optional<int64_t> length() const override { return static_cast<int64_t>(items_.size()); }

 private:
  std::string type_;
  value_array items_;
};

}  // namespace troupe
