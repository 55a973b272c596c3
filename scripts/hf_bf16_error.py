#!/usr/bin/env python3
"""How far Hugging Face transformers itself lands from the float32 goldens
in bfloat16: the yardstick for troupe's bf16 tolerance (docs/gpu.md).

Runs on the GPU host (torch + transformers): for each fixture model, the
golden cases in bf16 on the GPU, greedy with top-5 logprobs teacher-forced
on the golden greedy tokens, and reports the largest |logprob - golden| over
the top-5 of every step, and over the prompt logprobs. Folders under
tests/data may be named on the command line (default: the four dense
models), e.g. `moe/tiny-qwen2-moe`.
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
print("| model | HF bf16: max top-5 logprob error | max prompt logprob error |")
print("| --- | --- | --- |")
names = sys.argv[1:] or ["models/" + m for m in ["tiny-llama", "tiny-llama-mha", "tiny-qwen2", "tiny-qwen3"]]
for name in names:
    path = os.path.join(ROOT, "tests/data", name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    golden = json.load(open(os.path.join(path, "golden.json")))
    worst, worst_prompt = 0.0, 0.0
    for c in golden["cases"]:
        ids = torch.tensor([c["prompt_ids"] + c["greedy_ids"]], device="cuda")
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
        n = len(c["prompt_ids"])
        for i in range(1, n):
            worst_prompt = max(worst_prompt, abs(logp[i - 1, c["prompt_ids"][i]].item() - c["prompt_logprobs"][i]))
        for t, step in enumerate(c["steps"]):
            row = logp[n - 1 + t]
            for tid, lp in zip(step["top_ids"], step["top_logprobs"]):
                worst = max(worst, abs(row[tid].item() - lp))
    print(f"| {name} | {worst:.2e} | {worst_prompt:.2e} |", flush=True)
