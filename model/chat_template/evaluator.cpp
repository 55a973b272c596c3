// Statement execution: output, if, for (with loop, filter, else,
// break/continue), set (plain, tuple, namespace attribute, block), macros,
// call blocks, filter blocks and with blocks.
#include "model/chat_template/evaluator.h"

#include "model/chat_template/natives.h"

namespace troupe {
namespace {

constexpr int kMaxCallDepth = 100;

class macro_function : public value_function {
 public:
  macro_function(const stmt& def, std::string name, scope_ptr closure)
      : def_(def), name_(std::move(name)), closure_(std::move(closure)) {}
  value call(const call_args& args, render_state& state) const override {
    return state.eval->invoke_macro(def_, name_, closure_, args);
  }
  std::string name() const override { return name_; }

 private:
  const stmt& def_;
  std::string name_;
  scope_ptr closure_;
};

// Restores the output target when a capture ends, also on errors.
class output_guard {
 public:
  output_guard(std::string*& target, std::string* replacement) : target_(target), saved_(target) {
    target_ = replacement;
  }
  ~output_guard() { target_ = saved_; }

 private:
  std::string*& target_;
  std::string* saved_;
};

}  // namespace

const value* scope::find(std::string_view name) const {
  for (const scope* s = this; s; s = s->parent_.get()) {
    if (const value* v = s->vars_.find(name)) return v;
  }
  return nullptr;
}

evaluator::~evaluator() {
  for (const scope_ptr& s : macro_scopes_) s->clear();
  for (const auto& native : state_.natives) native->release();
}

void evaluator::render(const stmt_list& body, const scope_ptr& root) { exec_list(body, root); }

evaluator::flow evaluator::exec_list(const stmt_list& body, const scope_ptr& s) {
  for (const stmt_ptr& st : body) {
    flow f = exec(*st, s);
    if (f != flow::normal) return f;
  }
  return flow::normal;
}

evaluator::flow evaluator::exec(const stmt& st, const scope_ptr& s) {
  line_ = st.line;
  switch (st.kind) {
    case stmt_kind::text: out_->append(st.text); break;
    case stmt_kind::output: out_->append(to_display_string(eval(*st.expr, s))); break;
    case stmt_kind::if_:
      for (const auto& [test, body] : st.branches) {
        if (eval(*test, s).truthy()) return exec_list(body, s);
      }
      return exec_list(st.else_body, s);
    case stmt_kind::for_: return exec_for(st, s);
    case stmt_kind::set: assign(st, eval(*st.expr, s), s); break;
    case stmt_kind::set_block: {
      value text(capture(st.body, s));
      assign(st, st.filter ? apply_filter_chain(*st.filter, s, text) : text, s);
      break;
    }
    case stmt_kind::macro:
      s->set(st.name, value(std::shared_ptr<const value_function>(std::make_shared<macro_function>(st, st.name, s))));
      macro_scopes_.push_back(s);
      break;
    case stmt_kind::call_block: exec_call_block(st, s); break;
    case stmt_kind::filter_block:
      out_->append(to_display_string(apply_filter_chain(*st.filter, s, value(capture(st.body, s)))));
      break;
    case stmt_kind::with: {
      auto inner = std::make_shared<scope>(s);
      for (const auto& [name, e] : st.params) inner->set(name, eval(*e, s));
      return exec_list(st.body, inner);
    }
    case stmt_kind::break_: return flow::break_;
    case stmt_kind::continue_: return flow::continue_;
    case stmt_kind::scope: return exec_list(st.body, s);
  }
  return flow::normal;
}

evaluator::flow evaluator::exec_for(const stmt& st, const scope_ptr& s) {
  value_array items = iterate(eval(*st.expr, s));
  if (st.cond) {
    value_array kept;
    for (const value& item : items) {
      auto probe = std::make_shared<scope>(s);
      bind_targets(st.targets, st.tuple_target, item, probe);
      if (eval(*st.cond, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<loop_object>(items);
  value loop_value{std::shared_ptr<value_native>(loop)};
  // Jinja runs the else block unless some iteration reached the end of the
  // body: an iteration left by break or continue does not count.
  bool completed_any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    auto body_scope = std::make_shared<scope>(s);
    bind_targets(st.targets, st.tuple_target, items[i], body_scope);
    loop->set_index(i);
    body_scope->set("loop", loop_value);
    flow f = exec_list(st.body, body_scope);
    if (f == flow::break_) break;
    if (f == flow::normal) completed_any = true;
  }
  return completed_any ? flow::normal : exec_list(st.else_body, s);
}

void evaluator::bind_targets(const std::vector<std::string>& targets, bool tuple_target, const value& v,
                             const scope_ptr& s) {
  if (!tuple_target) {
    s->set(targets[0], v);
    return;
  }
  value_array parts = iterate(v);
  if (parts.size() != targets.size()) {
    if (parts.size() > targets.size()) {
      fail("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    fail("not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
         std::to_string(parts.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) s->set(targets[i], parts[i]);
}

void evaluator::assign(const stmt& st, const value& v, const scope_ptr& s) {
  if (st.ns_object.empty()) {
    bind_targets(st.targets, st.tuple_target, v, s);
    return;
  }
  const value* ns = s->find(st.ns_object);
  if (!ns || !ns->is_native() || !ns->as_native()->set_attr(st.name, v)) {
    fail("cannot assign attribute on non-namespace object");
  }
}

std::string evaluator::capture(const stmt_list& body, const scope_ptr& s) {
  std::string buffer;
  output_guard guard(out_, &buffer);
  exec_list(body, s);
  return buffer;
}

value evaluator::apply_filter_chain(const expr& filter, const scope_ptr& s, const value& subject) {
  std::optional<value> saved = std::move(block_subject_);
  block_subject_ = subject;
  value result = eval(filter, s);
  block_subject_ = std::move(saved);
  return result;
}

void evaluator::exec_call_block(const stmt& st, const scope_ptr& s) {
  value caller(std::shared_ptr<const value_function>(std::make_shared<macro_function>(st, "caller", s)));
  out_->append(to_display_string(eval_call(*st.expr, s, &caller)));
}

// Binds arguments as jinja2.runtime.Macro.__call__ does: positionals, then
// keywords by name, then defaults (evaluated in the macro's scope, so they
// may read earlier parameters); extras only when the body reads
// varargs / kwargs.
void evaluator::bind_macro_args(const stmt& def, const std::string& name, const call_args& args,
                                const scope_ptr& inner) {
  size_t count = def.params.size();
  std::vector<bool> bound(count, false);
  for (size_t i = 0; i < args.positional.size() && i < count; ++i) {
    inner->set(def.params[i].first, args.positional[i]);
    bound[i] = true;
  }
  value_object kwargs;
  bool has_caller = false;
  for (const auto& [key, v] : args.named) {
    size_t i = 0;
    while (i < count && def.params[i].first != key) ++i;
    if (i < count && !bound[i]) {
      inner->set(key, v);
      bound[i] = true;
    } else if (key == "caller" && def.catch_caller) {
      inner->set("caller", v);
      has_caller = true;
    } else if (def.catch_kwargs) {
      kwargs.set(key, v);
    } else {
      fail("macro '" + name + "' takes no keyword argument '" + key + "'");
    }
  }
  if (args.positional.size() > count && !def.catch_varargs) {
    fail("macro '" + name + "' takes not more than " + std::to_string(count) + " argument(s)");
  }
  if (def.catch_caller && !has_caller) inner->set("caller", value::undefined("No caller defined"));
  for (size_t i = 0; i < count; ++i) {
    if (bound[i]) continue;
    const auto& [param, fallback] = def.params[i];
    inner->set(param, fallback ? eval(*fallback, inner)
                               : value::undefined("parameter '" + param + "' was not provided"));
  }
  value_array varargs;
  for (size_t i = count; i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  inner->set("varargs", value(std::move(varargs), true));
  inner->set("kwargs", value(std::move(kwargs)));
}

value evaluator::invoke_macro(const stmt& def, const std::string& name, const scope_ptr& closure,
                              const call_args& args) {
  if (call_depth_ >= kMaxCallDepth) fail("maximum macro recursion depth exceeded");
  auto inner = std::make_shared<scope>(closure);
  bind_macro_args(def, name, args, inner);
  ++call_depth_;
  int saved_line = line_;
  std::string text = capture(def.body, inner);
  --call_depth_;
  line_ = saved_line;
  return text;
}

}  // namespace troupe
