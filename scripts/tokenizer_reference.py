#!/usr/bin/env python3
"""Reference encodings and encode throughput from Hugging Face `tokenizers`.

Runs where the Python `tokenizers` package is (the GPU host has 0.23.2):
  python3 scripts/tokenizer_reference.py OUT_DIR
For every tokenizer in tests/data/tokenizers/ it encodes each string of
corpus/input.json (add_special_tokens=False) and decodes the ids
(skip_special_tokens=False), writing OUT_DIR/<name>.json as
{"reference": ..., "cases": [{"text", "ids", "decoded"}]}; then measures
single-threaded encode throughput on corpus/bench.txt (best of 5) and writes
OUT_DIR/hf_bench.json.
"""
import json
import os
import platform
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "data", "tokenizers")


def best_of(fn, n=5):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(DATA, "corpus", "input.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    with open(os.path.join(DATA, "corpus", "bench.txt"), encoding="utf-8") as f:
        doc = f.read()
    lines = [l for l in doc.split("\n") if l]
    nbytes = len(doc.encode("utf-8"))
    bench = {"tokenizers": tokenizers.__version__, "python": platform.python_version(),
             "cpu": platform.processor() or platform.machine(), "bytes": nbytes, "results": {}}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    bench["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for name, texts in corpus.items():
        tok = Tokenizer.from_file(os.path.join(DATA, name, "tokenizer.json"))
        cases = []
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"reference": "tokenizers " + tokenizers.__version__, "cases": cases}, f,
                      ensure_ascii=False)
        tok.encode(doc)  # warm caches the same way for both measurements
        whole = best_of(lambda: tok.encode(doc, add_special_tokens=False))
        per_line = best_of(lambda: [tok.encode(l, add_special_tokens=False) for l in lines])
        ntokens = len(tok.encode(doc, add_special_tokens=False).ids)
        bench["results"][name] = {"document_MBps": nbytes / whole / 1e6,
                                  "lines_MBps": nbytes / per_line / 1e6, "tokens": ntokens}
        print(name, len(cases), "cases;", json.dumps(bench["results"][name]), flush=True)
    with open(os.path.join(out_dir, "hf_bench.json"), "w") as f:
        json.dump(bench, f, indent=1)


if __name__ == "__main__":
    main()
