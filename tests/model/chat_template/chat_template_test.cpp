// chat_template against independent references: transformers' renders in
// tests/data/tokenizers/golden.json, and python3-jinja2 renders (configured as
// transformers configures it) of a conversation matrix and of feature
// snippets, made by scripts/make_chat_references.py. Plus unit tests with
// exact expected strings (each checked against Jinja2 when written).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/file_util.h"
#include "model/chat_template/chat_template.h"

namespace troupe {
namespace {

const std::string kData = TROUPE_TEST_DATA;

// The date make_chat_references.py gives strftime_now: 2026-11-21 00:00:00.
chat_template_render_options fixed_date() {
  chat_template_render_options options;
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 21;
  options.now = tm;
  return options;
}

value load_json(const std::string& path) {
  result<std::string> text = read_text_file(path);
  EXPECT_TRUE(text.ok()) << path;
  if (!text) return value();
  result<value> parsed = parse_json_value(*text);
  EXPECT_TRUE(parsed.ok()) << path << ": " << parsed.error_message();
  return parsed ? *parsed : value();
}

value json(std::string_view text) {
  result<value> v = parse_json_value(text);
  EXPECT_TRUE(v.ok()) << text;
  return v ? *v : value();
}

// Renders `source` with a JSON context; "ERROR: <message>" on failure.
std::string render(std::string_view source, std::string_view context_json = "{}") {
  result<chat_template> t = chat_template::parse(source);
  if (!t) return "ERROR: " + t.error_message();
  result<std::string> out = t->render(json(context_json), fixed_date());
  return out ? *out : "ERROR: " + out.error_message();
}

std::string template_source(const std::string& name) {
  std::string prefix = "tokenizer:";
  if (name.rfind(prefix, 0) == 0) {
    value config = load_json(kData + "/tokenizers/" + name.substr(prefix.size()) + "/tokenizer_config.json");
    return config.member("chat_template").as_string();
  }
  result<std::string> text = read_text_file(kData + "/chat/templates/" + name + ".jinja");
  EXPECT_TRUE(text.ok()) << name;
  return text ? *text : "";
}

// Compares one render with a reference case ({text} or {error, error_type}).
// Returns a description of the mismatch, or "" when it matches.
std::string check_case(const chat_template& t, const value& context, const value& expected) {
  result<std::string> out = t.render(context, fixed_date());
  value text = expected.member("text");
  if (text.is_string()) {
    if (!out) return "expected text, got error: " + out.error_message();
    if (*out != text.as_string()) return "text differs:\n--- expected\n" + text.as_string() + "\n--- got\n" + *out;
    return "";
  }
  if (out) return "expected error '" + expected.member("error").as_string() + "', got text:\n" + *out;
  // raise_exception() messages reach users verbatim: they must match exactly.
  if (expected.member("error_type").as_string() == "TemplateError" &&
      out.error_message() != expected.member("error").as_string()) {
    return "error message differs: expected '" + expected.member("error").as_string() + "', got '" +
           out.error_message() + "'";
  }
  return "";
}

TEST(chat_template_golden, transformers_renders) {
  value golden = load_json(kData + "/tokenizers/golden.json").member("tokenizers");
  int checked = 0;
  for (std::string name : {"qwen3", "llama3_1"}) {
    value config = load_json(kData + "/tokenizers/" + name + "/tokenizer_config.json");
    result<chat_template> t = chat_template::parse(config.member("chat_template").as_string());
    ASSERT_TRUE(t.ok()) << name << ": " << t.error_message();
    for (const value& c : golden.member(name).member("chat").as_array()) {
      value_object context;
      context.set("messages", c.member("messages"));
      context.set("add_generation_prompt", c.member("add_generation_prompt"));
      context.set("tools", value::none());
      for (const char* token : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
        value v = config.member(token);
        if (v.is_object()) v = v.member("content");  // {"__type": "AddedToken", "content": ...}
        if (v.is_string()) context.set(token, v);
      }
      result<std::string> out = t->render(value(std::move(context)));
      ASSERT_TRUE(out.ok()) << name << ": " << out.error_message();
      EXPECT_EQ(*out, c.member("text").as_string()) << name << " case " << checked;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
}

TEST(chat_template_references, jinja2_matrix) {
  value cases = load_json(kData + "/chat/references.json");
  ASSERT_TRUE(cases.is_array());
  std::map<std::string, result<chat_template>> templates;
  int failures = 0, errors_expected = 0;
  for (size_t i = 0; i < cases.as_array().size(); ++i) {
    const value& c = cases.as_array()[i];
    std::string name = c.member("template").as_string();
    auto it = templates.find(name);
    if (it == templates.end()) it = templates.emplace(name, chat_template::parse(template_source(name))).first;
    ASSERT_TRUE(it->second.ok()) << name << ": " << it->second.error_message();
    if (c.member("error").is_string()) ++errors_expected;
    std::string mismatch = check_case(*it->second, c.member("context"), c);
    if (mismatch.empty()) continue;
    if (++failures <= 10) {
      ADD_FAILURE() << "case " << i << " (" << name << "): " << mismatch;
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(cases.as_array().size(), 1000u);
  EXPECT_GE(templates.size(), 15u);
  EXPECT_GT(errors_expected, 100);  // raise_exception paths are exercised
}

TEST(chat_template_references, jinja2_feature_snippets) {
  value features = load_json(kData + "/chat/features.json");
  const value& context = features.member("context");
  int failures = 0, checked = 0;
  for (const value& c : features.member("cases").as_array()) {
    ++checked;
    const std::string& source = c.member("source").as_string();
    result<chat_template> t = chat_template::parse(source);
    std::string mismatch;
    if (!t) {
      if (!c.member("error").is_string()) mismatch = "parse error: " + t.error_message();
    } else {
      mismatch = check_case(*t, context, c);
    }
    if (!mismatch.empty() && ++failures <= 20) ADD_FAILURE() << "snippet:\n" << source << "\n" << mismatch;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(checked, 150);
}


// ----------------------------------------------------------------------------
// Unit tests: one feature family each; expected strings are Jinja2 3.1.2's
// output for the same template and context.

const char* const kContext =
    R"({"msgs": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": " Hi! "}, {"role": "assistant", "content": "Hello."}], "d": {"b": 2, "a": 1}, "n": null, "name": "World"})";

TEST(chat_template_unit, whitespace) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nend", kContext),
            "yes\nend");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ny", kContext),
            "  x\ny");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}", kContext),
            "  x");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c", kContext),
            "abc");
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c", kContext),
            "abc");
  EXPECT_EQ(render("a\n{# c #}\nb", kContext),
            "a\nb");
  EXPECT_EQ(render("x\n", kContext),
            "x");
  EXPECT_EQ(render("x\n\n", kContext),
            "x\n");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}", kContext),
            "{{ x }}");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}", kContext),
            "\nx");
  EXPECT_EQ(render("{{ 'a' }}\nb", kContext),
            "a\nb");
  EXPECT_EQ(render("a\r\nb\rc", kContext),
            "a\nb\nc");
  EXPECT_EQ(render("\t {% for i in [1, 2] %}\n\t {{ i }}\n\t {% endfor %}\n", kContext),
            "\t 1\n\t 2\n");
}

