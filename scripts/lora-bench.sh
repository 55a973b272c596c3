#!/usr/bin/env bash
# On the GPU host: multi-LoRA's figures (docs/lora.md), dummy Llama-3.1-8B in
# bfloat16 (examples/models/llama-3.1-8b, load_format dummy) against the same
# load on the base model alone, in one session:
#   1. the CUDA LoRA kernel test (tests/kernels/cuda_lora_test.cpp);
#   2. the LoRA fixture goldens on the GPU (scripts/gpu_lora_golden.py);
#   3. 8 random rank-16 adapters on all seven projections (troupe make-lora),
#      max_loras 8: `troupe bench throughput` (random 1024 in / 128 out, a
#      uniform mix of the adapters) and `troupe bench latency` (batch 1),
#      each beside the same run without LoRA, and the throughput run
#      without the delta-first products (TROUPE_LORA_DELTA_FIRST=0) and
#      without the dense path (TROUPE_LORA_DENSE=0).
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/lora-bench.sh [OUT_DIR]   # there
#   4. (only when asked) the LoRA throughput run's per-op device times
#      (TROUPE_PROFILE_OPS=1 --enforce-eager, 64 prompts), in profile.log.
# SECTIONS="1 3" runs some of them (default: 1 2 3).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/lora-bench}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
model=${MODEL:-examples/models/llama-3.1-8b}
sections=" ${SECTIONS:-1 2 3} "
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
if [[ $sections == *" 1 "* ]]; then
  build-device/bin/cuda_lora_test >"$out/cuda_lora_test.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) " "$out/cuda_lora_test.log"
fi
if [[ $sections == *" 2 "* ]]; then
  python3 scripts/gpu_lora_golden.py --troupe "$bin" | tee "$out/golden.md" || status=1
fi
# 8 random rank-16 adapters on all seven projections (sections 3 and 4).
mods=()
if [[ $sections == *" 3 "* || $sections == *" 4 "* ]]; then
  "$bin" make-lora --model "$model" --out "$out/loras" --rank 16 --count 8 >/dev/null || exit 1
  for i in 0 1 2 3 4 5 6 7; do mods+=("a$i=$out/loras/lora-$i"); done
fi
if [[ $sections == *" 3 "* ]]; then
  lora=(--enable-lora --max-loras 8 --max-lora-rank 16 --lora-modules "${mods[@]}")
  common=(--model "$model" --load-format dummy --dtype bfloat16 --log-level warn --seed 0 --max-model-len 4096)
  tp=(--dataset random --num-prompts 256 --input-len 1024 --output-len 128)
  lat=(--batch-size 1 --input-len 128 --output-len 128 --num-iters-warmup 1 --num-iters 3)
  row() {  # name, kind, args... (ENV: environment for the run)
    local name=$1 kind=$2; shift 2
    local log="$out/$name.log"
    if ! env ${ENV:-} "$bin" bench "$kind" "${common[@]}" "$@" >"$log" 2>&1; then echo "| $name | FAIL | $log |"; status=1; return; fi
    if [[ $kind == throughput ]]; then
      echo "| $name | $(grep -oP 'Throughput: \K.*' "$log") | $log |"
    else
      echo "| $name | $(grep -oP 'Avg latency: \K[0-9.]+' "$log") s a batch, $(grep -oP 'per output token \(ms\): \K[0-9.]+' "$log") ms a decode token | $log |"
    fi
  }
  {
    echo "| run | result | log |"
    echo "| --- | --- | --- |"
    row throughput_base throughput "${tp[@]}"
    row throughput_lora8 throughput "${tp[@]}" "${lora[@]}"
    # The way here: without the delta-first products, without the dense path.
    ENV=TROUPE_LORA_DELTA_FIRST=0 row throughput_lora8_delta_after throughput "${tp[@]}" "${lora[@]}"
    ENV=TROUPE_LORA_DENSE=0 row throughput_lora8_segmented throughput "${tp[@]}" "${lora[@]}"
    row latency_b1_base latency "${lat[@]}"
    row latency_b1_lora latency "${lat[@]}" "${lora[@]}"
    row throughput_base_again throughput "${tp[@]}"
  } | tee "$out/bench.md"
fi
if [[ $sections == *" 4 "* ]]; then
  TROUPE_PROFILE_OPS=1 "$bin" bench throughput --model "$model" --load-format dummy --dtype bfloat16 \
    --log-level info --seed 0 --max-model-len 4096 --enforce-eager --dataset random --num-prompts 64 \
    --input-len 1024 --output-len 128 --enable-lora --max-loras 8 --max-lora-rank 16 \
    --lora-modules "${mods[@]}" >"$out/profile.log" 2>&1 || status=1
  grep -iE "lora|linear|gated|attention|total" "$out/profile.log" | head -40
fi
exit $status
