// Expression evaluation over the AST (Jinja2 semantics: and/or return an
// operand, comparisons chain, a missing else gives undefined, calls reach
// builtins, bound methods and macros).
#include "model/chat_template/evaluator.h"

namespace troupe {

value evaluator::eval(const expr& e, const scope_ptr& s) {
  line_ = e.line;
  switch (e.kind) {
    case expr_kind::literal: return e.literal;
    case expr_kind::name: {
      const value* v = s->find(e.name);
      return v ? *v : value::undefined("'" + e.name + "' is undefined");
    }
    case expr_kind::list:
    case expr_kind::tuple:
    case expr_kind::dict: return eval_collection(e, s);
    case expr_kind::getattr: return get_attribute(eval(*e.args[0], s), e.name);
    case expr_kind::getitem: return eval_getitem(e, s);
    case expr_kind::slice: fail("slice outside of a subscript");
    case expr_kind::not_: return !eval(*e.args[0], s).truthy();
    case expr_kind::neg: return negate_value(eval(*e.args[0], s));
    case expr_kind::pos: {
      value v = eval(*e.args[0], s);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) fail("bad operand type for unary +: '" + python_type_name(v) + "'");
      return v.is_bool() ? value(v.as_int()) : v;
    }
    case expr_kind::binary: {
      value a = eval(*e.args[0], s);
      value b = eval(*e.args[1], s);
      line_ = e.line;
      return binary_arith(e.ops[0], a, b);
    }
    case expr_kind::concat: {
      std::string out;
      for (const expr_ptr& part : e.args) out += to_display_string(eval(*part, s));
      return out;
    }
    case expr_kind::and_: {
      value a = eval(*e.args[0], s);
      return a.truthy() ? eval(*e.args[1], s) : a;
    }
    case expr_kind::or_: {
      value a = eval(*e.args[0], s);
      return a.truthy() ? a : eval(*e.args[1], s);
    }
    case expr_kind::compare: return eval_compare(e, s);
    case expr_kind::cond:
      if (eval(*e.args[0], s).truthy()) return eval(*e.args[1], s);
      if (e.args[2]) return eval(*e.args[2], s);
      return value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case expr_kind::call: return eval_call(e, s);
    case expr_kind::filter: return eval_filter(e, s);
    case expr_kind::test: return eval_test(e, s);
  }
  fail("unknown expression");
}

value evaluator::eval_collection(const expr& e, const scope_ptr& s) {
  if (e.kind != expr_kind::dict) {
    value_array items;
    for (const expr_ptr& item : e.args) items.push_back(eval(*item, s));
    return value(std::move(items), e.kind == expr_kind::tuple);
  }
  value_object fields;
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    value key = eval(*e.args[i], s);
    if (!key.is_string()) fail("dict keys must be strings in chat templates, got " + python_type_name(key));
    fields.set(key.as_string(), eval(*e.args[i + 1], s));
  }
  return value(std::move(fields));
}

value evaluator::eval_getitem(const expr& e, const scope_ptr& s) {
  value obj = eval(*e.args[0], s);
  const expr& key = *e.args[1];
  if (key.kind != expr_kind::slice) return get_item(obj, eval(key, s));
  auto bound = [&](size_t i) { return key.args[i] ? eval(*key.args[i], s) : value::none(); };
  value start = bound(0), stop = bound(1), step = bound(2);
  return slice_value(obj, start, stop, step);
}

value evaluator::eval_compare(const expr& e, const scope_ptr& s) {
  value left = eval(*e.args[0], s);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    value right = eval(*e.args[i + 1], s);
    line_ = e.line;
    if (!compare_values(e.ops[i], left, right)) return false;
    left = std::move(right);
  }
  return true;
}

call_args evaluator::eval_args(const expr& e, const scope_ptr& s, size_t first) {
  call_args args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], s));
  for (const auto& [name, v] : e.kwargs) args.named.emplace_back(name, eval(*v, s));
  return args;
}

value evaluator::eval_call(const expr& e, const scope_ptr& s, const value* caller) {
  value callee = eval(*e.args[0], s);
  call_args args = eval_args(e, s, 1);
  if (caller) args.named.emplace_back("caller", *caller);
  line_ = e.line;
  if (callee.is_function()) return callee.as_function()->call(args, state_);
  if (callee.is_undefined()) fail_undefined(callee);
  fail("'" + python_type_name(callee) + "' object is not callable");
}

value evaluator::eval_filter(const expr& e, const scope_ptr& s) {
  value subject;
  if (e.args[0]) {
    subject = eval(*e.args[0], s);
  } else {
    TROUPE_CHECK(block_subject_.has_value());
    subject = *block_subject_;
  }
  call_args args = eval_args(e, s, 1);
  line_ = e.line;
  filter_fn f = find_filter(e.name);
  TROUPE_CHECK(f != nullptr);  // the parser rejects unknown filters
  return f(subject, args, state_);
}

value evaluator::eval_test(const expr& e, const scope_ptr& s) {
  value subject = eval(*e.args[0], s);
  call_args args = eval_args(e, s, 1);
  line_ = e.line;
  test_fn t = find_test(e.name);
  TROUPE_CHECK(t != nullptr);  // the parser rejects unknown tests
  return t(subject, args, state_) != e.negated;
}

}  // namespace troupe
