#!/usr/bin/python3
"""Renders the chat-template reference matrix with Jinja2 configured exactly as
transformers' apply_chat_template configures it, for troupe's C++ interpreter
tests (tests/model/chat_template/chat_template_test.cpp).

Run with Debian's python3-jinja2:  /usr/bin/python3 scripts/make_chat_references.py

Writes
  tests/data/chat/references.json  [{template, context, text} | {template, context, error, error_type}]
      every template (tests/data/chat/templates/*.jinja and the chat_template of
      tests/data/tokenizers/{qwen3,llama3_1,deepseek_v3}/tokenizer_config.json,
      named "tokenizer:<name>") over a matrix of generated conversations.
  tests/data/chat/features.json    {context, cases: [{source, text} | {source, error, error_type}]}
      small snippets, one language feature each, all rendered with one context.

strftime_now() formats the FIXED date 2026-11-21 00:00:00 so the renders are
reproducible; the C++ tests pass the same date through
chat_template_render_options::now.
"""

import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
FIXED_NOW = datetime.datetime(2026, 11, 21)


# ---------------------------------------------------------------- conversations

CONTENTS = {
    "hello": "Hello!",
    "empty": "",
    "multiline": "Line one\nLine two\n\n  indented line\n",
    "chinese": "用一句话介绍 vLLM。",
    "unicode": "Café naïve — ünïcödé ✓ 🚀 «quotes» ‘single’",
    "padded": "   padded content \t\n",
    "templating": "{{ not a tag }} {% raw %} {# nor a comment #}",
    "quotes": 'He said "hi" \\ back\\slash \'apostrophe\'',
    "crlf": "windows\r\nline endings\r\n",
    "math": "2+2? And 3*3.",
}

THINK = "<think>\nLet me add: 2 + 2 = 4.\n</think>\n\nThe answer is 4."

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_web", "description": "Search the web; returns “snippets” (ünïcode).",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "default": 5, "minimum": 1},
            "score": {"type": "number", "default": 0.5}},
            "required": ["query"]}}},
]


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def system(text):
    return {"role": "system", "content": text}


