#!/usr/bin/env bash
# GPU throughput of `troupe generate` (dummy weights in the shape of a real
# model, bf16, greedy, --ignore-eos) at a few batch sizes, with the device
# timeline's idle share (GPU idle between steps, docs/gpu.md).
# On the GPU host, with build-device/ from scripts/device-bundle.sh:
#   [BATCHES="1 16 64"] [EAGER=1] [LOG_DIR=DIR] benchmarks/gpu_generate.sh [MODEL_DIR] [PROMPT_LEN] [OUTPUT_LEN]
# EAGER=1 runs with --enforce-eager true (no CUDA graphs); LOG_DIR keeps each
# run's log (with TROUPE_PROFILE_OPS=1 in the environment and EAGER=1 the
# log ends with the per-op device-time profile). The environment passes
# through (TROUPE_DEVICE_SAMPLING=0 samples on the host).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-examples/models/llama-3.1-8b}
prompt_len=${2:-128}
output_len=${3:-128}
eager=$([[ ${EAGER:-0} == 1 ]] && echo true || echo false)
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
echo "| model | batch | prompt | output | eager | device sampling | elapsed s | output tokens/s | ms per step | GPU idle between steps |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for batch in ${BATCHES:-1 16 64}; do
  : >"$tmp/p.jsonl"
  for ((i = 0; i < batch; i++)); do
    ids=""
    for ((t = 0; t < prompt_len; t++)); do ids+="${ids:+,}$(((i * 131 + t * 17 + 3) % 30000))"; done
    echo "{\"prompt_ids\":[$ids]}" >>"$tmp/p.jsonl"
  done
  log=${LOG_DIR:-$tmp}/generate-b$batch-eager-$eager.log
  mkdir -p "$(dirname "$log")"
  build-device/bin/troupe generate --model "$model" --load-format dummy --backend cuda \
    --dtype bfloat16 --max-model-len 4096 --cpu-kvcache-space 16 --max-num-seqs 256 \
    --max-num-batched-tokens 8192 --prompts-file "$tmp/p.jsonl" --max-tokens "$output_len" \
    --temperature 0 --ignore-eos --enforce-eager "$eager" --log-level info >/dev/null 2>"$log"
  stats=$(grep '^stats:' "$log")
  gen=$(sed -E 's/.*generated_tokens=([0-9]+).*/\1/' <<<"$stats")
  el=$(sed -E 's/.*elapsed_s=([0-9.]+).*/\1/' <<<"$stats")
  idle=$(sed -nE 's/.*idle between steps ([0-9.]+ s \([0-9.]+%) of.*/\1)/p' "$log" | tail -1)
  awk -v m="$(basename "$model")" -v b="$batch" -v p="$prompt_len" -v o="$output_len" -v g="$gen" -v e="$el" \
    -v ea="$eager" -v ds="${TROUPE_DEVICE_SAMPLING:-default}" -v idle="${idle:-n/a}" \
    'BEGIN { printf "| %s | %d | %d | %d | %s | %s | %.3f | %.1f | %.2f | %s |\n", m, b, p, o, ea, ds, e, g / e, 1000 * e / o, idle }'
done
