#!/usr/bin/env python3
"""Makes tests/data/moe/tiny-qwen2-moe: a tiny Qwen2MoeForCausalLM with
random weights and transformers' own golden outputs, in the layout and
golden.json format of ../shared/fixtures/moe (README.md, QUANT_MOE.md
there). Runs where transformers and torch are (the GPU host has
transformers 5.17; this runs on its CPU, float32, eager attention):

  python3 scripts/make_qwen2_moe_fixture.py OUT_DIR

What it makes: V1024 H128, 3 layers (layer 1 dense: mlp_only_layers), heads
4/2, 8 experts top 2 of intermediate 64, a shared expert of 96 behind its
sigmoid gate, norm_topk_prob false (Qwen2-MoE's default), q/k/v biases.
Routers spiced (N(0, (4/sqrt(H))^2)) and the seed chosen so that the
smallest top-k router margin over the golden run is >= 1e-3, as the other
MoE fixtures. golden.json: per case prompt_ids, prompt_logprobs (null
first), greedy_ids (24, EOS not special: a manual argmax loop), steps[t]
top-5 ids and logprobs, min_margin; expert_usage over the prefills;
router.min_top_k_margin. The files are checked: the saved checkpoint is
read back by from_pretrained with no missing or unexpected keys and gives
the same logits, and holds the hub's per-expert layout.
"""
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

H, V, E, K = 128, 1024, 8, 2
PROMPT_LENS = [1, 7, 33, 130, 517]
STEPS = 24


def make_config():
    return Qwen2MoeConfig(
        vocab_size=V, hidden_size=H, intermediate_size=256, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        moe_intermediate_size=64, shared_expert_intermediate_size=96, num_experts=E,
        num_experts_per_tok=K, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
        bos_token_id=1, eos_token_id=2, use_sliding_window=False, sliding_window=None,
        attn_implementation="eager", dtype=torch.float32)


def build(seed):
    torch.manual_seed(seed)
    cfg = make_config()
    model = Qwen2MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 4.0 / H ** 0.5)  # spiced router: decisive routing
            elif name.endswith("shared_expert_gate.weight"):
                p.normal_(0.0, 1.0 / H ** 0.5)  # gate values spread over (0, 1)
            elif name.endswith("_proj.bias"):
                p.normal_(0.0, 0.1)  # q/k/v biases non-zero, so they are tested
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() >= 2:  # transformers 5 keeps experts fused, 3-D, in memory
                p.normal_(0.0, 0.08)
    return cfg, model


def router_hooks(model, margins, usage):
    hooks = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        w = getattr(gate, "weight", None)
        if w is None or tuple(w.shape) != (E, H):  # a dense layer's (or no) router
            continue

        def hook(_m, inp, out, i=i):
            logits = torch.nn.functional.linear(inp[0].double(), _m.weight.double()).reshape(-1, E)
            top = torch.topk(logits, K + 1, dim=-1).values
            margins.append(float((top[:, K - 1] - top[:, K]).min()))
            if usage is not None:
                sel = torch.topk(logits, K, dim=-1).indices.reshape(-1)
                counts = usage.setdefault(str(i), [0] * E)
                for e in sel.tolist():
                    counts[e] += 1
        hooks.append(gate.register_forward_hook(hook))
    return hooks


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double()


def golden_case(model, prompt):
    lp = torch.log_softmax(logits_of(model, prompt), dim=-1)
    prompt_logprobs = [None] + [float(lp[t - 1, prompt[t]]) for t in range(1, len(prompt))]
    ids, steps, greedy, min_margin = list(prompt), [], [], float("inf")
    for _ in range(STEPS):
        last = torch.log_softmax(logits_of(model, ids)[-1], dim=-1)
        top = torch.topk(last, 5)
        steps.append({"top_ids": top.indices.tolist(), "top_logprobs": top.values.tolist()})
        min_margin = min(min_margin, float(top.values[0] - top.values[1]))
        greedy.append(int(top.indices[0]))
        ids.append(greedy[-1])
    return {"prompt_ids": prompt, "prompt_logprobs": prompt_logprobs, "greedy_ids": greedy,
            "steps": steps, "min_margin": min_margin}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tiny-qwen2-moe"
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(2026)
    prompts = [torch.randint(3, V, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    for seed in range(100):
        cfg, model = build(seed)
        margins, usage = [], {}
        hooks = router_hooks(model, margins, None)
        assert len(hooks) == 2, len(hooks)  # layers 0 and 2 are sparse
        cases = [golden_case(model, p) for p in prompts]
        for h in hooks:
            h.remove()
        if min(margins) >= 1e-3:
            break
        print(f"seed {seed}: router margin {min(margins):.2e}, next seed", flush=True)
    hooks = router_hooks(model, [], usage)
    for p in prompts:
        logits_of(model, p)
    for h in hooks:
        h.remove()
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.save_pretrained(out)
    # The hub's per-expert layout, and the files read back to the same model.
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" in keys, keys[:40]
    assert "model.layers.0.mlp.shared_expert_gate.weight" in keys, keys[:40]
    assert "model.layers.1.mlp.gate_proj.weight" in keys, keys[:40]
    back, info = Qwen2MoeForCausalLM.from_pretrained(out, output_loading_info=True,
                                                     attn_implementation="eager", dtype=torch.float32)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    back.eval()
    diff = float((logits_of(back, prompts[2]) - logits_of(model, prompts[2])).abs().max())
    assert diff == 0.0, diff
    cfgj = json.load(open(os.path.join(out, "config.json")))
    cfgj.setdefault("num_experts", E)
    json.dump(cfgj, open(os.path.join(out, "config.json"), "w"), indent=2)
    golden = {
        "model": "tiny-qwen2-moe",
        "reference": f"transformers {transformers.__version__} float32 eager (scripts/make_qwen2_moe_fixture.py, seed {seed})",
        "cases": cases,
        "expert_usage": {"counted_over": "prefill of every case's prompt_ids",
                         "counted_by": "router forward hooks (float64 logits)",
                         "tokens": sum(PROMPT_LENS), "top_k": K, "per_layer": usage},
        "router": {"min_top_k_margin": min(margins),
                   "about": "smallest gap between the k-th and (k+1)-th router logit (float64) over "
                            "every router call of the golden run"},
    }
    json.dump(golden, open(os.path.join(out, "golden.json"), "w"))
    print(f"seed {seed}, router margin {min(margins):.3e}, keys {len(keys)}, usage {usage}")
    print("min token margins", [round(c["min_margin"], 4) for c in cases])


if __name__ == "__main__":
    main()
