// Statement parsing (Jinja2 parser.py: subparse, parse_statement and the
// parse_<tag> methods) and the token-stream helpers.
#include "model/chat_template/parser.h"

#include <algorithm>

namespace troupe {
namespace {

bool expr_references(const expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == expr_kind::name && e->name == name) return true;
  for (const expr_ptr& arg : e->args) {
    if (expr_references(arg.get(), name)) return true;
  }
  for (const auto& [key, arg] : e->kwargs) {
    if (expr_references(arg.get(), name)) return true;
  }
  return false;
}

// Operator chains (a.b.c..., 1+1+1...) are built by loops, not recursion,
// so their depth is checked here, without recursion, to keep evaluation and
// destruction (both recursive) within the stack.
constexpr size_t kMaxExprDepth = 1000;

size_t expr_depth(const expr* root) {
  size_t deepest = 0;
  std::vector<std::pair<const expr*, size_t>> pending;
  if (root) pending.emplace_back(root, 1);
  while (!pending.empty()) {
    auto [e, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    for (const expr_ptr& arg : e->args) {
      if (arg) pending.emplace_back(arg.get(), depth + 1);
    }
    for (const auto& [key, arg] : e->kwargs) pending.emplace_back(arg.get(), depth + 1);
  }
  return deepest;
}

bool too_deep(const stmt& s) {
  std::vector<const expr*> exprs = {s.expr.get(), s.cond.get(), s.filter.get()};
  for (const auto& [test, body] : s.branches) exprs.push_back(test.get());
  for (const auto& [name, fallback] : s.params) exprs.push_back(fallback.get());
  return std::any_of(exprs.begin(), exprs.end(), [](const expr* e) { return expr_depth(e) > kMaxExprDepth; });
}

void mark_catches(stmt& s) {
  s.catch_varargs = references_name(s.body, "varargs");
  s.catch_kwargs = references_name(s.body, "kwargs");
  s.catch_caller = references_name(s.body, "caller");
}

}  // namespace

bool references_name(const stmt_list& body, std::string_view name) {
  for (const stmt_ptr& s : body) {
    if (expr_references(s->expr.get(), name) || expr_references(s->cond.get(), name) ||
        expr_references(s->filter.get(), name)) {
      return true;
    }
    for (const auto& [test, branch] : s->branches) {
      if (expr_references(test.get(), name) || references_name(branch, name)) return true;
    }
    for (const auto& [param, fallback] : s->params) {
      if (expr_references(fallback.get(), name)) return true;
    }
    if (references_name(s->body, name) || references_name(s->else_body, name)) return true;
  }
  return false;
}

result<stmt_list> parse_template(std::string_view source) {
  result<std::vector<token>> tokens = tokenize(source);
  if (!tokens) return make_error("template syntax error: " + tokens.error_message());
  parser p(std::move(tokens).value());
  try {
    return p.parse_all();
  } catch (const parser::syntax_error& e) {
    return make_error("template syntax error: " + e.message);
  }
}

stmt_list parser::parse_all() { return subparse({}); }

const token& parser::next() {
  const token& t = tokens_[pos_];
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return t;
}

bool parser::is_op(std::string_view op) const {
  return current().kind == token_kind::op && current().text == op;
}

bool parser::is_name(std::string_view name) const {
  return current().kind == token_kind::name && current().text == name;
}

bool parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

const token& parser::expect_op(std::string_view op) {
  if (!is_op(op)) fail("expected token '" + std::string(op) + "', got '" + describe_token(current()) + "'");
  return next();
}

const token& parser::expect_name(std::string_view name) {
  bool ok = current().kind == token_kind::name && (name.empty() || current().text == name);
  if (!ok) {
    std::string wanted = name.empty() ? "name" : std::string(name);
    fail("expected token '" + wanted + "', got '" + describe_token(current()) + "'");
  }
  return next();
}

void parser::expect_kind(token_kind kind) {
  if (current().kind == kind) {
    next();
    return;
  }
  token wanted;
  wanted.kind = kind;
  fail("expected token '" + describe_token(wanted) + "', got '" + describe_token(current()) + "'");
}

void parser::fail_at(const token& t, const std::string& message) const {
  throw syntax_error{describe_position(t) + ": " + message};
}

void parser::fail_unknown_tag(const std::string& name, const std::vector<names>& end_stack) const {
  std::string message = name.empty() ? "Unexpected end of template." : "Encountered unknown tag '" + name + "'.";
  if (!end_stack.empty() && !end_stack.back().empty()) {
    std::string looking;
    for (const std::string& tag : end_stack.back()) looking += (looking.empty() ? "'" : " or '") + tag + "'";
    bool expected = false;
    for (const names& tags : end_stack) expected |= std::find(tags.begin(), tags.end(), name) != tags.end();
    if (!name.empty() && expected) {
      message += " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for " +
                 looking + ".";
    } else {
      message += " Jinja was looking for the following tags: " + looking + ".";
    }
  }
  if (!open_blocks_.empty()) {
    message += " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
  }
  fail(message);
}

stmt_list parser::subparse(const names& end_tags) {
  stmt_list body;
  if (!end_tags.empty()) end_tags_stack_.push_back(end_tags);
  while (current().kind != token_kind::eof) {
    const token& t = current();
    if (t.kind == token_kind::data) {
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::text;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.kind == token_kind::variable_begin) {
      next();
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::output;
      s->line = current().line;
      s->expr = parse_tuple();
      if (too_deep(*s)) fail("expression nested too deeply");
      expect_kind(token_kind::variable_end);
      body.push_back(std::move(s));
    } else if (t.kind == token_kind::block_begin) {
      next();
      if (current().kind == token_kind::name &&
          std::find(end_tags.begin(), end_tags.end(), current().text) != end_tags.end()) {
        end_tags_stack_.pop_back();
        return body;
      }
      body.push_back(parse_statement());
      if (too_deep(*body.back())) fail("expression nested too deeply");
      expect_kind(token_kind::block_end);
    } else {
      fail("unexpected '" + describe_token(t) + "'");
    }
  }
  if (!end_tags.empty()) end_tags_stack_.pop_back();
  return body;
}

stmt_list parser::parse_statements(const names& end_tags, bool drop_needle) {
  skip_op(":");
  expect_kind(token_kind::block_end);
  stmt_list body = subparse(end_tags);
  if (current().kind == token_kind::eof) {
    std::vector<names> stack = end_tags_stack_;
    stack.push_back(end_tags);
    fail_unknown_tag("", stack);
  }
  if (drop_needle) next();
  return body;
}

stmt_ptr parser::parse_statement() {
  const token& t = current();
  if (open_blocks_.size() > 500) fail("blocks nested too deeply");
  if (t.kind != token_kind::name) fail("tag name expected");
  const std::string& tag = t.text;
  if (tag == "if") return parse_if();
  if (tag == "for") return parse_for();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "call") return parse_call_block();
  if (tag == "filter") return parse_filter_block();
  if (tag == "with") return parse_with();
  if (tag == "print") {
    auto s = parse_simple(stmt_kind::output);
    s->expr = parse_tuple();
    return s;
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
    return parse_simple(tag == "break" ? stmt_kind::break_ : stmt_kind::continue_);
  }
  if (tag == "generation") {
    auto s = parse_simple(stmt_kind::scope);
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }
  static const char* const kUnsupported[] = {"block", "extends", "include", "from", "import", "autoescape"};
  for (const char* u : kUnsupported) {
    if (tag == u) fail("the '" + tag + "' tag is not supported in chat templates");
  }
  fail_unknown_tag(tag, end_tags_stack_);
}

