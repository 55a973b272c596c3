#!/usr/bin/env bash
# On the GPU host: serves examples/deploy-llama-3.1-8b-dummy-gpu.yaml with
# the bundle's troupe, times start-up to /health, sends a chat completion and
# a streamed completion, reads /metrics, stops it with SIGTERM and prints a
# summary (markdown rows). Logs go to OUT_DIR.
#   scripts/gpu-serve-check.sh [OUT_DIR] [CONFIG]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/gpu-serve}
config=${2:-examples/deploy-llama-3.1-8b-dummy-gpu.yaml}
mkdir -p "$out"
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
port=18080
start=$(date +%s.%N)
build-device/bin/troupe serve --config "$config" --host 127.0.0.1 --port $port >"$out/serve.log" 2>&1 &
pid=$!
ready=""
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then ready=$(date +%s.%N); break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
row() { echo "| $1 | $2 | $3 |"; }
if [[ -z $ready ]]; then
  row "serve $config" FAIL "never became healthy: $(tail -3 "$out/serve.log" | tr '\n' ' ')"
  kill -9 $pid 2>/dev/null
  exit 1
fi
row "serve: start-up to ready" "$(awk -v a="$start" -v b="$ready" 'BEGIN { printf "%.1f s", b - a }')" \
  "$(grep -m1 -o 'memory plan:.*' "$out/serve.log")"
row "serve: KV cache" ok "$(grep -m1 -o 'KV cache: .*' "$out/serve.log")"
chat=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":16,"ignore_eos":true}')
echo "$chat" >"$out/chat.json"
if grep -q '"completion_tokens":16' <<<"$chat"; then s=pass; else s=FAIL; fi
row "serve: chat completion (16 tokens)" $s "$(head -c 160 <<<"$chat")"
stream=$(curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The capital of France is","max_tokens":32,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}')
echo "$stream" >"$out/stream.txt"
if grep -q 'data: \[DONE\]' <<<"$stream" && grep -q '"completion_tokens":32' <<<"$stream"; then s=pass; else s=FAIL; fi
row "serve: streamed completion (32 tokens)" $s "$(grep -c '^data: ' <<<"$stream") SSE frames"
# The logits processors through the device sampler: logit_bias forces a
# token, allowed_token_ids limits every token, min_tokens holds EOS back.
procs=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":6,"temperature":0.8,"return_token_ids":true,"logit_bias":{"1234":100}}')
allowed=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":12,"return_token_ids":true,"allowed_token_ids":[100,200,300]}')
held=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":10,"return_token_ids":true,"min_tokens":4,"logit_bias":{"128009":100,"128001":100}}')
echo "$procs $allowed $held" >"$out/processors.json"
ok_bias=$(grep -c '"token_ids":\[1234,1234,1234,1234,1234,1234\]' <<<"$procs")
ok_held=$(grep -o '"token_ids":\[[0-9,]*\]' <<<"$held" | grep -cE '^"token_ids":\[([0-9]+,){4}(128009|128001)\]$')
if ((ok_bias == 1 && ok_held == 1)) && grep -qE '"token_ids":\[((100|200|300),){11}(100|200|300)\]' <<<"$allowed"; then s=pass; else s=FAIL; fi
row "serve: logit_bias / allowed_token_ids / min_tokens on the device sampler" $s "$(grep -o '"token_ids":\[[0-9,]*\]' <<<"$procs$allowed$held" | tr '\n' ' ')"
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics.txt"
row "serve: /metrics" ok "$(grep -E '^troupe:(time_to_first_token_seconds_sum|e2e_request_latency_seconds_count|kv_cache_usage_perc)' "$out/metrics.txt" | tr '\n' ' ')"
kill -TERM $pid
wait $pid
rc=$?
if ((rc == 0)); then s=pass; else s=FAIL; fi
row "serve: SIGTERM exit status" $s "$rc"
