#!/usr/bin/env python3
"""Issue 6's performance figures on the GPU host, each against its physical
limit measured on the same GPU in the same run.

Dummy weights in a model's shape (default Llama-3.1-8B), bf16, CUDA graphs
on, through `troupe bench latency` / `troupe generate` from build-device/:

  batch-1 decode      ms per output token vs the weight-read bound
                      (bytes of every weight a decode step reads / the
                      measured device-to-device copy bandwidth)
  batch-64 decode     the same at 1,024-token prompts, the bound counting
  at 1k context       the K/V bytes each step reads at the mean context too
  prefill 8 x 1,024   model FLOPs (2 x non-embedding parameters per token
                      plus causal attention) per second vs the measured bf16
                      GEMM rate (gemm_bench, 8192^3)
  decode attention    attention_bench's batch 64 x 4k row (copy bandwidth)
  GPU idle between    the device timeline of `troupe generate` at batch 64,
  steps               async scheduling on and off
  start-up to ready   `troupe serve` until /health answers (graphs captured)

  python3 benchmarks/gpu_roofline.py OUT_DIR [--model DIR] [--quick]

Prints a markdown table (and OUT_DIR/roofline.md); the raw outputs stay in
OUT_DIR.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "build-device", "bin")


def run(cmd, log, env=None, timeout=900):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=timeout,
                           env=env)
    with open(log + ".out", "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode} (see {log})")
    return p.stdout


def model_bytes_and_flops(model_dir):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    h, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim", h // heads)
    vocab = c["vocab_size"]
    per_layer = h * (heads * d + 2 * kv_heads * d) + heads * d * h + 3 * h * inter
    linear_params = layers * per_layer + vocab * h  # the lm_head is read every step
    kv_bytes_per_token = layers * 2 * kv_heads * d * 2  # bf16 K and V
    return dict(weight_bytes=2 * linear_params, linear_params=linear_params,
                kv_bytes_per_token=kv_bytes_per_token, layers=layers, heads=heads, d=d)


def bench_latency(model, out, name, batch, input_len, output_len, iters, warmup, extra,
                  env_extra=None, log_level="warn"):
    cmd = [os.path.join(BIN, "troupe"), "bench", "latency", "--model", model, "--load-format",
           "dummy", "--backend", "cuda", "--dtype", "bfloat16", "--batch-size", str(batch),
           "--input-len", str(input_len), "--output-len", str(output_len), "--num-iters",
           str(iters), "--num-iters-warmup", str(warmup), "--json-out",
           os.path.join(out, name + ".json"), "--log-level", log_level] + extra
    env = dict(os.environ, **(env_extra or {}))
    run(cmd, os.path.join(out, name + ".log"), env=env)
    return json.load(open(os.path.join(out, name + ".json")))


def gemm_tuning(log):
    """The start-up log's decode GEMM tuning summary line (empty if none)."""
    for line in open(log):
        if "decode GEMM tuning:" in line:
            return line.split("decode GEMM tuning:", 1)[1].strip()
    return ""


def generate_idle(model, out, batch, async_on):
    prompts = os.path.join(out, f"prompts-{batch}.jsonl")
    with open(prompts, "w") as f:
        for i in range(batch):
            f.write(json.dumps({"prompt_ids": [(i * 131 + t * 17 + 3) % 30000 for t in range(128)]})
                    + "\n")
    log = os.path.join(out, f"generate-b{batch}-async-{async_on}.log")
    run([os.path.join(BIN, "troupe"), "generate", "--model", model, "--load-format", "dummy",
         "--backend", "cuda", "--dtype", "bfloat16", "--max-model-len", "4096",
         "--prompts-file", prompts, "--max-tokens", "256", "--temperature", "0", "--ignore-eos",
         "--async-scheduling", "true" if async_on else "false", "--log-level", "info"], log)
    text = open(log).read()
    m = re.search(r"idle between steps ([0-9.]+) s \(([0-9.]+)% of ([0-9.]+) s\)", text)
    st = re.search(r"generated_tokens=(\d+).*steps_ahead=(\d+) elapsed_s=([0-9.]+)", text)
    return dict(idle_pct=float(m.group(2)), idle_s=float(m.group(1)), span_s=float(m.group(3)),
                tokens=int(st.group(1)), steps_ahead=int(st.group(2)), elapsed=float(st.group(3)))


