// natives: the attribute objects templates see besides plain data — Jinja's
// LoopContext (`loop.index`, `loop.cycle(...)`, ...) and Namespace (the one
// mutable object, assigned through `{% set ns.attr = ... %}`).
#pragma once

#include <memory>
#include <string>

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

}  // namespace troupe
