#!/usr/bin/env bash
# CPU throughput of `troupe generate` (greedy, --ignore-eos) at batch 1 and
# 16 for the tiny fixture Llama and random weights in Qwen2.5-0.5B's shape.
# Prints a markdown table; elapsed time is from submission to the last token
# (weight loading excluded), as the engine's stats line reports it.
#
#   scripts/bench-cpu.sh [PROMPT_LEN] [OUTPUT_LEN]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt_len=${1:-32}
output_len=${2:-64}
troupe=build/troupe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # name, batch, extra flags...
  local name=$1 batch=$2
  shift 2
  local file=$tmp/prompts.jsonl
  : >"$file"
  for ((i = 0; i < batch; i++)); do
    local ids=""
    for ((t = 0; t < prompt_len; t++)); do ids+="${ids:+,}$(((i * 131 + t * 17 + 3) % 1000))"; done
    echo "{\"prompt_ids\":[$ids]}" >>"$file"
  done
  local stats
  stats=$("$troupe" generate "$@" --prompts-file "$file" --max-tokens "$output_len" \
    --temperature 0 --ignore-eos --log-level warn 2>&1 >/dev/null | grep '^stats:')
  local gen elapsed
  gen=$(sed -E 's/.*generated_tokens=([0-9]+).*/\1/' <<<"$stats")
  elapsed=$(sed -E 's/.*elapsed_s=([0-9.]+).*/\1/' <<<"$stats")
  awk -v n="$name" -v b="$batch" -v g="$gen" -v e="$elapsed" -v p="$prompt_len" \
    'BEGIN { printf "| %s | %d | %d | %d | %.3f | %.1f | %.1f |\n", n, b, p, g / b, e, g / e, (g + p * b) / e }'
}

echo "| model | batch | prompt tokens | output tokens | elapsed s | output tokens/s | total tokens/s |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for b in 1 16; do run tiny-llama "$b" --model tests/data/models/tiny-llama; done
for b in 1 16; do
  run "qwen2.5-0.5b (dummy)" "$b" --config examples/bench-qwen2.5-0.5b-dummy.yaml
done
