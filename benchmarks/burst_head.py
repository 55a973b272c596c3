#!/usr/bin/env python3
"""The first N requests sent in a `troupe bench serve --json-out` run.

    burst_head.py FILE N   prints "MEAN_TTFT_MS MEAN_TPOT_MS COUNT"

bench_matrix.sh compares an all-at-once burst of troupe's against the peer's
smaller one: in a burst every request arrives at once and the server serves
them first come, first served, so troupe's first N requests sent stand for
a burst of N (if anything they are slowed by the rest, which share the GPU
with them). Only successful requests count; TPOT as vLLM defines it, over
the requests with more than one output token. Standard library only.
"""
import json
import sys


def head(path, n):
    with open(path) as f:
        d = json.load(f)
    errors = d.get("errors") or [""] * len(d["ttfts"])
    order = sorted(range(len(d["start_times"])), key=lambda i: d["start_times"][i])
    ok = [i for i in order if not errors[i]][:n]
    if not ok:
        raise ValueError(f"{path}: no successful request")
    ttft = sum(d["ttfts"][i] for i in ok) / len(ok) * 1000
    multi = [i for i in ok if d["output_lens"][i] > 1]
    tpot = sum(d["tpots"][i] for i in multi) / len(multi) * 1000 if multi else float("nan")
    return ttft, tpot, len(ok)


def main(argv):
    if len(argv) != 3 or not argv[2].isdigit() or int(argv[2]) < 1:
        print("usage: burst_head.py FILE N", file=sys.stderr)
        return 2
    try:
        ttft, tpot, count = head(argv[1], int(argv[2]))
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"burst_head.py: {e}", file=sys.stderr)
        return 1
    print(f"{ttft:.2f} {tpot:.2f} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
