#!/usr/bin/env bash
# First GPU throughput figures of `troupe generate` (dummy weights in the
# shape of a real model, bf16, greedy, --ignore-eos) at a few batch sizes.
# On the GPU host, with build-device/ from scripts/device-bundle.sh:
#   [BATCHES="1 16 64"] benchmarks/gpu_generate.sh [MODEL_DIR] [PROMPT_LEN] [OUTPUT_LEN]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-examples/models/llama-3.1-8b}
prompt_len=${2:-128}
output_len=${3:-128}
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
echo "| model | batch | prompt | output | elapsed s | output tokens/s | ms per step |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for batch in ${BATCHES:-1 16 64}; do
  : >"$tmp/p.jsonl"
  for ((i = 0; i < batch; i++)); do
    ids=""
    for ((t = 0; t < prompt_len; t++)); do ids+="${ids:+,}$(((i * 131 + t * 17 + 3) % 30000))"; done
    echo "{\"prompt_ids\":[$ids]}" >>"$tmp/p.jsonl"
  done
  stats=$(build-device/bin/troupe generate --model "$model" --load-format dummy --backend cuda \
    --dtype bfloat16 --max-model-len 4096 --cpu-kvcache-space 16 --max-num-seqs 256 \
    --max-num-batched-tokens 8192 --prompts-file "$tmp/p.jsonl" --max-tokens "$output_len" \
    --temperature 0 --ignore-eos --log-level warn 2>&1 >/dev/null | grep '^stats:')
  gen=$(sed -E 's/.*generated_tokens=([0-9]+).*/\1/' <<<"$stats")
  el=$(sed -E 's/.*elapsed_s=([0-9.]+).*/\1/' <<<"$stats")
  awk -v m="$(basename "$model")" -v b="$batch" -v p="$prompt_len" -v o="$output_len" -v g="$gen" -v e="$el" \
    'BEGIN { printf "| %s | %d | %d | %d | %.2f | %.1f | %.2f |\n", m, b, p, o, e, g / e, 1000 * e / o }'
done
