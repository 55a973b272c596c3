#!/usr/bin/env bash
# benchmarks/burst_head.py: the first N requests sent of a bench serve JSON
# (what bench_matrix.sh compares with the peer's smaller all-at-once burst).
# Hand-computed answers for a small file whose requests are listed out of
# send order, with a failed request and a one-token request; and, on a real
# `troupe bench serve` JSON if one is given, N = all gives the tool's own means.
#
#   tests/cli/bench/burst_head_test.sh [BENCH_SERVE_JSON]
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
py=
for p in python3 /usr/bin/python3; do command -v "$p" >/dev/null && { py=$p; break; }; done
[[ -n $py ]] || { echo "burst_head_test: no python3, skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "burst_head_test: FAIL: $*" >&2; exit 1; }
head_of() { "$py" "$root/benchmarks/burst_head.py" "$@"; }

# Sent in the order d (t=0.0), b (0.1), a (0.2), c (0.3), e (0.4); c failed;
# b has one output token (no TPOT).
cat >"$work/run.json" <<'JSON'
{"start_times": [0.2, 0.1, 0.3, 0.0, 0.4],
 "ttfts":        [0.30, 0.20, 0.0, 0.10, 0.50],
 "tpots":        [0.010, 0.0, 0.0, 0.030, 0.020],
 "output_lens":  [8, 1, 0, 8, 8],
 "errors":       ["", "", "HTTP 500", "", ""]}
JSON
[[ $(head_of "$work/run.json" 1) == "100.00 30.00 1" ]] || fail "N=1: $(head_of "$work/run.json" 1)"
# d, b: TTFT (100 + 200) / 2; TPOT from d alone.
[[ $(head_of "$work/run.json" 2) == "150.00 30.00 2" ]] || fail "N=2: $(head_of "$work/run.json" 2)"
# d, b, a, then e (c failed and is skipped): TTFT 1100 / 4; TPOT (30 + 10 + 20) / 3.
[[ $(head_of "$work/run.json" 4) == "275.00 20.00 4" ]] || fail "N=4: $(head_of "$work/run.json" 4)"
[[ $(head_of "$work/run.json" 9) == "275.00 20.00 4" ]] || fail "N=9: $(head_of "$work/run.json" 9)"
head_of "$work/run.json" 0 2>/dev/null && fail "N=0 accepted"
head_of "$work/missing.json" 2 2>/dev/null && fail "a missing file accepted"
echo '{"start_times": [0], "ttfts": [0], "tpots": [0], "output_lens": [0], "errors": ["timeout"]}' >"$work/none.json"
head_of "$work/none.json" 1 2>/dev/null && fail "a run with no successful request accepted"

if [[ -n ${1:-} ]]; then
  read -r ttft tpot n < <(head_of "$1" 1000000) || fail "$1: no answer"
  want=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f %.2f" % (d["mean_ttft_ms"], d["mean_tpot_ms"]))' "$1")
  [[ "$ttft $tpot" == "$want" ]] || fail "$1: all $n requests give '$ttft $tpot', the tool says '$want'"
fi
echo "burst_head_test: ok"
