// parser: tokens -> AST, following Jinja2's parser.py rule for rule
// (operator precedence, `is` tests taking one bare argument, filters binding
// tighter than arithmetic, `for ... if ...`, namespace assignment). Unknown
// filters and tests are errors at parse time, as Jinja's compiler makes them.
// Errors name the line and column of the offending token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/lexer.h"

namespace troupe {

result<stmt_list> parse_template(std::string_view source);

class parser {
 public:
  struct syntax_error {
    std::string message;
  };

  explicit parser(std::vector<token> tokens) : tokens_(std::move(tokens)) {}
  // Throws syntax_error; parse_template turns it into a result.
  stmt_list parse_all();

 private:
  using names = std::vector<std::string>;

  // Token stream.
  const token& current() const { return tokens_[pos_]; }
  const token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const token& next();
  bool is_op(std::string_view op) const;
  bool is_name(std::string_view name) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  const token& expect_op(std::string_view op);
  const token& expect_name(std::string_view name = {});
  void expect_kind(token_kind kind);
  [[noreturn]] void fail(const std::string& message) const { fail_at(current(), message); }
  [[noreturn]] void fail_at(const token& t, const std::string& message) const;
  // Jinja's _fail_ut_eof: unknown tag (name) or unexpected end (empty name).
  [[noreturn]] void fail_unknown_tag(const std::string& name, const std::vector<names>& end_stack) const;

  // Statements (parser.cpp).
  stmt_list subparse(const names& end_tags);
  stmt_list parse_statements(const names& end_tags, bool drop_needle);
  stmt_ptr parse_statement();
  stmt_ptr parse_if();
  stmt_ptr parse_for();
  stmt_ptr parse_set();
  stmt_ptr parse_macro();
  stmt_ptr parse_call_block();
  stmt_ptr parse_filter_block();
  stmt_ptr parse_with();
  stmt_ptr parse_simple(stmt_kind kind);
  void parse_assign_target(stmt& s, bool with_namespace, const names& extra_end);
  void parse_signature(stmt& s);
  bool is_tuple_end(const names& extra_end) const;

  // Expressions (expr_parser.cpp).
  expr_ptr parse_expression(bool with_condexpr = true);
  expr_ptr parse_tuple(bool simplified = false, bool with_condexpr = true,
                       const names& extra_end = {}, bool explicit_parens = false);
  expr_ptr parse_condexpr();
  expr_ptr parse_or();
  expr_ptr parse_and();
  expr_ptr parse_not();
  expr_ptr parse_compare();
  expr_ptr parse_math1();
  expr_ptr parse_concat();
  expr_ptr parse_math2();
  expr_ptr parse_pow();
  expr_ptr parse_unary(bool with_filter = true);
  expr_ptr parse_primary();
  expr_ptr parse_list();
  expr_ptr parse_dict();
  expr_ptr parse_postfix(expr_ptr node);
  expr_ptr parse_filter_expr(expr_ptr node);
  expr_ptr parse_subscript(expr_ptr node);
  expr_ptr parse_subscribed();
  expr_ptr parse_call(expr_ptr callee);
  void parse_call_args(expr& call);
  expr_ptr parse_filter(expr_ptr node, bool start_inline = false);
  expr_ptr parse_test(expr_ptr node);
  std::string parse_dotted_name();

  std::vector<token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;                  // expression nesting, bounded
  int loop_depth_ = 0;             // for break / continue
  std::vector<std::string> open_blocks_;  // Jinja's _tag_stack
  std::vector<names> end_tags_stack_;     // Jinja's _end_token_stack
};

}  // namespace troupe
