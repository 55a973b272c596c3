#!/usr/bin/env bash
# On the GPU host: the mixture-of-experts serving figures of docs/moe.md
# (issue 26), dummy weights in bfloat16, `--max-model-len 4096`:
#   - Mixtral-8x7B on one GPU: the memory plan's line, `bench latency` at
#     batch 1 (128 in / 128 out) and `bench throughput` (300 prompts,
#     1024 in / 128 out);
#   - Qwen3-30B-A3B online: `troupe serve`, then `bench serve` (random
#     1024 in / 128 out, 300 prompts) at 4 and 16 requests/s;
#   - PARTS="counts": Qwen3-30B-A3B batch-1 decode without and with
#     `--log-expert-counts` (what the routing counts cost), and `bench
#     throughput` with them (the log's expert-load lines).
# PARTS (default "mixtral serve") picks the sections.
# Every figure goes to OUT_DIR/*.log; a summary is printed.
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/gpu-moe-bench.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-moe-bench}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
common=(--load-format dummy --dtype bfloat16 --max-model-len 4096 --log-level info)

parts=${PARTS:-"mixtral serve"}
mix=examples/models/mixtral-8x7b
if [[ $parts == *mixtral* ]]; then
"$bin" bench latency --model "$mix" "${common[@]}" --batch-size 1 --input-len 128 --output-len 128 \
  --num-iters-warmup 3 --num-iters 5 >"$out/mixtral.latency.log" 2>&1
echo "Mixtral-8x7B: $(grep -m1 -o 'memory plan:.*' "$out/mixtral.latency.log")"
echo "Mixtral-8x7B batch 1: $(grep -E 'Avg decode time per output token' "$out/mixtral.latency.log")"
"$bin" bench throughput --model "$mix" "${common[@]}" --dataset random --num-prompts 300 \
  --input-len 1024 --output-len 128 >"$out/mixtral.throughput.log" 2>&1
echo "Mixtral-8x7B 300 x 1024/128: $(grep -E '^Throughput|^Preemptions' "$out/mixtral.throughput.log" | tr '\n' ' ')"
fi

if [[ $parts == *counts* ]]; then
  qwen=examples/models/qwen3-30b-a3b
  for counts in "" --log-expert-counts; do
    log=$out/qwen3moe.b1${counts:+.counts}.log
    "$bin" bench latency --model "$qwen" "${common[@]}" $counts --batch-size 1 --input-len 128 \
      --output-len 128 --num-iters-warmup 3 --num-iters 5 >"$log" 2>&1
    echo "Qwen3-30B-A3B batch 1 ${counts:-(no counts)}: $(grep -E 'Avg decode time per output token' "$log")"
  done
  log=$out/qwen3moe.throughput.counts.log
  "$bin" bench throughput --model "$qwen" "${common[@]}" --log-expert-counts --dataset random \
    --num-prompts 1000 --input-len 128 --output-len 128 >"$log" 2>&1
  echo "Qwen3-30B-A3B 1000 x 128/128 with counts: $(grep -E '^Throughput' "$log")"
  grep -m2 -o 'expert load over.*' "$log" | cut -c1-260
fi
[[ $parts == *serve* ]] || exit 0

port=8320
"$bin" serve --model examples/models/qwen3-30b-a3b "${common[@]}" --port "$port" \
  --served-model-name qwen3-30b-a3b >"$out/qwen3moe.serve.log" 2>&1 &
spid=$!
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
for rate in 4 16; do
  log=$out/qwen3moe.serve.r$rate.log
  "$bin" bench serve --port "$port" --vocab-size 151936 --dataset random --input-len 1024 --output-len 128 \
    --num-prompts 300 --request-rate "$rate" --seed "$rate" --disable-progress >"$log" 2>&1
  echo "Qwen3-30B-A3B serve at $rate req/s: $(grep -E 'Successful|Failed requests|Request throughput|Output token throughput|Mean TTFT|Median TTFT|P99 TTFT|Mean TPOT|Median TPOT|P99 TPOT' "$log" | sed 's/  */ /g' | tr '\n' ';')"
done
kill -INT "$spid"
wait "$spid"
