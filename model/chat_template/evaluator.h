// evaluator: walks the AST of one template for one render call.
//
// Scoping follows Jinja2: each for-loop iteration, macro call and with block
// gets a child scope (assignments inside do not leak out, reads fall through
// to the enclosing scopes at the time of the read); if blocks share their
// enclosing scope. Macros close over the scope they were defined in.
// One evaluator per render; it lives on the rendering thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/chat_template/ast.h"
#include "model/chat_template/runtime.h"

namespace troupe {

class scope {
 public:
  explicit scope(std::shared_ptr<scope> parent) : parent_(std::move(parent)) {}
  const value* find(std::string_view name) const;
  void set(const std::string& name, value v) { vars_.set(name, std::move(v)); }
  void clear() { vars_ = value_object(); }

 private:
  std::shared_ptr<scope> parent_;
  value_object vars_;
};
using scope_ptr = std::shared_ptr<scope>;

class evaluator {
 public:
  evaluator(render_state& state, std::string& out) : state_(state), out_(&out) { state_.eval = this; }
  // Releases the scopes holding macros and the natives made during the
  // render: a macro closes over the scope it is stored in, a cycle.
  ~evaluator();
  evaluator(const evaluator&) = delete;
  evaluator& operator=(const evaluator&) = delete;

  void render(const stmt_list& body, const scope_ptr& root);
  // Calls a macro (or a call block's caller) defined by `def`.
  value invoke_macro(const stmt& def, const std::string& name, const scope_ptr& closure,
                     const call_args& args);
  int line() const { return line_; }

 private:
  enum class flow { normal, break_, continue_ };

  flow exec_list(const stmt_list& body, const scope_ptr& s);
  flow exec(const stmt& st, const scope_ptr& s);
  flow exec_for(const stmt& st, const scope_ptr& s);
  void exec_call_block(const stmt& st, const scope_ptr& s);
  void bind_macro_args(const stmt& def, const std::string& name, const call_args& args, const scope_ptr& inner);
  void assign(const stmt& st, const value& v, const scope_ptr& s);
  void bind_targets(const std::vector<std::string>& targets, bool tuple_target, const value& v,
                    const scope_ptr& s);
  std::string capture(const stmt_list& body, const scope_ptr& s);
  value apply_filter_chain(const expr& filter, const scope_ptr& s, const value& subject);

  // Expressions (expr_eval.cpp).
  value eval(const expr& e, const scope_ptr& s);
  value eval_compare(const expr& e, const scope_ptr& s);
  value eval_call(const expr& e, const scope_ptr& s, const value* caller = nullptr);
  value eval_filter(const expr& e, const scope_ptr& s);
  value eval_test(const expr& e, const scope_ptr& s);
  value eval_getitem(const expr& e, const scope_ptr& s);
  value eval_collection(const expr& e, const scope_ptr& s);
  call_args eval_args(const expr& e, const scope_ptr& s, size_t first);

  render_state& state_;
  std::string* out_;
  int line_ = 1;
  int call_depth_ = 0;
  std::optional<value> block_subject_;
  std::vector<scope_ptr> macro_scopes_;  // the body text a filter block / set block filters
};

}  // namespace troupe