TEST(chat_template_unit, literals_and_printing) {
  EXPECT_EQ(render("{{ 'it\\'s' }} {{ \"a\\tb\" }} {{ '\\u00e9' }} {{ 'x' 'y' }}", kContext),
            "it's a\tb é xy");
  EXPECT_EQ(render("{{ 1 }} {{ 1.0 }} {{ 1.5e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }}", kContext),
            "1 1.0 1.5e-05 1e+16 0.30000000000000004");
  EXPECT_EQ(render("{{ true }} {{ False }} {{ none }} {{ None }} [{{ undefined_name }}]", kContext),
            "True False None None []");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ (1,) }} {{ {'k': \"it's\"} }}", kContext),
            "[1, 'a', None, True] (1,) {'k': \"it's\"}");
}

TEST(chat_template_unit, operators) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 ** 2 }} {{ 'ab' * 2 }}", kContext),
            "3 -4 2 3.5 64 abab");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ (1,) == [1] }}", kContext),
            "True False True False");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not none }}", kContext),
            "x y  True");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'a' in d }} {{ 'a' ~ 1 ~ none }}", kContext),
            "True True True a1None");
  EXPECT_EQ(render("[{{ 'x' if false }}] {{ 'y' if n is none else 'z' }}", kContext),
            "[] y");
  EXPECT_EQ(render("{{ -1 | abs }} {{ msgs | length - 1 }} {{ 2 + 3 * 4 }}", kContext),
            "1 2 14");
}

TEST(chat_template_unit, access) {
  EXPECT_EQ(render("{{ msgs[0].role }} {{ msgs[-1]['content'] }} {{ d.a }} {{ d['b'] }} [{{ d.zz }}]", kContext),
            "system Hello. 1 2 []");
  EXPECT_EQ(render("{{ [1, 2, 3][::-1] }} {{ 'hello'[1:3] }} {{ 'hello'[-1] }} {{ msgs[1:] | length }}", kContext),
            "[3, 2, 1] el o 2");
  EXPECT_EQ(render("{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('x', 0) }}", kContext),
            "[('b', 2), ('a', 1)] ['b', 'a'] [2, 1] 0");
}