stmt_ptr parser::parse_simple(stmt_kind kind) {
  auto s = std::make_unique<stmt>();
  s->kind = kind;
  s->line = next().line;
  return s;
}

stmt_ptr parser::parse_if() {
  auto s = parse_simple(stmt_kind::if_);
  open_blocks_.push_back("if");
  while (true) {
    expr_ptr test = parse_tuple(false, false);
    stmt_list body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(test), std::move(body));
    const token& t = next();
    if (t.text == "elif") continue;
    if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_for() {
  auto s = parse_simple(stmt_kind::for_);
  open_blocks_.push_back("for");
  parse_assign_target(*s, false, {"in"});
  expect_name("in");
  s->expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) fail("recursive loops are not supported");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().text != "endfor") s->else_body = parse_statements({"endfor"}, true);
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_set() {
  auto s = parse_simple(stmt_kind::set);
  parse_assign_target(*s, true, {});
  if (skip_op("=")) {
    s->expr = parse_tuple();
    return s;
  }
  s->kind = stmt_kind::set_block;
  open_blocks_.push_back("set");
  s->filter = parse_filter(nullptr);
  s->body = parse_statements({"endset"}, true);
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_macro() {
  auto s = parse_simple(stmt_kind::macro);
  open_blocks_.push_back("macro");
  s->name = expect_name().text;
  parse_signature(*s);
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  mark_catches(*s);
  loop_depth_ = saved_loop_depth;
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_call_block() {
  auto s = parse_simple(stmt_kind::call_block);
  open_blocks_.push_back("call");
  if (is_op("(")) parse_signature(*s);
  const token& at = current();
  s->expr = parse_expression();
  if (s->expr->kind != expr_kind::call) fail_at(at, "expected call");
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endcall"}, true);
  mark_catches(*s);
  loop_depth_ = saved_loop_depth;
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_filter_block() {
  auto s = parse_simple(stmt_kind::filter_block);
  open_blocks_.push_back("filter");
  s->filter = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  open_blocks_.pop_back();
  return s;
}

stmt_ptr parser::parse_with() {
  auto s = parse_simple(stmt_kind::with);
  open_blocks_.push_back("with");
  while (current().kind != token_kind::block_end) {
    if (!s->params.empty()) expect_op(",");
    std::string target = expect_name().text;
    expect_op("=");
    s->params.emplace_back(std::move(target), parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  open_blocks_.pop_back();
  return s;
}

void parser::parse_assign_target(stmt& s, bool with_namespace, const names& extra_end) {
  if (with_namespace && current().kind == token_kind::name && look().kind == token_kind::op &&
      look().text == ".") {
    s.ns_object = next().text;
    next();
    s.name = expect_name().text;
    return;
  }
  const token& at = current();
  expr_ptr target = parse_tuple(true, true, extra_end);
  auto name_of = [&](const expr& e) {
    if (e.kind != expr_kind::name) fail_at(at, "can't assign to '" + describe_token(at) + "'");
    return e.name;
  };
  if (target->kind == expr_kind::tuple) {
    s.tuple_target = true;
    for (const expr_ptr& item : target->args) s.targets.push_back(name_of(*item));
  } else {
    s.targets.push_back(name_of(*target));
  }
}

void parser::parse_signature(stmt& s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s.params.empty()) expect_op(",");
    std::string name = expect_name().text;
    expr_ptr fallback;
    if (skip_op("=")) {
      fallback = parse_expression();
    } else if (!s.params.empty() && s.params.back().second) {
      fail("non-default argument follows default argument");
    }
    s.params.emplace_back(std::move(name), std::move(fallback));
  }
  expect_op(")");
}

bool parser::is_tuple_end(const names& extra_end) const {
  token_kind k = current().kind;
  if (k == token_kind::variable_end || k == token_kind::block_end || is_op(")")) return true;
  return k == token_kind::name &&
         std::find(extra_end.begin(), extra_end.end(), current().text) != extra_end.end();
}

}  // namespace troupe
