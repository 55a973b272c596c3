#!/usr/bin/env bash
# benchmarks/bench_matrix.sh end to end on the CPU with the fixture models
# (tiny sizes, no peer): two models measured in parallel (GPUS="0 1"), every
# table in the summary, --summary rebuilding the same summary from the files,
# and an interrupted output folder (a run missing, one failed) summarised as
# INCOMPLETE with the failed row and without the missing one.
#
#   tests/cli/bench/bench_matrix_test.sh TROUPE_BINARY
set -uo pipefail
troupe=${1:?usage: bench_matrix_test.sh TROUPE_BINARY}
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out
fail() { echo "bench_matrix_test: FAIL: $*" >&2; exit 1; }

port=$((20000 + RANDOM % 20000))
TROUPE=$troupe BACKEND=cpu DTYPE=float32 LOAD_FORMAT=auto PEER=0 GPUS="0 1" PORT=$port \
  MODELS="$root/tests/data/models/tiny-llama $root/tests/data/models/tiny-qwen2" \
  ENGINE_ARGS="--max-model-len 1024" LAT_INPUT_LEN=16 LAT_OUTPUT_LEN=8 LAT_ITERS=2 LAT_WARMUP=1 \
  TP_NUM_PROMPTS=8 TP_SHAPES="32:8 16:16" SERVE_RATES="20 inf" SERVE_NUM_PROMPTS=6 SERVE_MAX_SECONDS=1 \
  SERVE_INPUT_LEN=32 SERVE_OUTPUT_LEN=8 PREFIX_LEN=64 PREFIX_GROUPS=2 PREFIX_SUFFIX_LEN=16 \
  PREFIX_OUTPUT_LEN=8 PREFIX_NUM_PROMPTS=6 PREFIX_CONCURRENCY=4 NOTE="a CTest run" \
  "$root/benchmarks/bench_matrix.sh" "$out" >"$work/stdout" 2>"$work/stderr" ||
  { cat "$work/stderr" >&2; fail "bench_matrix.sh exited non-zero"; }

summary=$out/summary.md
[[ -f $out/DONE && -f $out/MEASURED && -f $out/measured_tiny-llama && -f $out/measured_tiny-qwen2 ]] || fail "no DONE/MEASURED/measured_<model>"
cmp -s "$work/stdout" "$summary" || fail "stdout differs from summary.md"
grep -q '^- note: a CTest run$' "$summary" || fail "no note line"
grep -q INCOMPLETE "$summary" && fail "a complete run marked INCOMPLETE"
for heading in '## Latency' '## Offline throughput' '## Online serving' '## Prefix caching' '## Commands'; do
  grep -q "^$heading" "$summary" || fail "no section '$heading'"
done
# Rows: 2 latency, 2 x 2 offline, 2 x 2 online, 2 x 2 prefix caching; every
# figure column filled (no empty cell in a data row).
for m in tiny-llama tiny-qwen2; do
  n=$(grep -c "^| $m | troupe |" "$summary")
  ((n == 7)) || fail "$m: $n troupe rows, expected 7 (1 latency + 2 offline + 2 online + 2 prefix)"
  grep "^| $m | troupe |" "$summary" | grep -q '|  |' && fail "$m: a row with an empty cell"
  for f in latency_${m}_b1 throughput_${m}_32_8 throughput_${m}_16_16 serve_${m}_rate20 serve_${m}_rateinf \
    prefix_${m}_caching_on prefix_${m}_caching_off; do
    [[ -s $out/$f.json ]] || fail "no $f.json"
  done
  # Each model's commands, with their wall times.
  grep -q "bench latency --model .*/$m .*# [0-9]* s$" "$summary" || fail "$m: no timed latency command"
done
# The finite rate is capped at rate x SERVE_MAX_SECONDS (at least 32): 6 prompts.
grep -q '^| tiny-llama | troupe | 20 | 6 | 6 | 0 |' "$summary" || fail "online row at rate 20: not 6 of 6 ok"
# Prefix caching on finds the shared prefixes.
hit=$(sed -nE 's/^\| tiny-llama \| troupe \| on \| 6 \| ([0-9.]+) \|.*/\1/p' "$summary")
awk -v h="${hit:-0}" 'BEGIN { exit !(h > 0) }' || fail "prefix caching on: hit rate '${hit}'"

# burst_head.py (the peer comparison of an all-at-once burst) agrees with the
# tool's own means on this run's burst when it takes every request.
"$root/tests/cli/bench/burst_head_test.sh" "$out/serve_tiny-llama_rateinf.json" >/dev/null
rc=$?
((rc == 0 || rc == 77)) || fail "burst_head_test.sh on serve_tiny-llama_rateinf.json"

# --summary rebuilds the same summary from the files.
cp "$summary" "$work/first.md"
"$root/benchmarks/bench_matrix.sh" --summary "$out" >"$work/again" 2>/dev/null || fail "--summary exited non-zero"
diff -u <(grep -v '^- date' "$work/first.md") <(grep -v '^- date' "$work/again") >&2 || fail "--summary differs"

# The document: the head, then the summary without its title; plots (where
# python3 has matplotlib) in a folder named as the document.
DOC=$work/doc/matrix.md "$root/benchmarks/bench_matrix.sh" --summary "$out" >/dev/null 2>&1 || fail "--summary with DOC failed"
[[ $(head -1 "$work/doc/matrix.md") == "# Benchmarks" ]] || fail "the document does not start with the head"
grep -q '^## Prefix caching' "$work/doc/matrix.md" || fail "the document has no summary tables"
if grep -q '^!\[' "$work/doc/matrix.md"; then
  for png in $(sed -nE 's/^!\[.*\]\((.*)\)$/\1/p' "$work/doc/matrix.md"); do
    [[ -f $work/doc/$png ]] || fail "the document links $png, which is not there"
  done
fi

# An interrupted run: one run never happened, one failed.
rm -f "$out/MEASURED" "$out/throughput_tiny-qwen2_16_16.txt"
echo "exit 1" >"$out/serve_tiny-llama_rateinf.txt.failed"
"$root/benchmarks/bench_matrix.sh" --summary "$out" >"$work/partial" 2>/dev/null || fail "--summary (partial) exited non-zero"
grep -q '^- INCOMPLETE' "$work/partial" || fail "an interrupted run not marked INCOMPLETE"
grep -q '^| tiny-qwen2 | troupe | 8 | 16 | 16 |' "$work/partial" && fail "a run that did not happen has a row"
grep -q '^| tiny-llama | troupe | inf | 6 | failed (exit 1, see serve_tiny-llama_rateinf.txt.err)' "$work/partial" ||
  fail "a failed run has no 'failed' row"

# A measuring run refuses a non-empty folder that is not its own.
mkdir -p "$work/other" && touch "$work/other/file"
TROUPE=$troupe "$root/benchmarks/bench_matrix.sh" "$work/other" >/dev/null 2>&1 && fail "wrote into a foreign folder"
[[ -f $work/other/file ]] || fail "removed a foreign file"
echo "bench_matrix_test: OK"