def tool_call(name, arguments, call_id="call12345"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def plain_conversations():
    c = CONTENTS
    convs = [[user(c[k])] for k in c]
    convs += [[system("You are a helpful assistant."), user(c[k])] for k in ("hello", "chinese", "multiline")]
    convs += [[system(c["empty"]), user(c["hello"])]]
    turns = [user("2+2?"), assistant("4"), user(c["unicode"]), assistant(c["multiline"]),
             user(c["padded"]), assistant(c["quotes"]), user(c["templating"]), assistant(c["chinese"])]
    for n in range(2, 9):
        convs.append(turns[:n])
        convs.append([system("Be brief.\nAnswer in English.")] + turns[:n])
    convs.append([user("2+2?"), assistant(THINK), user("and 3+3?")])
    convs.append([user("2+2?"), assistant(THINK)])
    convs.append([user(c["empty"]), assistant(c["empty"])])
    return convs


def error_conversations():
    return [
        [user("a"), user("b")],                       # roles do not alternate
        [assistant("first"), user("then")],           # assistant first
        [system("sys"), assistant("a"), user("b")],
        [user("a"), assistant("b"), assistant("c")],
        [user("hi"), {"role": "narrator", "content": "unknown role"}],
    ]


def tool_conversations():
    weather = {"city": "Paris", "unit": "celsius"}
    result = '{"temperature": 21.5, "sky": "sunny"}'
    convs = []
    for arguments in (weather, json.dumps(weather)):
        for content in ("", None):
            convs.append([user("What's the weather in Paris?"),
                          {"role": "assistant", "content": content, "tool_calls": [tool_call("get_weather", arguments)]},
                          {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": result},
                          assistant("It is 21.5 °C and sunny in Paris.")])
    convs.append([system("Use tools when useful."), user("Weather in Paris and Lyon?"),
                  {"role": "assistant", "content": "Checking both.",
                   "tool_calls": [tool_call("get_weather", {"city": "Paris"}, "call00001"),
                                  tool_call("get_weather", {"city": "Lyon"}, "call00002")]},
                  {"role": "tool", "tool_call_id": "call00001", "content": "sunny"},
                  {"role": "tool", "tool_call_id": "call00002", "content": "rainy"},
                  user("Thanks!")])
    convs.append([user("Search for jinja"),
                  {"role": "assistant", "content": "", "tool_calls": [tool_call("brave_search", {"query": "jinja"})]},
                  {"role": "tool", "tool_call_id": "call12345", "content": "Jinja is a template engine."}])
    convs.append([user("bad id"),
                  {"role": "assistant", "content": "", "tool_calls": [tool_call("get_weather", weather, "short")]}])
    convs.append([user("2+2?"), assistant("<tool_response>\n4\n</tool_response>"),
                  {"role": "user", "content": "<tool_response>\nok\n</tool_response>"}])
    return convs


# ---------------------------------------------------------------- feature snippets

def feature_context():
    return {
        "messages": [system("You are terse."), user("Hi there, how are you?"), assistant("Fine!"),
                     user("Tell me\nabout Jinja.")],
        "d": {"b": 2, "a": 1, "items": "key named items", "nested": {"x": [1, 2, {"y": "z"}]}},
        "l": [3, 1, 2, "x"],
        "nums": [5, 3, 8, 1, 9, 2],
        "words": ["banana", "Apple", "cherry", "apple"],
        "s": "  Hello, World! \n",
        "u": "Grüße, 世界 🌍",
        "n": None,
        "t": True,
        "f": 2.5,
        "i": 7,
        "people": [{"name": "Bo", "age": 30, "tags": ["a"]}, {"name": "al", "age": 25},
                   {"name": "Cy", "age": 30, "tags": []}],
        "tools": TOOLS,
        "add_generation_prompt": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }


def feature_snippets():
    return [line for line in FEATURE_SNIPPETS.split("\n====\n") if line]


def make_environment():
    """transformers.utils.chat_template_utils._compile_jinja_template, minus
    the AssistantTracker extension ({% generation %}), with a fixed clock."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_content(token):
    if isinstance(token, dict):  # {"__type": "AddedToken", "content": ...}
        return token.get("content")
    return token


# name -> (special tokens, tool support, extra kwargs variants)
TEMPLATE_SETTINGS = {
    "chatml": ({"eos_token": "<|im_end|>"}, False, [{}]),
    "llama2": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, False, [{}]),
    "mistral_v0_1": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, False, [{}]),
    "mistral_v0_3": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, True, [{}]),
    "gemma": ({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, False, [{}]),
    "zephyr": ({"bos_token": "<s>", "eos_token": "</s>"}, False, [{}]),
    "phi3": ({"bos_token": "<s>", "eos_token": "<|endoftext|>"}, False, [{}]),
    "qwen2_5": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, True, [{}]),
    "llama3_1_tools": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, True,
                       [{}, {"tools_in_user_message": False, "date_string": "01 Jan 2025"},
                        {"builtin_tools": ["brave_search", "wolfram_alpha"]}]),
    "llama3_2": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, True, [{}]),
    "features_kitchen_sink": ({"bos_token": "<s>", "eos_token": "</s>"}, True, [{}]),
    "features_whitespace": ({"bos_token": "<s>", "eos_token": "</s>"}, False, [{}]),
    "tokenizer:qwen3": (None, True, [{}, {"enable_thinking": False}]),
    "tokenizer:llama3_1": (None, False, [{}]),
    "tokenizer:deepseek_v3": (None, True, [{}]),
}


def load_templates():
    templates = {}
    for path in sorted((DATA / "chat" / "templates").glob("*.jinja")):
        templates[path.stem] = (path.read_text(encoding="utf-8"), None)
    for name in ("qwen3", "llama3_1", "deepseek_v3"):
        config = json.loads((DATA / "tokenizers" / name / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokens = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            content = token_content(config.get(key))
            if content is not None:
                tokens[key] = content
        templates["tokenizer:" + name] = (config["chat_template"], tokens)
    missing = set(templates) ^ set(TEMPLATE_SETTINGS)
    if missing:
        sys.exit(f"templates and TEMPLATE_SETTINGS disagree: {sorted(missing)}")
    return templates


def render(env, source, context):
    try:
        return {"text": env.from_string(source).render(**context)}
    except Exception as e:  # noqa: BLE001 - every error is a reference outcome
        return {"error": str(e), "error_type": type(e).__name__}


def matrix_contexts(supports_tools, tokens, kwarg_variants):
    """Every conversation without tools; with a tools list, the tool-calling
    conversations and a few plain ones. Each with and without the generation
    prompt, and each template's extra kwargs variants."""
    plain = plain_conversations() + error_conversations()
    runs = [(conv, None) for conv in plain]
    if supports_tools:
        runs += [(conv, None) for conv in tool_conversations()]
        runs += [(conv, TOOLS) for conv in plain[:3] + plain[10:12] + tool_conversations()]
    for conversation, tools in runs:
        for kwargs in kwarg_variants:
            for add_generation_prompt in (True, False):
                # As apply_chat_template calls render(): messages, tools,
                # documents, add_generation_prompt, special tokens, kwargs.
                yield {"messages": conversation, "tools": tools, "documents": None,
                       "add_generation_prompt": add_generation_prompt, **tokens, **kwargs}


def matrix_cases(env, templates):
    cases = []
    for name, (source, config_tokens) in templates.items():
        tokens, supports_tools, kwarg_variants = TEMPLATE_SETTINGS[name]
        tokens = config_tokens if config_tokens is not None else tokens
        for context in matrix_contexts(supports_tools, tokens, kwarg_variants):
            cases.append({"template": name, "context": context, **render(env, source, context)})
    return cases


def feature_cases(env):
    context = feature_context()
    cases = [{"source": source, **render(env, source, context)} for source in feature_snippets()]
    return {"context": context, "cases": cases}


def write_json(path, data):
    # One case per line keeps diffs readable.
    if isinstance(data, list):
        text = "[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in data) + "\n]\n"
    else:
        text = ("{\"context\": " + json.dumps(data["context"], ensure_ascii=False) + ",\n\"cases\": [\n" +
                ",\n".join(json.dumps(c, ensure_ascii=False) for c in data["cases"]) + "\n]}\n")
    path.write_text(text, encoding="utf-8")


def main():
    env = make_environment()
    templates = load_templates()
    out_dir = DATA / "chat"
    cases = matrix_cases(env, templates)
    write_json(out_dir / "references.json", cases)
    features = feature_cases(env)
    write_json(out_dir / "features.json", features)
    errors = sum("error" in c for c in cases)
    raised = sum(c.get("error_type") == "TemplateError" for c in cases)
    print(f"jinja2 {jinja2.__version__}: {len(cases)} matrix cases ({errors} errors, {raised} raise_exception) "
          f"over {len(templates)} templates; {len(features['cases'])} feature snippets "
          f"({sum('error' in c for c in features['cases'])} errors)")


# One template per snippet, separated by lines "====". Each is rendered with
# feature_context(); outputs and errors both become references.
FEATURE_SNIPPETS = r"""
plain text only
====
{{ 'a' }}{{ "b" }}{{ 'c' 'd' }}|{{ 'it\'s' }}|{{ "tab\tnew\nline\\" }}|{{ '\x41\u00e9\U0001F600\101\q' }}
====
{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 3.14 }} {{ 1e3 }} {{ 2.5E-3 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ 100.0 }} {{ 1/3 }}
====
{{ true }} {{ false }} {{ True }} {{ False }} {{ none }} {{ None }} {{ [] }} {{ {} }} {{ () }}
====
{{ [1, 'a', none, true, 2.0, [3], {'k': 'v'}] }} {{ (1, 'b') }} {{ (1,) }} {{ {'a': 1, 'b': [none]} }}
====
{{ ["it's", 'say "hi"', 'both \' and "', 'new\nline', 'back\\slash', 'tab\t', '\x07bell', 'é世🌍', '\u00a0nbsp'] }}
====
{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}
====
{{ 7.5 // 2 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 2.0 ** 3 }} {{ 1 + 2.0 }} {{ true + true }} {{ true * 3 }} {{ 10 - false }}
====
{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'xy' }} {{ [1, 2] + [3] }} {{ [0] * 3 }} {{ (1,) + (2,) }} {{ 'a' ~ 1 ~ none ~ true ~ undefined_var ~ 2.0 }}
====
{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }} {{ 1 + 1 ~ 1 + 1 }}
====
{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ none == none }} {{ 1 != 2 }}
====
{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 3 > 2 > 1 }} {{ 1 == 1 == 1 }} {{ 1 < 2 == 2 }}
====
{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'b' in d }} {{ 'q' in d }} {{ 3 not in l }} {{ 'x' in undefined_var }}
====
{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ none or 'fallback' }} {{ 'a' and '' }} {{ not 0 }} {{ not 'x' }} {{ not not 1 }} {{ [] or {} or 0 }}
====
{{ 'yes' if t else 'no' }} {{ 'yes' if n else 'no' }} [{{ 'shown' if false }}] {{ 1 if 0 else 2 if 0 else 3 }} {{ ('a' if t else 'b') | upper }}
====
{% if i > 10 %}big{% elif i > 5 %}medium{% elif i > 0 %}small{% else %}none{% endif %}|{% if n %}x{% else %}y{% endif %}|{% if not d %}e{% endif %}
====
{{ d.a }} {{ d['b'] }} {{ d.nested.x[2].y }} {{ d['nested']['x'][0] }} {{ d.missing }}|{{ d.items is callable }}|{{ d['items'] }}|{{ d.items() | length }}
====
{{ l[0] }} {{ l[-1] }} {{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-1] }} {{ l[10:] }} {{ l[5] }}|{{ l[1::-1] }} {{ l[-10:2] }}
====
{{ u[0] }} {{ u[-1] }} {{ u[1:4] }} {{ u[::-1] }} {{ u | length }} {{ u[7:9] }} {{ 'hello'[1:-1] }} {{ 'hello'[::2] }} {{ 'abc'.0 }}
====
{{ messages[0].content }} {{ messages[-1]['role'] }} {{ messages | length }} {{ (messages | last).content }} {{ messages[1:] | map(attribute='role') | join(',') }}
====
{{ undefined_var }}|{{ undefined_var is defined }}|{{ undefined_var is undefined }}|{{ d.nope is defined }}|{{ n is none }}|{{ n is defined }}|{{ n.attr }}|{{ undefined_var | default('dflt') }}|{{ n | default('dflt') }}|{{ '' | default('empty', true) }}|{{ 0 | d('zero', boolean=true) }}
====
{{ undefined_var.attr }}
====
{{ d.missing.deeper }}
====
{{ n.a.b }}
====
{{ undefined_var + 1 }}
====
{{ undefined_var < 1 }}
====
{% for x in undefined_var %}{{ x }}{% else %}empty loop{% endfor %} {{ undefined_var | length }} {{ undefined_var | list }} {{ undefined_var == undefined_var }} {{ undefined_var is iterable }} {{ undefined_var | string }}|{{ undefined_var | trim }}|
====
{{ 'a' + 1 }}
====
{{ 1 + 'a' }}
====
{{ n + 'a' }}
====
{{ [1] + (2,) }}
====
{{ 1 / 0 }}
====
{{ 5 // 0 }}
====
{{ 1 < 'a' }}
====
{% for x in n %}{{ x }}{% endfor %}
====
{% for x in 5 %}{{ x }}{% endfor %}
====
{{ 1 in 'abc' }}
====
{{ i() }}
====
{{ l.append(4) }}
====
{{ d.update({'x': 1}) }}
====
{{ raise_exception('Custom failure: ' ~ messages | length) }}
====
before {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }} after
====
{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}
====
{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else 'START' }}>{{ m.role }}>{{ loop.nextitem.role if loop.nextitem is defined else 'END' }} {% endfor %}
====
{% for x in nums %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %} {% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}
====
{% for x in nums if x is odd %}{{ x }}@{{ loop.index }}/{{ loop.length }} {% endfor %}
====
{% for x in nums %}{% if x == 8 %}{% continue %}{% endif %}{% if x == 9 %}{% break %}{% endif %}{{ x }}{% endfor %}
====
{% for x in [] %}{{ x }}{% else %}nothing{% endfor %} {% for x in nums if x > 100 %}{{ x }}{% else %}filtered all{% endfor %}
====
{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }},{% endfor %} {% for a, b in [(1, 2), [3, 4]] %}{{ a + b }} {% endfor %}
====
{% for k, v in d | items %}{{ k }}{% endfor %} {% for k, v in d | dictsort %}{{ k }}:{{ v }} {% endfor %}
====
{% for c in 'héllo' %}{{ c }}.{% endfor %} {% for row in [[1, 2], [3]] %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %};{% endfor %}
====
{% for a, b in [(1, 2, 3)] %}{{ a }}{% endfor %}
====
{% for x in [1, 2] %}{% set inner = x %}{% endfor %}[{{ inner }}]
====
{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i + 5 %}{{ x }}{% endfor %}{{ x }}
====
{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}
====
{% set outer = 'o' %}{% for i in [1] %}{% for j in [1] %}{{ outer }}{{ loop.index }}{% endfor %}{% endfor %}
====
{% for x in [1, 2] %}{% set outer_loop = loop %}{% for y in [1, 2] %}{{ outer_loop.index }}{{ loop.index }} {% endfor %}{% endfor %}
====
{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set ns.total = ns.total + p.age %}{% set ns.names = ns.names + [p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }} {{ ns.missing is defined }}
====
{% set ns = namespace() %}{% set ns.a = 1 %}{% set ns.b = ns.a + 1 %}{{ ns.a }}{{ ns.b }} {% set ns2 = namespace({'k': 'v'}, z=3) %}{{ ns2.k }}{{ ns2.z }} {{ ns2['k'] }}
====
{% set x = 5 %}{% set x.attr = 1 %}
====
{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }} {% set c, d2 = 'xy' %}{{ c }}{{ d2 }}
====
{% set block %}Inner {{ i }}
text{% endset %}[{{ block }}] {% set shout | upper %}quiet {{ i }}{% endset %}{{ shout }}
====
{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}
====
{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} {{ greet(name='Di', greeting='Yo') }}
====
{% macro show(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}|{{ varargs }}|{{ kwargs }}]{% endmacro %}{{ show(1) }}{{ show(1, 2, 3, 4) }}{{ show(1, extra='e') }}
====
{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}
====
{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ m() }}
====
{% macro m() %}{% set local = 1 %}{{ local }}{% endmacro %}{{ m() }}[{{ local }}]
====
{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ i }}{% endcall %}
====
{% macro list_items(items) %}{% for it in items %}{{ caller(it, loop.index) }}{% endfor %}{% endmacro %}{% call(x, n) list_items(['a', 'b']) %}{{ n }}={{ x }};{% endcall %}
====
{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}
====
{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}
====
{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}
====
{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}
====
{% macro m() %}[{{ caller is defined }}]{{ caller() if caller is defined }}{% endmacro %}{{ m() }}{% call m() %}body{% endcall %}
====
{% macro m() %}{{ kwargs }}{{ varargs }}{% endmacro %}{{ m(1, x=1, caller=2) }}
====
{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('hey') }}
====
{% filter upper %}up {{ i }}{% endfilter %} {% filter replace('a', 'b') | title %}banana split{% endfilter %}
====
{% with a = 1, b = i %}{{ a }}{{ b }}{% set c = 3 %}{{ c }}{% endwith %}[{{ a }}][{{ c }}]
====
{{ s | trim }}|{{ s | trim('! \n') }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H\n') }}|{{ 'xxhixx'.strip('x') }}|{{ '\u3000wide\u3000' | trim }}|{{ '\u200bzw' | trim }}
====
{{ s | upper }} {{ s | lower }} {{ 'hello world' | capitalize }} {{ 'hELLO wORLD' | capitalize }} {{ 'hello-world (foo)[bar] {baz} <q>' | title }} {{ "it's a dog's life" | title }} {{ "it's a dog's life".title() }} {{ 'ab_cd ef2gh' .title() }}
====
{{ 'a,b,,c'.split(',') }} {{ 'a b  c\n d'.split() }} {{ '  lead trail  '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.rsplit(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a\u3000b'.split() }}
====
{{ 'x'.split('') }}
====
{{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }} {{ 'ab'.replace('', '-') }} {{ 'hello' | replace('l', '') }} {{ 'aaa' | replace('a', 'b', 2) }}
====
{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }} {{ 'hello'.find('l', 3) }} {{ 'aaa'.count('') }}
====
{{ 'hello'.index('z') }}
====
{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.endswith('l', 0, 3) }} {{ 'hello'.startswith('l', 2) }}
====
{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ ' \t'.isspace() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }} {{ ''.isdigit() }} {{ 'Hello World'.istitle() }}
====
{{ 'ab'.center(6) }}|{{ 'ab'.center(7, '*') }}|{{ 'ab'.ljust(5, '.') }}|{{ 'ab'.rjust(5) }}|{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}|{{ 'abc' | center(9) }}|
====
{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ '-'.join(['a', 'b']) }} {{ ''.join('xyz') }} {{ 'Hello'.swapcase() }} {{ 'prefix_x'.removeprefix('prefix_') }}
====
{{ '-'.join([1, 2]) }}
====
{{ 'line1\nline2\r\nline3\n'.splitlines() }} {{ 'a\n\nb'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }}
====
{{ '{} and {}'.format('a', 'b') }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Zed') }} {{ '{{literal}} {}'.format(1) }} {{ '{0!r}'.format('q') }} {{ '{:>5}|{:<4}|{:^6}'.format('r', 'l', 'c') }} {{ '{:.2f} {:05d}'.format(3.14159, 42) }}
====
{{ '%s is %d years' % ('Bo', 30) }} {{ '%s' % 'x' }} {{ '%5s|%-5s|' % ('r', 'l') }} {{ '%.2f %05d %x %%' % (3.14159, 42, 255) }} {{ '%r' % 'q' }} {{ '%s-%s' | format('a', 'b') }}
====
{{ '%d' % 'x' }}
====
{{ l | length }} {{ d | length }} {{ s | length }} {{ u | count }} {{ [] | length }} {{ messages | length }}
====
{{ i | length }}
====
{{ l | first }} {{ l | last }} {{ 'xyz' | first }} {{ 'xyz' | last }} {{ d | first }} {{ [] | first is defined }} {{ nums | min }} {{ nums | max }} {{ words | min }} {{ words | max }} {{ words | max(case_sensitive=true) }} {{ people | max(attribute='age') }}
====
{{ nums | sum }} {{ people | sum(attribute='age') }} {{ [0.5, 0.25] | sum }} {{ nums | sum(start=100) }}
====
{{ words | join(', ') }} {{ nums | join }} {{ people | join('/', attribute='name') }} {{ [1, none, 'a'] | join('-') }}
====
{{ nums | sort }} {{ nums | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ people | sort(attribute='age') | map(attribute='name') | list }} {{ people | sort(attribute='age,name') | map(attribute='name') | list }} {{ people | sort(attribute='name', reverse=true) | map(attribute='name') | join }}
====
{{ [3, 1, 'a'] | sort }}
====
{{ [1, 2, 1, 3, 2] | unique | list }} {{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ people | unique(attribute='age') | map(attribute='name') | list }}
====
{{ l | reverse | list }} {{ 'abc' | reverse }} {{ d | reverse | list }} {{ l | list }} {{ 'ab' | list }} {{ d | list }} {{ (1, 2) | list }}
====
{{ people | map(attribute='name') | list }} {{ people | map(attribute='tags') | list }} {{ people | map(attribute='tags', default=['none']) | list }} {{ words | map('upper') | list }} {{ words | map('replace', 'a', '@') | list }} {{ people | map(attribute='tags.0') | list }}
====
{{ nums | select('odd') | list }} {{ nums | reject('odd') | list }} {{ nums | select('greaterthan', 4) | list }} {{ nums | select('lt', 4) | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ l | select('string') | list }} {{ l | reject('number') | list }} {{ nums | select('divisibleby', 3) | list }} {{ nums | select('in', [1, 2, 3]) | list }}
====
{{ people | selectattr('age', 'equalto', 30) | map(attribute='name') | list }} {{ people | rejectattr('age', 'eq', 30) | map(attribute='name') | list }} {{ people | selectattr('tags') | map(attribute='name') | list }} {{ people | selectattr('tags', 'defined') | map(attribute='name') | list }} {{ people | rejectattr('tags', 'undefined') | list | length }} {{ messages | selectattr('role', 'ne', 'user') | map(attribute='content') | list }}
====
{{ nums | select('nosuchtest') | list }}
====
{{ words | map('nosuchfilter') | list }}
====
{{ d | items | list }} {{ d.keys() | list }} {{ d.values() | list | length }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.copy() == d }} {{ {'a': 1} == {'a': 1.0} }}
====
{{ d | dictsort }} {{ {'b': 1, 'A': 2, 'a': 3} | dictsort }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort(by='value') }} {{ {'b': 1, 'A': 2} | dictsort(true, reverse=true) }}
====
{{ nums | batch(4) | list }} {{ nums | batch(4, 'x') | list }} {{ [1, 2, 3].index(2) }} {{ [1, 2, 2].count(2) }}
====
{{ '42' | int }} {{ '42.9' | int }} {{ 'x' | int }} {{ 'x' | int(-1) }} {{ 3.99 | int }} {{ -3.99 | int }} {{ ' 7 ' | int }} {{ '1_000' | int }} {{ true | int }} {{ n | int }}
====
{{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ '1e3' | float }} {{ 'x' | float(1.5) }} {{ -5 | abs }} {{ -2.5 | abs }} {{ -1 | abs + 1 }}
====
{{ 2.567 | round }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(1, 'floor') }} {{ 2.561 | round(1, 'ceil') }} {{ 7 | round }} {{ 0.125 | round(2) }}
====
{{ 'one two  three\nfour-five' | wordcount }} {{ u | wordcount }} {{ '' | wordcount }}
====
{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb\n\nc' | indent(2, true) }}|{{ 'a\nb\n\nc' | indent(2, blank=true) }}|{{ 'x\ny' | indent('> ') }}|{{ '' | indent(first=true) }}
====
{{ '<a href="x">&\'</a>' | e }} {{ '<b>' | escape }} {{ '<b>' | safe }} {{ 42 | string ~ '!' }} {{ [1] | string }} [{{ d.nested | attr('x') }}] {{ d | attr('items') is callable }} {{ undefined_var | attr('x') is defined }}
====
{{ d | tojson }} {{ l | tojson }} {{ 'é"\n\t\u2028<>&\'' | tojson }} {{ n | tojson }} {{ t | tojson }} {{ f | tojson }} {{ 1e16 | tojson }} {{ (1, 2) | tojson }} {{ [] | tojson(indent=2) }} {{ {} | tojson }}
====
{{ d | tojson(indent=2) }}
{{ d | tojson(indent=0) }}
{{ d | tojson(sort_keys=true) }}
{{ d | tojson(separators=(',', ':')) }}
{{ u | tojson(ensure_ascii=true) }}
{{ tools | tojson(indent='\t') }}
====
{{ undefined_var | tojson }}
====
{{ tools[0] | tojson }}
{{ tools[1].function.parameters | tojson(indent=4) }}
====
{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3 is number }} {{ 3.0 is integer }} {{ 3 is integer }} {{ 3.0 is float }} {{ true is number }} {{ true is integer }} {{ true is boolean }} {{ 1 is boolean }}
====
{{ 'a' is string }} {{ l is string }} {{ d is mapping }} {{ l is mapping }} {{ l is sequence }} {{ 'a' is sequence }} {{ d is sequence }} {{ 3 is sequence }} {{ d is iterable }} {{ 3 is iterable }} {{ 'x' is iterable }}
====
{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ n is none }} {{ 0 is none }} {{ n is not none }} {{ 'x' is not string }} {{ range is callable }} {{ i is callable }}
====
{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is le 2 }} {{ 3 is gt 2 }} {{ 3 is ge 4 }} {{ 2 is in [1, 2] }} {{ 'a' is in 'abc' }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ n is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }}
====
{{ i is divisibleby 2 and i is odd }} {{ not i is even }} {{ i is not even or false }} {{ (i is odd) ~ '!' }}
====
{{ x is defined if true else 2 }}
====
{{ range(5) | list }} {{ range(2, 5) | list }} {{ range(10, 0, -3) | list }} {{ range(0) | list }} {% for i in range(3) %}{{ i }}{% endfor %} {{ range(3) | length }}
====
{{ dict(a=1, b='x') }} {{ dict({'a': 1}, c=2) }} {{ dict() }} {{ dict([('k', 'v')]) }}
====
{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %B %j %a %H:%M:%S %y %m %e %p %I %U %w') }}
====
{% set j = joiner(', ') %}{% for m in messages %}{{ j() }}{{ m.role }}{% endfor %}
====
{% if messages[0].role == 'system' %}{% set system = messages[0].content %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}{{ system | default('none') }}: {% for m in rest %}{{ m.role[0] | upper }}{% endfor %}
====
   {% if true %}
   indented block tag
   {% endif %}
 text {{ 'var' }}
  {{ 'indented var' }}
	{# tab comment #}
	done
====
a {%- if true %} b {% endif -%} c
 {%- for x in [1, 2] -%}
   [{{ x }}]
 {%- endfor %}
d {{- ' e ' -}} f
{%+ if true %}kept{% endif +%}
g
====
{% for x in [1, 2] %}
  {{ x }}
{% endfor %}
after

====
line1
{# comment #}
line2
{#- stripped comment -#}
line3
  {# indented comment #}
line4
====
{% raw %}{{ raw }} {% if %}{% endraw %} {%- raw -%}  both  {%- endraw -%} !
====
windows line	endings{% if true %}
yes{% endif %}
====
{{ 'unterminated }}
====
{% if true %}no end
====
{% for x in l %}{% endif %}
====
{% unknowntag %}
====
{{ 1 + }}
====
{{ x | nosuchfilter }}
====
{{ x is nosuchtest }}
====
{% endfor %}
====
{{ (1, 2 }}
====
{% break %}
====
{{ [1, 2][:: 0] }}
====
{{ 'abc'[1.5] }}
====
{{ messages.0.content }} {{ messages[0]['content'][:3] }} {{ (messages | selectattr('role', 'equalto', 'user') | first).content }}
====
{{ messages | map(attribute='content') | map('length') | list }} {{ messages | map(attribute='content') | map('truncate_missing') if false }}
====
{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}
====
{{ tools | map(attribute='function') | map(attribute='name') | join(' ') }} {{ tools[0].function.parameters.required }} {{ tools[1]['function']['parameters']['properties'] | list }}
====
{{ tools[0].function.parameters.properties.unit.enum | tojson }} {{ tools | length }} {% for t in tools %}{{ t.type }}:{{ t.function.name | upper }} {% endfor %}
====
{{ messages[0] }}
====
{{ add_generation_prompt }} {{ bos_token ~ eos_token }} {{ bos_token + 'x' + eos_token }}
====
{{ d.b is number and d.a < d.b }} {{ l[1:] | sort(attribute=none) if false else 'skip' }}
""".strip("\n")


if __name__ == "__main__":
    main()
