#!/usr/bin/env python3
"""Plots of a benchmarks/bench_matrix.sh output folder (needs matplotlib).

    python3 scripts/plot_bench.py OUT_DIR

Reads OUT_DIR/serve_<model>_rate<r>.json (written by `troupe bench serve
--json-out`), and the peer's peer_serve_<model>_rate<r>.json where there are
some (drawn dotted), and writes, per model:
  OUT_DIR/serve_<model>_throughput.png   request and output-token throughput
                                         against the request rate
  OUT_DIR/serve_<model>_latency.png      TTFT and TPOT (mean, p50, p90, p99)
                                         against the request rate
and, when there are prefix_<model>_caching_{on,off}.json,
  OUT_DIR/prefix_<model>.png             TTFT percentiles with caching on/off.
The rate "inf" is drawn at the right end, after the largest finite rate.
"""
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_serve_runs(out_dir, prefix="serve"):
    runs = {}
    for path in glob.glob(os.path.join(out_dir, f"{prefix}_*_rate*.json")):
        m = re.match(rf"{prefix}_(.+)_rate(.+)\.json$", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            runs.setdefault(m.group(1), []).append((m.group(2), json.load(f)))
    return runs


def rate_positions(rates):
    finite = sorted(float(r) for r in rates if r != "inf")
    top = finite[-1] if finite else 1.0
    pos = {}
    for r in rates:
        pos[r] = top * 1.5 if r == "inf" else float(r)
    return pos


def label_axis(ax, pos, runs=(), peer_runs=()):
    """Where the all-at-once bursts differ in size, the "inf" tick says so."""
    ticks = sorted(pos.items(), key=lambda kv: kv[1])
    ax.set_xticks([p for _, p in ticks])
    burst = {name: dict(rs).get("inf", {}).get("num_prompts") for name, rs in (("troupe", runs), ("peer", peer_runs))}
    inf = "inf"
    if burst["troupe"] and burst["peer"] and burst["troupe"] != burst["peer"]:
        inf = f"inf\n(troupe {burst['troupe']},\npeer {burst['peer']} prompts)"
    ax.set_xticklabels([inf if r == "inf" else r for r, _ in ticks])
    ax.set_xlabel("request rate (req/s)")
    ax.grid(True, alpha=0.3)


def by_rate(runs):
    return sorted(runs, key=lambda rd: float("inf") if rd[0] == "inf" else float(rd[0]))


def plot_model(out_dir, model, runs, peer_runs):
    """peer_runs: the peer's runs of the same model (may be empty), drawn dashed."""
    runs = by_rate(runs)
    peer_runs = by_rate(peer_runs)
    pos = rate_positions(sorted({r for r, _ in runs + peer_runs}, key=lambda r: float(r)))
    xs = [pos[r] for r, _ in runs]
    pxs = [pos[r] for r, _ in peer_runs]

    fig, ax1 = plt.subplots(figsize=(7, 4.5))
    ax1.plot(xs, [d["output_throughput"] for _, d in runs], "o-", label="troupe output tok/s")
    if peer_runs:
        ax1.plot(pxs, [d["output_throughput"] for _, d in peer_runs], "o:", color="tab:gray",
                 label="peer output tok/s")
    ax1.set_ylabel("output tokens/s")
    ax2 = ax1.twinx()
    ax2.plot(xs, [d["request_throughput"] for _, d in runs], "s--", color="tab:orange", label="troupe req/s")
    ax2.set_ylabel("requests/s")
    label_axis(ax1, pos, runs, peer_runs)
    ax1.set_title(f"{model}: throughput against request rate")
    fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"serve_{model}_throughput.png"), dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for stat, prefix in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99")):
            key = f"{prefix}_{metric}_ms"
            if all(key in d for _, d in runs):
                ax.plot(xs, [d[key] for _, d in runs], "o-", label=f"troupe {stat}")
        for stat, prefix in (("peer p50", "median"), ("peer p99", "p99")):
            key = f"{prefix}_{metric}_ms"
            if peer_runs and all(key in d for _, d in peer_runs):
                ax.plot(pxs, [d[key] for _, d in peer_runs], "x:", label=stat)
        if peer_runs:
            ax.set_yscale("log")  # the peer is an order of magnitude slower
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{model}: {name}")
        label_axis(ax, pos, runs, peer_runs)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"serve_{model}_latency.png"), dpi=120)
    plt.close(fig)


def plot_prefix(out_dir):
    for on_path in glob.glob(os.path.join(out_dir, "prefix_*_caching_on.json")):
        model = re.match(r"prefix_(.+)_caching_on\.json$", os.path.basename(on_path)).group(1)
        off_path = os.path.join(out_dir, f"prefix_{model}_caching_off.json")
        if not os.path.exists(off_path):
            continue
        with open(on_path) as f:
            on = json.load(f)
        with open(off_path) as f:
            off = json.load(f)
        stats = [s for s in ("mean", "median", "p90", "p99") if f"{s}_ttft_ms" in on]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        width = 0.38
        idx = range(len(stats))
        ax.bar([i - width / 2 for i in idx], [on[f"{s}_ttft_ms"] for s in stats], width, label="caching on")
        ax.bar([i + width / 2 for i in idx], [off[f"{s}_ttft_ms"] for s in stats], width, label="caching off")
        ax.set_xticks(list(idx))
        ax.set_xticklabels(stats)
        ax.set_ylabel("TTFT (ms)")
        ax.set_title(f"{model}: shared-prefix TTFT, prefix caching on / off")
        ax.legend()
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"prefix_{model}.png"), dpi=120)
        plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/plot_bench.py OUT_DIR")
    out_dir = sys.argv[1]
    peer = load_serve_runs(out_dir, "peer_serve")
    for model, runs in load_serve_runs(out_dir).items():
        plot_model(out_dir, model, runs, peer.get(model, []))
    plot_prefix(out_dir)
    print(f"plot_bench: PNGs written to {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
