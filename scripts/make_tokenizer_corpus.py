#!/usr/bin/python3
"""Generates the tokenizer test corpus: tests/data/tokenizers/corpus/input.json.

Deterministic (fixed seed). At least 500 strings per tokenizer: random
Unicode from many scripts, whitespace runs, digits, code, special-token text
(each tokenizer's own), emoji sequences, contractions, combining marks.
The reference ids come from Hugging Face `tokenizers` on the GPU host
(scripts/tokenizer_reference.py), never from troupe itself.

Also writes tests/data/tokenizers/corpus/bench.txt: a ~1 MB mixed document
(English prose, code, Chinese, emoji) for the encode-throughput benchmark.
"""
import json
import os
import random

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "tokenizers", "corpus")

SCRIPTS = {
    "latin": (0x0041, 0x024F), "greek": (0x0370, 0x03FF), "cyrillic": (0x0400, 0x04FF),
    "armenian": (0x0531, 0x058F), "hebrew": (0x05D0, 0x05EA), "arabic": (0x0620, 0x064A),
    "devanagari": (0x0900, 0x097F), "bengali": (0x0980, 0x09FF), "thai": (0x0E01, 0x0E5B),
    "georgian": (0x10A0, 0x10FF), "hangul": (0xAC00, 0xD7A3), "hiragana": (0x3041, 0x3096),
    "katakana": (0x30A1, 0x30FA), "cjk": (0x4E00, 0x9FFF), "cjk_ext_a": (0x3400, 0x4DBF),
    "ethiopic": (0x1200, 0x137F), "tamil": (0x0B80, 0x0BFF), "math": (0x2200, 0x22FF),
    "arrows": (0x2190, 0x21FF), "box": (0x2500, 0x257F), "fullwidth": (0xFF01, 0xFF5E),
    "combining": (0x0300, 0x036F), "punct": (0x2010, 0x205E),
}
WHITESPACE = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", " \n ", "\t\t", "\u200b"]
EMOJI = ["😀", "👍🏽", "🇨🇳", "🇫🇷", "👨\u200d👩\u200d👧", "❤️", "1️⃣", "🏳️\u200d🌈", "🧑🏿\u200d💻", "🙂", "🚀", "✨", "🤖"]
CODE = [
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "const x = arr.map((v) => v * 2).filter(Boolean);",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n}\n",
    "<div class=\"a\">&nbsp;<span>x</span></div>",
    "    if self.x is None:\n        raise ValueError('x')\n",
    "$ ls -la | grep '\\.txt$' && echo \"done\"",
    "{\"key\": [1, 2.5, -3e10, true, null], \"s\": \"a\\\"b\"}",
]
WORDS = ("the quick brown fox jumps over lazy dog inference server token batch cache "
         "prefill decode attention kernel model weight throughput latency").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'D"]
SPECIALS = {
    "qwen3": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"],
    "llama3_1": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|reserved_special_token_5|>"],
    "llama2": ["<s>", "</s>", "<unk>"],
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
}


def script_text(rng, name, n):
    lo, hi = SCRIPTS[name]
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def mixed(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.25:
            parts.append(script_text(rng, rng.choice(list(SCRIPTS)), rng.randint(1, 12)))
        elif kind < 0.4:
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 3))
        elif kind < 0.5:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
        elif kind < 0.6:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        elif kind < 0.75:
            parts.append(" ".join(rng.choice(WORDS).capitalize() if rng.random() < 0.2 else rng.choice(WORDS)
                                  for _ in range(rng.randint(1, 6))))
        elif kind < 0.85:
            parts.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS))
        else:
            parts.append(rng.choice(CODE))
        if rng.random() < 0.5:
            parts.append(rng.choice([" ", "", "\n", ", ", ". ", "!", "?", "...", "—"]))
    return "".join(parts)


def cases(rng):
    out = []
    for name in SCRIPTS:
        for n in (1, 3, 17):
            out.append(script_text(rng, name, n))
    for ws in WHITESPACE:
        out += [ws, "a" + ws + "b", ws * 5 + "x" + ws * 3, "x" + ws * 7]
    for d in ("0", "7", "42", "123", "1234", "12345", "1234567", "3.14159", "1,000,000", "1e-9", "٠١٢٣", "१२३"):
        out += [d, "abc" + d, d + " apples", " " + d]
    out += CODE
    out += ["".join(EMOJI), " ".join(EMOJI)] + EMOJI
    for c in CONTRACTIONS:
        out += ["it" + c, "IT" + c + " here", "x" + c + c]
    out += ["café", "cafe\u0301", "naïve", "nai\u0308ve", "Å", "A\u030a", "ﬁ ﬂ", "Ǆ ǅ ǆ", "ß ẞ", "İstanbul"]
    for _ in range(320):
        out.append(mixed(rng))
    return out


def with_specials(rng, base, specials):
    out = list(base)
    for s in specials:
        out += [s, s + s, "x" + s + "y", " " + s + " ", s + "\n" + s, "<" + s[1:], s[:-1]]
    for _ in range(40):
        text = mixed(rng)
        pos = rng.randint(0, len(text))
        out.append(text[:pos] + rng.choice(specials) + text[pos:])
    return out


def bench_document(rng):
    pieces = []
    size = 0
    prose = ("Large language model serving is limited by memory bandwidth during decode and by compute "
             "during prefill. Paged attention stores the KV cache in fixed-size blocks so that memory "
             "is not wasted on padding, and continuous batching keeps the GPU busy. ")
    chinese = "大模型推理分为两个阶段：预填充阶段和解码阶段。分页注意力将键值缓存存储在固定大小的块中。"
    while size < 1_000_000:
        kind = rng.random()
        if kind < 0.5:
            p = prose
        elif kind < 0.75:
            p = rng.choice(CODE)
        elif kind < 0.92:
            p = chinese
        else:
            p = " ".join(rng.choice(EMOJI) for _ in range(5)) + " "
        pieces.append(p)
        size += len(p.encode("utf-8"))
    return "".join(pieces)


def main():
    rng = random.Random(20261121)
    base = cases(rng)
    corpus = {name: with_specials(random.Random(sum(map(ord, name))), base, specials)
              for name, specials in SPECIALS.items()}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "input.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False, indent=0)
    with open(os.path.join(OUT, "bench.txt"), "w", encoding="utf-8") as f:
        f.write(bench_document(rng))
    for name, texts in corpus.items():
        print(name, len(texts), "strings")


if __name__ == "__main__":
    main()
