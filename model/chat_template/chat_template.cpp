#include "model/chat_template/chat_template.h"

#include <new>

#include "model/chat_template/evaluator.h"
#include "model/chat_template/parser.h"

namespace troupe {

struct chat_template::program {
  stmt_list body;
};

result<chat_template> chat_template::parse(std::string_view source) {
  result<stmt_list> body = parse_template(source);
  if (!body) return std::move(body).take_error();
  auto p = std::make_shared<program>();
  p->body = std::move(body).value();
  chat_template t;
  t.program_ = std::move(p);
  return t;
}

result<std::string> chat_template::render(const value& context) const {
  return render(context, chat_template_render_options{});
}

result<std::string> chat_template::render(const value& context,
                                          const chat_template_render_options& options) const {
  if (!context.is_object()) return make_error("chat template context must be an object");
  value_object globals;
  add_builtin_globals(globals);
  auto global_scope = std::make_shared<scope>(nullptr);
  for (auto& [name, v] : globals) global_scope->set(name, v);
  auto root = std::make_shared<scope>(global_scope);
  for (const auto& [name, v] : context.as_object()) root->set(name, v);

  render_state state;
  state.now = options.now;
  std::string out;
  evaluator eval(state, out);
  try {
    eval.render(program_->body, root);
  } catch (const template_error& e) {
    if (e.raised_by_template) return make_error(e.message);
    return make_error("chat template error at line " + std::to_string(eval.line()) + ": " + e.message);
  } catch (const std::bad_alloc&) {
    return make_error("chat template error: out of memory");
  } catch (const std::exception& e) {
    return make_error(std::string("chat template error: ") + e.what());
  }
  return out;
}

}  // namespace troupe
