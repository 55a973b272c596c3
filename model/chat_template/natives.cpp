#include "model/chat_template/natives.h"

namespace troupe {

value loop_object::get_attr(std::string_view name) const {
  int64_t length = static_cast<int64_t>(items_.size());
  int64_t i = static_cast<int64_t>(index0_);
  if (name == "index") return i + 1;
  if (name == "index0") return i;
  if (name == "revindex") return length - i;
  if (name == "revindex0") return length - i - 1;
  if (name == "first") return i == 0;
  if (name == "last") return i == length - 1;
  if (name == "length") return length;
  if (name == "depth") return 1;
  if (name == "depth0") return 0;
  if (name == "previtem") {
    return i > 0 ? items_[index0_ - 1] : value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < length ? items_[index0_ + 1] : value::undefined("there is no next item");
  }
  if (name == "cycle") {
    return make_function("cycle", [i](const call_args& args, render_state&) {
      if (args.positional.empty()) fail("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    });
  }
  if (name == "changed") {
    auto memory = last_changed_;
    return make_function("changed", [memory](const call_args& args, render_state&) {
      value_array current = args.positional;
      if (memory->has_value() && values_equal(value(**memory, true), value(current, true))) return value(false);
      *memory = std::move(current);
      return value(true);
    });
  }
  return value::undefined("'" + type_name() + " object' has no attribute '" + std::string(name) + "'");
}

std::string loop_object::repr() const {
  return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_.size()) + ">";
}

value namespace_object::get_attr(std::string_view name) const {
  if (const value* v = attrs_.find(name)) return *v;
  return value::undefined("'" + type_name() + " object' has no attribute '" + std::string(name) + "'");
}

bool namespace_object::set_attr(const std::string& name, value v) {
  attrs_.set(name, std::move(v));
  return true;
}

std::string namespace_object::repr() const { return "<Namespace " + to_repr(value(attrs_)) + ">"; }

value iterator_object::get_attr(std::string_view name) const {
  return value::undefined("'" + type_ + " object' has no attribute '" + std::string(name) + "'");
}

std::optional<value_array> iterator_object::iterate() {
  if (error_) fail(*std::exchange(error_, std::nullopt));
  return std::exchange(items_, value_array{});
}

value dict_view_object::get_attr(std::string_view name) const {
  return value::undefined("'" + type_ + " object' has no attribute '" + std::string(name) + "'");
}

value make_iterator(std::string type_name, value_array items) {
  return value(std::shared_ptr<value_native>(std::make_shared<iterator_object>(std::move(type_name), std::move(items))));
}

value make_failing_iterator(std::string type_name, std::string error) {
  return value(std::shared_ptr<value_native>(std::make_shared<iterator_object>(std::move(type_name), std::move(error))));
}

value make_dict_view(std::string type_name, value_array items) {
  return value(std::shared_ptr<value_native>(std::make_shared<dict_view_object>(std::move(type_name), std::move(items))));
}

}  // namespace troupe