TEST(chat_template_unit, control_flow) {
  EXPECT_EQ(render("{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }} {% endfor %}", kContext),
            "10TrueFalse33 21FalseFalse32 32FalseTrue31 ");
  EXPECT_EQ(render("{% for m in msgs if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}", kContext),
            "1:user 2:assistant ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}", kContext),
            "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}", kContext),
            "b=2 a=1 ");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", kContext),
            "0134");
  EXPECT_EQ(render("{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{{ loop.cycle('a', 'b') }}{% endfor %}", kContext),
            "-asystembusera");
  EXPECT_EQ(render("{% if n %}a{% elif d %}b{% else %}c{% endif %}", kContext),
            "b");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", kContext),
            "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}", kContext),
            "4");
  EXPECT_EQ(render("{% set s %}block {{ name }}{% endset %}[{{ s }}]", kContext),
            "[block World]");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a + b }}", kContext),
            "3");
  EXPECT_EQ(render("{% with x = 3 %}{{ x }}{% endwith %}[{{ x }}]", kContext),
            "3[]");
  EXPECT_EQ(render("{% filter upper %}shout{% endfilter %}", kContext),
            "SHOUT");
}

TEST(chat_template_unit, macros) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }}", kContext),
            "1B 12 43");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner{% endcall %}", kContext),
            "<inner>");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}", kContext),
            "(1,){'k': 2}");
}

TEST(chat_template_unit, filters) {
  EXPECT_EQ(render("{{ ' a b ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Hello' | length }}|{{ d | length }}", kContext),
            "a b|a|5|2");
  EXPECT_EQ(render("{{ d | tojson }} {{ d | tojson(indent=2) }} {{ 'é' | tojson }}", kContext),
            "{\"b\": 2, \"a\": 1} {\n  \"b\": 2,\n  \"a\": 1\n} \"é\"");
  EXPECT_EQ(render("{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello WORLD' | capitalize }} {{ 'hello-world foo' | title }}", kContext),
            "HELLO WORLD hello Hello world Hello-World Foo");
  EXPECT_EQ(render("{{ undefined_name | default('dflt') }} {{ '' | default('e', true) }} {{ n | d('x') }}", kContext),
            "dflt e None");
  EXPECT_EQ(render("{{ d | items | list }} {{ [1, 2] | join('-') }} {{ msgs | first }} {{ [1, 2] | last }}", kContext),
            "[('b', 2), ('a', 1)] 1-2 {'role': 'system', 'content': 'Be nice.'} 2");
  EXPECT_EQ(render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }}", kContext),
            "[' Hi! '] 2");
  EXPECT_EQ(render("{{ [1, none, 'a'] | select('none') | list }} {{ [1, 'a'] | select('string') | list }} {{ msgs | selectattr('name', 'defined') | list }}", kContext),
            "[None] ['a'] []");
  EXPECT_EQ(render("{{ ['b', 'A', 'c'] | sort }} {{ msgs | sort(attribute='role') | map(attribute='role') | join(',') }} {{ [1, 2, 1] | unique | list }} {{ [1, 2] | reverse | list }}", kContext),
            "['A', 'b', 'c'] assistant,system,user [1, 2] [2, 1]");
  EXPECT_EQ(render("{{ 'a-b' | replace('-', '+') }} {{ '42' | int + 1 }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }}", kContext),
            "a+b 43 2.5 3 2.57 2.0");
  EXPECT_EQ(render("{{ '<b>' | e }} {{ '<b>' | safe }} {{ 'a\\nb' | indent(2) }} {{ 'one two' | wordcount }} {{ [1, 2, 3] | batch(2) | list }} {{ 42 | string }}", kContext),
            "&lt;b&gt; <b> a\n  b 2 [[1, 2], [3]] 42");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | list }} {{ 'ab' | list }} {{ d | dictsort }}", kContext),
            "['A', 'B'] ['a', 'b'] [('a', 1), ('b', 2)]");
}

TEST(chat_template_unit, tests) {
  EXPECT_EQ(render("{{ x is defined }} {{ x is undefined }} {{ n is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }}", kContext),
            "False True True True True True True");
  EXPECT_EQ(render("{{ d is mapping }} {{ [] is sequence }} {{ 'a' is iterable }} {{ true is boolean }} {{ true is true }} {{ 0 is false }}", kContext),
            "True True True True True False");
  EXPECT_EQ(render("{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 2 is in [1, 2] }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ n is not none }}", kContext),
            "True False True True True True True False");
}

TEST(chat_template_unit, methods) {
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('x') }} {{ 'xxhixx'.strip('x') }} {{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|", kContext),
            "True False hi a | a|");
  EXPECT_EQ(render("{{ 'a,b,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) }}", kContext),
            "['a', 'b', 'c'] ['a', 'b,c'] ['a', 'b'] ['a,b', 'c']");
  EXPECT_EQ(render("{{ 'aXa'.replace('a', 'b') }} {{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ 'hi'.capitalize() }}", kContext),
            "bXb AB ab Hello World Hi");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ '{} {}'.format(1, 'x') }} {{ '12'.isdigit() }}", kContext),
            "2 2 a-b 1 x True");
  EXPECT_EQ(render("{{ [1, 2, 2].index(2) }} {{ [1, 2, 2].count(2) }}", kContext),
            "1 2");
}

