#!/usr/bin/env bash
# On the GPU host: structured outputs' costs (docs/structured_outputs.md).
#   1. grammar_bench: compile time of the JSON Schema corpus and per-token
#      mask time over Llama 3.1's 128k vocabulary at batch 1 and 64 (this
#      host's CPU);
#   2. decode throughput of examples/deploy-llama-3.1-8b-dummy-gpu.yaml at
#      concurrency 64 (random 256 in / 256 out, ignore_eos), with no
#      constraint and with a JSON Schema on every request, same server,
#      same run, twice each (interleaved, after a warm-up run);
#   3. one constrained request without ignore_eos: its text must parse as JSON.
#   scripts/gpu-structured-check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/gpu-structured}
mkdir -p "$out"
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=build-device/bin/troupe
row() { echo "| $1 | $2 | $3 |"; }
build-device/bin/grammar_bench >"$out/grammar_bench.txt" 2>&1
while read -r line; do row "grammar_bench" ok "$line"; done <"$out/grammar_bench.txt"
schema='{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"qty":{"type":"integer","minimum":1,"maximum":999},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","qty","tags"],"additionalProperties":false}},"note":{"type":"string"}},"required":["items","note"],"additionalProperties":false}'
port=18081
"$bin" serve --config examples/deploy-llama-3.1-8b-dummy-gpu.yaml --host 127.0.0.1 --port $port ${SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
ready=""
for _ in $(seq 1 1200); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then ready=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
if [[ -z $ready ]]; then row serve FAIL "$(tail -3 "$out/serve.log" | tr '\n' ' ')"; kill -9 $pid 2>/dev/null; exit 1; fi
row "serve" ok "$(grep -m1 -o 'async scheduling: .*' "$out/serve.log")"
one=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\":\"Order:\",\"max_tokens\":600,\"seed\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"order\",\"schema\":$schema}}}")
echo "$one" >"$out/one.json"
check=$(python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]; t=c["text"]; print(c["finish_reason"], "valid JSON" if c["finish_reason"] != "stop" or json.loads(t) is not None else "", len(t))' <<<"$one" 2>&1)
row "constrained request (bf16, device sampler)" "$([[ $check == stop\ valid* || $check == length* ]] && echo pass || echo FAIL)" "$check"
bench() {  # NAME [extra-body]
  local log="$out/bench_$1.log"
  local extra=()
  [[ -n ${2:-} ]] && extra=(--extra-body "$2")
  "$bin" bench serve --port $port --dataset random --input-len 256 --output-len 256 --num-prompts 320 \
    --max-concurrency 64 --ignore-eos --seed 0 --disable-progress "${extra[@]}" >"$log" 2>&1
  row "bench $1 (c64, 256/256)" "$(grep -oP 'Output token throughput \(tok/s\):\s+\K[0-9.]+' "$log") tok/s" \
    "median TPOT $(grep -oP 'Median TPOT \(ms\):\s+\K[0-9.]+' "$log") ms, failed $(grep -oP 'Failed requests:\s+\K[0-9]+' "$log")"
}
rf="{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"order\",\"schema\":$schema}}}"
# The warm-up sends the same prompts (seed 0): every measured run then
# finds them in the prefix cache alike.
"$bin" bench serve --port $port --dataset random --input-len 256 --output-len 16 --num-prompts 320 \
  --max-concurrency 64 --ignore-eos --seed 0 --disable-progress >"$out/bench_warmup.log" 2>&1
bench none
bench json_schema "$rf"
bench none_2
bench json_schema_2 "$rf"
kill -TERM $pid
wait $pid
