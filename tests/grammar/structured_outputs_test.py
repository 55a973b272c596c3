#!/usr/bin/python3
"""Structured outputs end to end, checked by an independent validator.

For every tokenizer of the fixtures (byte-level BPE: Qwen3, Llama 3.1,
DeepSeek-V3; SentencePiece-style with byte fallback: Llama 2), a small
random-weight model with that vocabulary runs `troupe run-batch` (the
server's routes, offline) over the corpus in tests/data/structured/corpus.json:
JSON Schemas (response_format json_schema, n = 2), json_object, regexes
(guided_regex), choices (guided_choice) and EBNF grammars (guided_grammar),
with JSON whitespace allowed and in the compact form. Every output that
finishes with "stop" must parse and validate: JSON Schemas with
python3-jsonschema, regexes with Python's re.fullmatch, choices by equality,
the grammars by equivalent Python checks. Outputs cut off by max_tokens
("length") are not checked (vLLM's behaviour), but most must finish. With
the Qwen3 tokenizer the batch runs again with async scheduling on (steps
planned ahead; constrained and penalized rows sampled once their last token
is back): every output must be the same.

Usage: structured_outputs_test.py TROUPE_BINARY REPO_ROOT
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

MODELS = [
    ("qwen3", "examples/models/qwen3-tiny-151k"),
    ("llama3_1", "tests/data/structured/models/llama3_1"),
    ("llama2", "tests/data/structured/models/llama2"),
    ("deepseek_v3", "tests/data/structured/models/deepseek_v3"),
]


def expr_ok(text):
    """root ::= expr; expr ::= term (("+"|"-") term)*; term ::= num | "(" expr ")"; num ::= [1-9][0-9]?"""
    pos = 0

    def term():
        nonlocal pos
        if pos < len(text) and text[pos] == "(":
            pos += 1
            if not expr() or pos >= len(text) or text[pos] != ")":
                return False
            pos += 1
            return True
        m = re.match(r"[1-9][0-9]?", text[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def expr():
        nonlocal pos
        if not term():
            return False
        while pos < len(text) and text[pos] in "+-":
            pos += 1
            if not term():
                return False
        return True

    return expr() and pos == len(text)


GRAMMAR_CHECKS = [
    expr_ok,
    lambda t: re.fullmatch(r"SELECT (\*|[a-z][a-z_]{0,7}(, [a-z][a-z_]{0,7})*) FROM [a-z][a-z_]{0,7}"
                           r"( WHERE [a-z][a-z_]{0,7} = [0-9]+)?", t) is not None,
]


def cases(corpus):
    """(custom_id, body, check) for every constraint of the corpus."""
    out = []
    for i, s in enumerate(corpus["schemas"]):
        for compact in (False, True):
            body = {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": s["name"], "schema": s["schema"]}},
                    "n": 2, "max_tokens": 320}
            if compact:
                body["structured_outputs"] = None
                body["response_format"]["json_schema"]["strict"] = True
            schema = s["schema"]
            out.append((f"schema-{s['name']}-{'compact' if compact else 'ws'}", body,
                        lambda t, schema=schema: jsonschema.validate(json.loads(t), schema) is None))
    out.append(("json-object", {"response_format": {"type": "json_object"}, "max_tokens": 320, "n": 2},
                lambda t: isinstance(json.loads(t), dict)))
    for i, r in enumerate(corpus["regexes"]):
        out.append((f"regex-{i}", {"guided_regex": r, "max_tokens": 64, "n": 2},
                    lambda t, r=r: re.fullmatch(r, t) is not None))
    for i, c in enumerate(corpus["choices"]):
        out.append((f"choice-{i}", {"guided_choice": c, "max_tokens": 32},
                    lambda t, c=c: t in c))
    for i, g in enumerate(corpus["grammars"]):
        out.append((f"grammar-{i}", {"guided_grammar": g, "max_tokens": 96, "n": 2}, GRAMMAR_CHECKS[i]))
    # Unconstrained rows whose sampler also reads the output so far: with the
    # constrained ones, sampled late when planned ahead (async scheduling).
    out.append(("penalty-0", {"frequency_penalty": 0.7, "max_tokens": 40}, None))
    out.append(("penalty-1", {"repetition_penalty": 1.3, "presence_penalty": 0.5, "max_tokens": 40}, None))
    return out


def run_model(troupe, root, tok_name, model, corpus, work, failures, compare_async=False):
    all_cases = cases(corpus)
    path_in = os.path.join(work, f"{tok_name}-in.jsonl")
    path_out = os.path.join(work, f"{tok_name}-out.jsonl")
    with open(path_in, "w") as f:
        for k, (cid, body, _) in enumerate(all_cases):
            b = {k2: v for k2, v in body.items() if v is not None}
            b.update({"model": "m", "prompt": "Reply:", "temperature": 1.0, "seed": 1000 + k})
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": b}) + "\n")
    compact_ids = {cid for cid, body, _ in all_cases if "structured_outputs" in body}
    args = [troupe, "run-batch", "-i", path_in, "-o", path_out, "--model", os.path.join(root, model),
            "--tokenizer", os.path.join(root, "tests/data/tokenizers", tok_name), "--served-model-name", "m",
            "--load-format", "dummy", "--backend", "cpu", "--dtype", "float32", "--seed", "0",
            "--max-model-len", "1024", "--cpu-kvcache-space", "1", "--max-num-seqs", "64"]
    # The compact cases run in a second batch with the server's compact option;
    # with compare_async, the first batch again with async scheduling on (the
    # CPU backend's debug switch): every text must be the same.
    results = {}
    runs = [False, True] + (["async"] if compare_async else [])
    for compact in runs:
        lines = [l for l in open(path_in) if (json.loads(l)["custom_id"] in compact_ids) == (compact is True)]
        suffix = {False: ".ws", True: ".compact", "async": ".async"}[compact]
        part_in = path_in + suffix
        part_out = path_out + suffix
        with open(part_in, "w") as f:
            f.writelines(lines)
        a = list(args)
        a[a.index(path_in)] = part_in
        a[a.index(path_out)] = part_out
        if compact is True:
            a += ["--structured-outputs-disable-any-whitespace"]
        env = dict(os.environ)
        if compact == "async":
            env["TROUPE_DEBUG_ASYNC_ON_CPU"] = "1"
        p = subprocess.run(a, capture_output=True, text=True, timeout=900, env=env)
        if p.returncode != 0:
            failures.append(f"{tok_name}: run-batch exited {p.returncode}: {p.stderr[-2000:]}")
            return None
        if compact == "async":
            if "async scheduling: on" not in p.stderr:
                failures.append(f"{tok_name}: the async run did not schedule ahead: {p.stderr[-800:]}")
            for line in open(part_out):
                rec = json.loads(line)
                base = results.get(rec["custom_id"])
                texts = [c["text"] for c in rec["response"]["body"].get("choices", [])]
                if base is None or texts != [c["text"] for c in base["response"]["body"]["choices"]]:
                    failures.append(f"{tok_name} {rec['custom_id']}: async scheduling changed the output: "
                                    f"{texts!r:.300}")
            continue
        for line in open(part_out):
            rec = json.loads(line)
            results[rec["custom_id"]] = rec
    stats = {"stop": 0, "length": 0}
    for cid, _, check in all_cases:
        rec = results.get(cid)
        if rec is None or rec["response"]["status_code"] != 200:
            failures.append(f"{tok_name} {cid}: no 200 response: {json.dumps(rec)[:400]}")
            continue
        if check is None:
            continue
        for choice in rec["response"]["body"]["choices"]:
            text, reason = choice["text"], choice["finish_reason"]
            stats[reason] = stats.get(reason, 0) + 1
            if reason != "stop":
                continue
            try:
                ok = check(text)
            except Exception as e:  # noqa: BLE001 - any validator failure is a test failure
                ok = False
                text += f"  [{type(e).__name__}: {str(e)[:200]}]"
            if not ok:
                failures.append(f"{tok_name} {cid}: output does not validate: {text!r}")
    return stats


def main():
    troupe, root = sys.argv[1], sys.argv[2]
    with open(os.path.join(root, "tests/data/structured/corpus.json")) as f:
        corpus = json.load(f)
    failures = []
    with tempfile.TemporaryDirectory(prefix="structured-") as work:
        for tok_name, model in MODELS:
            stats = run_model(troupe, root, tok_name, model, corpus, work, failures,
                              compare_async=tok_name == "qwen3")
            if stats is None:
                continue
            total = sum(stats.values())
            print(f"{tok_name}: {total} outputs, {stats['stop']} stop, {stats['length']} length")
            if stats["stop"] < total // 2:
                failures.append(f"{tok_name}: only {stats['stop']} of {total} outputs finished with stop")
    for f in failures:
        print("FAIL:", f)
    print("structured outputs:", "FAILED" if failures else "all valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