def startup_seconds(model, out):
    log = os.path.join(out, "serve-startup.log")
    port = 8799
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen([os.path.join(BIN, "troupe"), "serve", "--model", model,
                              "--load-format", "dummy", "--backend", "cuda", "--dtype", "bfloat16",
                              "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"],
                             stdout=f, stderr=subprocess.STDOUT)
    ready = None
    while time.time() - t0 < 300 and p.poll() is None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            ready = time.time() - t0
            break
        except Exception:
            time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    return ready


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default=os.path.join(ROOT, "examples/models/llama-3.1-8b"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-ab", action="store_true",
                    help="skip the comparison rows (each figure with one speed-up turned off)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env_lib = os.path.join(ROOT, "build-device", "lib")
    os.environ["LD_LIBRARY_PATH"] = env_lib + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    m = model_bytes_and_flops(a.model)
    it = (3, 1) if a.quick else (10, 3)

    gemm = run([os.path.join(BIN, "gemm_bench"), "10"], os.path.join(a.out, "gemm_bench.log"))
    copy_gbps = float(re.search(r"device-to-device copy: ([0-9.]+) GB/s", gemm).group(1))
    rates = re.search(r"cublasGemmEx ([0-9.]+) TFLOP/s, best cuBLASLt ([0-9.]+) TFLOP/s", gemm)
    gemm_tflops = max(float(rates.group(1)), float(rates.group(2)))
    att = run([os.path.join(BIN, "attention_bench")], os.path.join(a.out, "attention_bench.log"))
    att_row = re.search(r"\| batch 64 x context 4096 \| \d+ \| ([0-9.]+) \| ([0-9.]+) \| (\d+) \| (\d+)% \|",
                        att)

    rows = []
    # Batch 1 with the decode GEMM tuning (the log at debug has each
    # shape's timings), then with cuBLAS alone for comparison.
    b1 = bench_latency(a.model, a.out, "latency-b1", 1, 128, 128, *it, [], log_level="debug")
    ms1 = b1["avg_decode_ms_per_output_token"]
    bound1 = m["weight_bytes"] / (copy_gbps * 1e6)
    tuned = gemm_tuning(os.path.join(a.out, "latency-b1.log"))
    rows.append(("batch-1 decode (128 in / 128 out)", f"{ms1:.2f} ms per token = {1000 / ms1:.0f} tokens/s"
                 + (f" (GEMM tuning: {tuned})" if tuned else ""),
                 f"weights {m['weight_bytes'] / 1e9:.2f} GB / {copy_gbps:.0f} GB/s = {bound1:.2f} ms",
                 f"{100 * bound1 / ms1:.1f}%", "90%"))
    # The same with one of this build's decode speed-ups turned off.
    ab1 = () if a.no_ab else (
        ("latency-b1-cublas", {"TROUPE_GEMV": "off"}, "cuBLAS only (TROUPE_GEMV=off)"),
        ("latency-b1-no-pdl", {"TROUPE_PDL": "0"}, "plain launches (TROUPE_PDL=0)"),
        ("latency-b1-no-preload", {"TROUPE_PRELOAD": "0"},
         "nothing requested before the PDL wait (TROUPE_PRELOAD=0)"),
        ("latency-b1-no-glu", {"TROUPE_GLU": "off"}, "gate/up product and SiLU-and-mul apart (TROUPE_GLU=off)"))
    for name, env, label in ab1:
        ms = bench_latency(a.model, a.out, name, 1, 128, 128, *it, [],
                           env_extra=env)["avg_decode_ms_per_output_token"]
        rows.append((f"batch-1 decode, {label}", f"{ms:.2f} ms per token = {1000 / ms:.0f} tokens/s",
                     "the same", f"{100 * bound1 / ms:.1f}%", ""))

    b64 = bench_latency(a.model, a.out, "latency-b64-1k", 64, 1024, 128, *it,
                        ["--max-num-batched-tokens", "65536", "--max-model-len", "2048"], log_level="debug")
    ms64 = b64["avg_decode_ms_per_output_token"]
    tuned64 = gemm_tuning(os.path.join(a.out, "latency-b64-1k.log"))
    ctx = 1024 + 128 / 2
    bytes64 = m["weight_bytes"] + 64 * ctx * m["kv_bytes_per_token"]
    bound64 = bytes64 / (copy_gbps * 1e6)
    rows.append(("batch-64 decode at 1k context (1024 in / 128 out)",
                 f"{ms64:.2f} ms per step = {64 * 1000 / ms64:.0f} tokens/s"
                 + (f" (GEMM tuning: {tuned64})" if tuned64 else ""),
                 f"weights + K/V at mean context {ctx:.0f}: {bytes64 / 1e9:.2f} GB = {bound64:.2f} ms",
                 f"{100 * bound64 / ms64:.1f}%", "80%"))
    ab64 = () if a.no_ab else (
        ("latency-b64-1k-splits-2", {"TROUPE_DECODE_SPLITS": "2"}, "attention in 2 splits (TROUPE_DECODE_SPLITS=2)"),
        ("latency-b64-1k-splits-4", {"TROUPE_DECODE_SPLITS": "4"}, "attention in 4 splits (TROUPE_DECODE_SPLITS=4)"),
        ("latency-b64-1k-no-preload", {"TROUPE_PRELOAD": "0"},
         "nothing requested before the PDL wait (TROUPE_PRELOAD=0)"))
    for name, env, label in ab64:
        ms = bench_latency(a.model, a.out, name, 64, 1024, 128, *it,
                           ["--max-num-batched-tokens", "65536", "--max-model-len", "2048"],
                           env_extra=env)["avg_decode_ms_per_output_token"]
        rows.append((f"batch-64 decode at 1k context, {label}",
                     f"{ms:.2f} ms per step = {64 * 1000 / ms:.0f} tokens/s", "the same",
                     f"{100 * bound64 / ms:.1f}%", ""))

    pf = bench_latency(a.model, a.out, "latency-prefill-8x1024", 8, 1024, 1, *it,
                       ["--max-num-batched-tokens", "8192", "--max-model-len", "2048"])
    prefill_s = pf["avg_prefill_time"]
    tokens = 8 * 1024
    attn_flops = 8 * m["layers"] * m["heads"] * 4 * m["d"] * (1024 * 1025 / 2)
    flops = 2 * m["linear_params"] * tokens + attn_flops
    achieved = flops / prefill_s / 1e12
    rows.append(("prefill 8 x 1,024 tokens", f"{prefill_s * 1000:.1f} ms = {achieved:.0f} TFLOP/s",
                 f"bf16 GEMM rate {gemm_tflops:.0f} TFLOP/s (8192^3)",
                 f"{100 * achieved / gemm_tflops:.0f}%", "60%"))
    if att_row:
        rows.append(("decode attention alone, batch 64 x 4k", f"{att_row.group(2)} us = {att_row.group(3)} GB/s",
                     f"copy {copy_gbps:.0f} GB/s", f"{att_row.group(4)}%", "80%"))

    idle = {on: generate_idle(a.model, a.out, 64, on) for on in (True, False)}
    for on in (True, False):
        g = idle[on]
        rows.append((f"GPU idle between steps, batch 64, async scheduling {'on' if on else 'off'}",
                     f"{g['idle_pct']:.2f}% ({g['idle_s'] * 1000:.0f} ms of {g['span_s']:.2f} s; "
                     f"{g['tokens'] / g['elapsed']:.0f} tokens/s, {g['steps_ahead']} steps planned ahead)",
                     "device timeline (CUDA events)", "", "< 3%"))
    ready = startup_seconds(a.model, a.out)
    rows.append(("start-up to ready (serve, graphs captured)",
                 f"{ready:.1f} s" if ready is not None else "did not become ready", "", "", "< 15 s"))

    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    lines = [f"GPU: {gpu}; date: {time.strftime('%Y-%m-%d')}; model: {os.path.basename(a.model)} "
             f"(dummy weights, bf16, CUDA graphs)", "",
             "| figure | measured | physical limit | fraction | target |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |" for r in rows]
    text = "\n".join(lines)
    print(text)
    open(os.path.join(a.out, "roofline.md"), "w").write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
