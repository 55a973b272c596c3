#!/usr/bin/env python3
"""LoRA fixture goldens through `troupe generate` on the CUDA backend.

For each base (tiny-llama: sql and poet; tiny-qwen2: chat) and dtype, one
prompts file holds every case of every adapter and each prompt again for the
base (adapters and the base mixed in one batch, max_loras 2), greedy with
top-5 logprobs; adapter lines are compared with golden.json by the fixtures'
rule (gpu_golden.compare), base lines' tokens with base_greedy_ids (the
near-tie rule cannot apply: the golden has no base logprobs, so a base
line passes when its tokens equal them). Prints one row per (base, dtype);
exit 1 when float32 fails or bfloat16 exceeds --tol-bf16.

  python3 scripts/gpu_lora_golden.py [--troupe build-device/bin/troupe] [--tol-bf16 0.8]
                                     [--extra 'ARGS' (JSON list)]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_golden import ROOT, compare  # noqa: E402

BASES = {"tiny-llama": ["sql", "poet"], "tiny-qwen2": ["chat"]}
DIRS = {"sql": "tiny-llama-lora-sql", "poet": "tiny-llama-lora-poet", "chat": "tiny-qwen2-lora-chat"}


def run(troupe, base, dtype, tol, extra):
    goldens = {a: json.load(open(os.path.join(ROOT, "tests/data/lora", DIRS[a], "golden.json")))["cases"]
               for a in BASES[base]}
    lines = []  # (adapter or None, case)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        first = BASES[base][0]
        for c in range(len(goldens[first])):
            for a in BASES[base]:
                f.write(json.dumps({"prompt_ids": goldens[a][c]["prompt_ids"], "lora": a}) + "\n")
                lines.append((a, goldens[a][c]))
            f.write(json.dumps({"prompt_ids": goldens[first][c]["prompt_ids"]}) + "\n")
            lines.append((None, goldens[first][c]))
        path = f.name
    cmd = [troupe, "generate", "--model", os.path.join(ROOT, "tests/data/models", base),
           "--backend", "cuda", "--dtype", dtype, "--prompts-file", path, "--max-tokens", "16",
           "--temperature", "0", "--logprobs", "5", "--json", "--log-level", "warn",
           "--enable-lora", "--max-loras", "2", "--lora-modules",
           *[f"{a}={os.path.join(ROOT, 'tests/data/lora', DIRS[a])}" for a in BASES[base]], *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    os.unlink(path)
    if p.returncode != 0:
        return 0, len(lines), float("inf"), p.stderr.strip().splitlines()[-1:]
    outs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    passed, max_err, notes = 0, 0.0, []
    for (adapter, case), out in zip(lines, outs):
        steps = out["outputs"][0]["logprobs"]
        if adapter is None:
            ok = [s["token_id"] for s in steps] == case["base_greedy_ids"]
        else:
            ok, err = compare(case["steps"], case["greedy_ids"], steps, tol)
            max_err = max(max_err, err)
        passed += ok
        if not ok:
            notes.append(f"{adapter or 'base'} prompt of {len(case['prompt_ids'])} ids")
    return passed, len(lines), max_err, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe", default=os.path.join(ROOT, "build-device/bin/troupe"))
    ap.add_argument("--tol-bf16", type=float, default=0.8)
    ap.add_argument("--extra", default="[]")
    args = ap.parse_args()
    extra = json.loads(args.extra)
    status = 0
    print("| base | dtype | lines passed | tolerance | max top-5 logprob error | failing |")
    print("| --- | --- | --- | --- | --- | --- |")
    for base in BASES:
        for dtype, tol in (("float32", 1e-3), ("bfloat16", args.tol_bf16)):
            passed, total, err, notes = run(args.troupe, base, dtype, tol, extra)
            print(f"| {base} | {dtype} | {passed}/{total} | tol {tol:g} | {err:.2e} | {'; '.join(notes)} |")
            if passed != total:
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
