// Expression parsing, one method per Jinja2 parser.py rule, same precedence:
// condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary,
// where unary includes postfix access, calls, filters and `is` tests.
#include <algorithm>

#include "model/chat_template/parser.h"
#include "model/chat_template/runtime.h"

namespace troupe {
namespace {

constexpr int kMaxDepth = 200;

expr_ptr make(expr_kind kind, int line) {
  auto e = std::make_unique<expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

expr_ptr make2(expr_kind kind, int line, expr_ptr a, expr_ptr b) {
  expr_ptr e = make(kind, line);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

}  // namespace

expr_ptr parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

expr_ptr parser::parse_tuple(bool simplified, bool with_condexpr, const names& extra_end,
                             bool explicit_parens) {
  int line = current().line;
  std::vector<expr_ptr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail("Expected an expression, got '" + describe_token(current()) + "'");
  }
  expr_ptr t = make(expr_kind::tuple, line);
  t->args = std::move(args);
  return t;
}

expr_ptr parser::parse_condexpr() {
  int line = current().line;
  expr_ptr expr1 = parse_or();
  while (skip_name("if")) {
    expr_ptr node = make(expr_kind::cond, line);
    node->args.push_back(parse_or());
    node->args.push_back(std::move(expr1));
    node->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
    expr1 = std::move(node);
    line = current().line;
  }
  return expr1;
}

expr_ptr parser::parse_or() {
  expr_ptr left = parse_and();
  while (is_name("or")) {
    int line = next().line;
    left = make2(expr_kind::or_, line, std::move(left), parse_and());
  }
  return left;
}

expr_ptr parser::parse_and() {
  expr_ptr left = parse_not();
  while (is_name("and")) {
    int line = next().line;
    left = make2(expr_kind::and_, line, std::move(left), parse_not());
  }
  return left;
}

expr_ptr parser::parse_not() {
  if (!is_name("not")) return parse_compare();
  int line = next().line;
  if (++depth_ > kMaxDepth) fail("expression nested too deeply");
  expr_ptr node = make(expr_kind::not_, line);
  node->args.push_back(parse_not());
  --depth_;
  return node;
}

expr_ptr parser::parse_compare() {
  int line = current().line;
  expr_ptr first = parse_math1();
  expr_ptr node;
  static const char* const kCompare[] = {"==", "!=", "<", "<=", ">", ">="};
  while (true) {
    std::string op;
    if (current().kind == token_kind::op &&
        std::any_of(std::begin(kCompare), std::end(kCompare), [&](const char* c) { return current().text == c; })) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().kind == token_kind::name && look().text == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!node) {
      node = make(expr_kind::compare, line);
      node->args.push_back(std::move(first));
    }
    node->ops.push_back(op);
    node->args.push_back(parse_math1());
  }
  return node ? std::move(node) : std::move(first);
}

expr_ptr parser::parse_math1() {
  expr_ptr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const token& t = next();
    expr_ptr node = make2(expr_kind::binary, t.line, std::move(left), parse_concat());
    node->ops.push_back(t.text);
    left = std::move(node);
  }
  return left;
}

expr_ptr parser::parse_concat() {
  int line = current().line;
  expr_ptr first = parse_math2();
  if (!is_op("~")) return first;
  expr_ptr node = make(expr_kind::concat, line);
  node->args.push_back(std::move(first));
  while (skip_op("~")) node->args.push_back(parse_math2());
  return node;
}

expr_ptr parser::parse_math2() {
  expr_ptr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const token& t = next();
    expr_ptr node = make2(expr_kind::binary, t.line, std::move(left), parse_pow());
    node->ops.push_back(t.text);
    left = std::move(node);
  }
  return left;
}

expr_ptr parser::parse_pow() {
  expr_ptr left = parse_unary();
  while (is_op("**")) {
    const token& t = next();
    expr_ptr node = make2(expr_kind::binary, t.line, std::move(left), parse_unary());
    node->ops.push_back("**");
    left = std::move(node);
  }
  return left;
}

