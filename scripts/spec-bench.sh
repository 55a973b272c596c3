#!/usr/bin/env bash
# On the GPU host: speculative decoding's figures (docs/speculative_decoding.md),
# dummy Llama-3.1-8B in bfloat16 (examples/models/llama-3.1-8b, load_format dummy):
#   1. batch 1 on a prompt-copying workload (`--dataset repeat`, greedy):
#      output tokens/s without speculation, with it (goodput control on), and
#      for K = 1..8 with the control off (TROUPE_SPEC_CONTROL=0), with the
#      acceptance rate of each;
#   2. batch 64 on `random` prompts (no useful matches): without, and with
#      speculation (control on and off; prompt_lookup_min 1, the most matches);
#      then drafts proposed at every step and all rejected
#      (TROUPE_DEBUG_SPEC_REJECT_ALL=1 on the greedy repeat workload) at
#      batch 64 and batch 1, control on and off;
#   3. what --batch-invariant costs (every row computed as any batch
#      computes it: docs/gpu.md, "Batch invariance"): batch 1 as in 1 with
#      speculation, batch 1 and batch 4 on `random` prompts (decodes of one
#      and four rows), batch 64 on short `random` prompts (prefill in 8-row
#      products), each without and with it.
# SECTIONS="1 3" runs some of them (default: all).
# Every row is one `troupe bench throughput` run in the same session.
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/spec-bench.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/spec-bench}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
model=${MODEL:-examples/models/llama-3.1-8b}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
common=(--model "$model" --load-format dummy --dtype bfloat16 --log-level warn --seed 0 --max-model-len 4096)
row() {  # name, env, args...
  local name=$1 envs=$2; shift 2
  local log="$out/$name.log"
  if env $envs "$bin" bench throughput "${common[@]}" "$@" >"$log" 2>&1; then :; else echo "| $name | FAIL | | | $log |"; return; fi
  local tps acc mal
  tps=$(grep -oP 'total tokens/s, \K[0-9.]+' "$log")
  acc=$(grep -oP 'accepted \(rate \K[0-9.]+' "$log" || true)
  mal=$(grep -oP 'mean acceptance length \K[0-9.]+' "$log" || true)
  echo "| $name | ${tps} | ${acc:--} | ${mal:--} | $log |"
}
b1=(--dataset repeat --num-prompts 1 --input-len 1024 --output-len 512 --repeat-block-len 64 --temperature 0)
spec() { echo "{\"method\":\"ngram\",\"num_speculative_tokens\":$1,\"prompt_lookup_min\":${2:-2},\"prompt_lookup_max\":${3:-4}}"; }
{
  echo "| run | output tokens/s | acceptance | mean acceptance length | log |"
  echo "| --- | --- | --- | --- | --- |"
  sections=" ${SECTIONS:-1 2 3} "
  if [[ $sections == *" 1 "* ]]; then
  row b1_off "" "${b1[@]}"
  row b1_spec_k4_control "" "${b1[@]}" --speculative-config "$(spec 4)"
  for k in 1 2 3 4 5 6 7 8; do
    row "b1_spec_k${k}_fixed" "TROUPE_SPEC_CONTROL=0" "${b1[@]}" --speculative-config "$(spec $k)"
  done
  row b1_off_again "" "${b1[@]}"
  fi
  if [[ $sections == *" 2 "* ]]; then
  b64=(--dataset random --num-prompts 64 --input-len 1024 --output-len 256 --max-num-seqs 64)
  row b64_random_off "" "${b64[@]}"
  row b64_random_spec_k4_control "" "${b64[@]}" --speculative-config "$(spec 4 1 3)"
  row b64_random_spec_k4_fixed "TROUPE_SPEC_CONTROL=0" "${b64[@]}" --speculative-config "$(spec 4 1 3)"
  row b64_random_off_again "" "${b64[@]}"
  # Drafts proposed and all rejected (TROUPE_DEBUG_SPEC_REJECT_ALL=1; the
  # greedy repeat workload proposes at every step): batch 64 and batch 1.
  rej=TROUPE_DEBUG_SPEC_REJECT_ALL=1
  b64r=(--dataset repeat --num-prompts 64 --input-len 1024 --output-len 256 --repeat-block-len 64 --temperature 0 --max-num-seqs 64)
  row b64_rejected_off "" "${b64r[@]}"
  row b64_rejected_spec_k4_control "$rej" "${b64r[@]}" --speculative-config "$(spec 4)"
  row b64_rejected_spec_k4_fixed "$rej TROUPE_SPEC_CONTROL=0" "${b64r[@]}" --speculative-config "$(spec 4)"
  row b1_rejected_off "" "${b1[@]}"
  row b1_rejected_spec_k4_control "$rej" "${b1[@]}" --speculative-config "$(spec 4)"
  row b1_rejected_spec_k4_fixed "$rej TROUPE_SPEC_CONTROL=0" "${b1[@]}" --speculative-config "$(spec 4)"
  fi
  if [[ $sections == *" 3 "* ]]; then
  inv=--batch-invariant
  row b1_spec_k4_control "" "${b1[@]}" --speculative-config "$(spec 4)"
  row b1_spec_k4_control_invariant "" "${b1[@]}" --speculative-config "$(spec 4)" $inv
  b1r=(--dataset random --num-prompts 1 --input-len 1024 --output-len 512)
  row b1_random_off "" "${b1r[@]}"
  row b1_random_off_invariant "" "${b1r[@]}" $inv
  b4=(--dataset random --num-prompts 16 --input-len 1024 --output-len 256 --max-num-seqs 4)
  row b4_random_off "" "${b4[@]}"
  row b4_random_off_invariant "" "${b4[@]}" $inv
  row b4_random_spec_k4_control_invariant "" "${b4[@]}" --speculative-config "$(spec 4 1 3)" $inv
  b64s=(--dataset random --num-prompts 64 --input-len 128 --output-len 256 --max-num-seqs 64)
  row b64_short_off "" "${b64s[@]}"
  row b64_short_off_invariant "" "${b64s[@]}" $inv
  row b4_random_off_again "" "${b4[@]}"
  fi
} | tee "$out/spec.md"