TEST(chat_template_unit, globals) {
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1) }} {{ namespace(a=1).a }}", kContext),
            "[0, 1, 2] [1, 3, 5] {'a': 1} 1");
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %a %b %d') }}", kContext),
            "2026-11-21 Sat Nov 21");
}

TEST(chat_template_errors, syntax_errors_name_line_and_column) {
  result<chat_template> t = chat_template::parse("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error_message(), "template syntax error: line 3, column 8: unexpected 'end of print statement'");
  t = chat_template::parse("{% for m in messages %}\n{{ m }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error_message().find("Unexpected end of template. Jinja was looking for the following tags: "
                                   "'endfor' or 'else'. The innermost block that needs to be closed is 'for'."),
            std::string::npos)
      << t.error_message();
  EXPECT_EQ(render("{{ x | no_such_filter }}"), "ERROR: template syntax error: line 1, column 8: No filter named 'no_such_filter'.");
  EXPECT_EQ(render("{% include 'x.jinja' %}"),
            "ERROR: template syntax error: line 1, column 4: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(render("{# open comment"), "ERROR: template syntax error: line 1, column 1: Missing end of comment tag");
  EXPECT_EQ(render("{{ 'unterminated }}"), "ERROR: template syntax error: line 1, column 4: unexpected char \"'\" at 3");
}

TEST(chat_template_errors, raise_exception_message_is_verbatim) {
  EXPECT_EQ(render("a{{ raise_exception('Roles must alternate: ' ~ 3) }}b"), "ERROR: Roles must alternate: 3");
  result<chat_template> t = chat_template::parse(template_source("mistral_v0_1"));
  ASSERT_TRUE(t.ok());
  result<std::string> out = t->render(json(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "user", "content": "b"}], "bos_token": "<s>", "eos_token": "</s>"})"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error_message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(chat_template_errors, runtime_errors_name_the_line) {
  EXPECT_EQ(render("\n\n{{ missing.attr }}"), "ERROR: chat template error at line 3: 'missing' is undefined");
  EXPECT_EQ(render("{{ 'a' + 1 }}"), "ERROR: chat template error at line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render("{{ [1].append(2) }}"),
            "ERROR: chat template error at line 1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render("{{ x | tojson }}"), "ERROR: chat template error at line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render("{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}"),
            "ERROR: chat template error at line 1: maximum macro recursion depth exceeded");
  result<chat_template> t = chat_template::parse("{{ 1 }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(json("[1, 2]")).ok());  // the context must be an object
}

TEST(chat_template_errors, hostile_templates_fail_cleanly) {
  std::string deep_parens = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(render("{{ " + deep_parens + " }}").find("nested too deeply"), std::string::npos);
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) long_chain += " + 1";
  EXPECT_NE(render(long_chain + " }}").find("nested too deeply"), std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 2000; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(render(deep_blocks).find("nested too deeply"), std::string::npos);
  EXPECT_NE(render("{{ 'x' * 10000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(render("{{ range(1000000) | length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(render("{{ 2 ** 100 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(render("{{ 1 ** 1000000000000 }}"), "1");
}

// Every prefix and many single-byte corruptions of every reference template
// must parse or fail with a message; rendering what parses must not crash.
TEST(chat_template_errors, truncated_and_corrupted_templates_never_crash) {
  value context = json(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true,
                           "tools": null, "bos_token": "<s>", "eos_token": "</s>"})");
  int parsed = 0, rejected = 0;
  uint32_t seed = 12345;
  for (std::string name : {"chatml", "llama2", "mistral_v0_3", "zephyr", "llama3_1_tools", "tokenizer:qwen3",
                           "tokenizer:deepseek_v3", "features_whitespace"}) {
    std::string source = template_source(name);
    for (size_t cut = 0; cut <= source.size(); cut += 3) {
      std::string variant = source.substr(0, cut);
      if (cut % 2 == 0 && cut < source.size()) {
        seed = seed * 1103515245 + 12345;
        variant += "{}%#-+'\"()[]|.\n"[seed % 15];
      }
      result<chat_template> t = chat_template::parse(variant);
      if (!t) {
        EXPECT_FALSE(t.error_message().empty());
        ++rejected;
        continue;
      }
      ++parsed;
      result<std::string> out = t->render(context);
      if (!out) {
        EXPECT_FALSE(out.error_message().empty());
      }
    }
  }
  EXPECT_GT(parsed, 50);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace troupe
