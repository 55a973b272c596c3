// ast: the parsed form of a template, mirroring Jinja2's nodes. Built once
// by the parser and never modified; evaluation only reads it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/chat_template/value.h"

namespace troupe {

enum class expr_kind {
  literal,    // literal
  name,       // name
  list,       // args: items
  tuple,      // args: items
  dict,       // args: key, value, key, value, ...
  getattr,    // args[0] object, name: attribute
  getitem,    // args[0] object, args[1] key (possibly a slice)
  slice,      // args: start, stop, step (each may be null)
  not_,       // args[0]
  neg,        // args[0]
  pos,        // args[0]
  binary,     // op, args[0], args[1]: + - * / // % ** in "not in"
  concat,     // args: operands of ~
  and_,       // args[0], args[1]
  or_,        // args[0], args[1]
  compare,    // args[0] op[0] args[1] op[1] args[2] ...
  cond,       // args: test, then, else (else may be null)
  call,       // args[0] callee, args[1..] positional, kwargs
  filter,     // name, args[0] subject (null in a filter block), args[1..], kwargs
  test,       // name, args[0] subject, args[1..], kwargs, negated
};

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
  expr_kind kind = expr_kind::literal;
  int line = 1;
  value literal;
  std::string name;
  std::vector<std::string> ops;  // binary: one operator; compare: one per operand after the first
  std::vector<expr_ptr> args;
  std::vector<std::pair<std::string, expr_ptr>> kwargs;
  bool negated = false;
};

enum class stmt_kind {
  text,          // text
  output,        // expr
  if_,           // branches, else_body
  for_,          // targets, expr (iterable), cond (filter), body, else_body
  set,           // targets (or ns_object + name), expr
  set_block,     // targets (or ns_object + name), body, filter (optional)
  macro,         // name, params, body
  call_block,    // expr (the call), params (caller's), body
  filter_block,  // filter (chain with null innermost subject), body
  with,          // params (assignments), body
  break_,
  continue_,
  scope,         // body rendered in place (generation blocks)
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using stmt_list = std::vector<stmt_ptr>;

struct stmt {
  stmt_kind kind = stmt_kind::text;
  int line = 1;
  std::string text;
  std::string name;
  std::string ns_object;  // set ns.attr: the namespace variable (attribute in name)
  expr_ptr expr;
  expr_ptr cond;
  expr_ptr filter;
  std::vector<std::string> targets;
  bool tuple_target = false;
  std::vector<std::pair<expr_ptr, stmt_list>> branches;
  std::vector<std::pair<std::string, expr_ptr>> params;  // default may be null
  stmt_list body;
  stmt_list else_body;
  // Macros and call blocks: whether the body reads varargs / kwargs / caller
  // (Jinja then accepts extra positional / keyword arguments / a caller).
  bool catch_varargs = false;
  bool catch_kwargs = false;
  bool catch_caller = false;
};

// Whether `name` is read anywhere in the statements (nested blocks included).
bool references_name(const stmt_list& body, std::string_view name);

}  // namespace troupe