expr_ptr parser::parse_unary(bool with_filter) {
  if (++depth_ > kMaxDepth) fail("expression nested too deeply");
  expr_ptr node;
  if (is_op("-") || is_op("+")) {
    const token& t = next();
    node = make(t.text == "-" ? expr_kind::neg : expr_kind::pos, t.line);
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  --depth_;
  return node;
}

expr_ptr parser::parse_primary() {
  const token& t = current();
  expr_ptr node = make(expr_kind::literal, t.line);
  switch (t.kind) {
    case token_kind::name:
      if (t.text == "true" || t.text == "True") node->literal = value(true);
      else if (t.text == "false" || t.text == "False") node->literal = value(false);
      else if (t.text == "none" || t.text == "None") node->literal = value::none();
      else {
        node->kind = expr_kind::name;
        node->name = t.text;
      }
      next();
      return node;
    case token_kind::string: {
      std::string text;
      while (current().kind == token_kind::string) text += next().text;
      node->literal = value(std::move(text));
      return node;
    }
    case token_kind::integer: node->literal = value(t.int_value); next(); return node;
    case token_kind::floating: node->literal = value(t.float_value); next(); return node;
    default: break;
  }
  if (skip_op("(")) {
    node = parse_tuple(false, true, {}, true);
    expect_op(")");
    return node;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  if (t.kind == token_kind::eof) fail("unexpected end of template");
  fail("unexpected '" + describe_token(t) + "'");
}

expr_ptr parser::parse_list() {
  expr_ptr node = make(expr_kind::list, expect_op("[").line);
  while (!is_op("]")) {
    if (!node->args.empty()) expect_op(",");
    if (is_op("]")) break;
    node->args.push_back(parse_expression());
  }
  expect_op("]");
  return node;
}

expr_ptr parser::parse_dict() {
  expr_ptr node = make(expr_kind::dict, expect_op("{").line);
  while (!is_op("}")) {
    if (!node->args.empty()) expect_op(",");
    if (is_op("}")) break;
    node->args.push_back(parse_expression());
    expect_op(":");
    node->args.push_back(parse_expression());
  }
  expect_op("}");
  return node;
}

expr_ptr parser::parse_postfix(expr_ptr node) {
  while (true) {
    if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

expr_ptr parser::parse_filter_expr(expr_ptr node) {
  while (true) {
    if (is_op("|")) node = parse_filter(std::move(node));
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

expr_ptr parser::parse_subscript(expr_ptr node) {
  const token& t = next();
  if (t.text == ".") {
    const token& attr = next();
    if (attr.kind == token_kind::name) {
      expr_ptr e = make(expr_kind::getattr, t.line);
      e->args.push_back(std::move(node));
      e->name = attr.text;
      return e;
    }
    if (attr.kind != token_kind::integer) fail_at(attr, "expected name or number");
    expr_ptr key = make(expr_kind::literal, attr.line);
    key->literal = value(attr.int_value);
    return make2(expr_kind::getitem, t.line, std::move(node), std::move(key));
  }
  int line = current().line;
  std::vector<expr_ptr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  expr_ptr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    key = make(expr_kind::tuple, line);
    key->args = std::move(args);
  }
  return make2(expr_kind::getitem, t.line, std::move(node), std::move(key));
}

expr_ptr parser::parse_subscribed() {
  expr_ptr s = make(expr_kind::slice, current().line);
  if (!skip_op(":")) {
    expr_ptr node = parse_expression();
    if (!skip_op(":")) return node;
    s->args.push_back(std::move(node));
  } else {
    s->args.push_back(nullptr);
  }
  bool at_end = is_op("]") || is_op(",");
  s->args.push_back(is_op(":") || at_end ? nullptr : parse_expression());
  if (skip_op(":")) {
    s->args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression());
  } else {
    s->args.push_back(nullptr);
  }
  return s;
}

expr_ptr parser::parse_call(expr_ptr callee) {
  expr_ptr call = make(expr_kind::call, current().line);
  call->args.push_back(std::move(callee));
  parse_call_args(*call);
  return call;
}

void parser::parse_call_args(expr& call) {
  const token& open = expect_op("(");
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (current().kind == token_kind::name && look().kind == token_kind::op && look().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty()) fail_at(open, "invalid syntax for function call expression");
      call.args.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
}

std::string parser::parse_dotted_name() {
  std::string name = expect_name().text;
  while (skip_op(".")) name += "." + expect_name().text;
  return name;
}

expr_ptr parser::parse_filter(expr_ptr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const token& at = current();
    expr_ptr f = make(expr_kind::filter, at.line);
    f->name = parse_dotted_name();
    if (!find_filter(f->name)) fail_at(at, "No filter named '" + f->name + "'.");
    f->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*f);
    node = std::move(f);
  }
  return node;
}

expr_ptr parser::parse_test(expr_ptr node) {
  next();  // 'is'
  expr_ptr t = make(expr_kind::test, current().line);
  t->negated = skip_name("not");
  const token& at = current();
  t->name = parse_dotted_name();
  if (!find_test(t->name)) fail_at(at, "No test named '" + t->name + "'.");
  t->args.push_back(std::move(node));
  token_kind k = current().kind;
  bool bare_arg = k == token_kind::name || k == token_kind::string || k == token_kind::integer ||
                  k == token_kind::floating || is_op("[") || is_op("{");
  if (is_op("(")) {
    parse_call_args(*t);
  } else if (bare_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    t->args.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace troupe
