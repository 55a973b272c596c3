#!/usr/bin/env bash
# On the GPU host: multi-LoRA's figures (docs/lora.md), dummy Llama-3.1-8B in
# bfloat16 (examples/models/llama-3.1-8b, load_format dummy) against the same
# load on the base model alone, in one session:
#   1. the CUDA LoRA kernel tests (tests/kernels/cuda_lora_test.cpp,
#      cuda_gemv_lora_test.cpp, cuda_lora_products_test.cpp) and the
#      products' batch-1 micro-benchmark (its disabled test);
#   2. the LoRA fixture goldens on the GPU (scripts/gpu_lora_golden.py);
#   3. 8 random rank-16 adapters on all seven projections (troupe make-lora),
#      max_loras 8: `troupe bench throughput` (random 1024 in / 128 out, a
#      uniform mix of the adapters) and `troupe bench latency` (batch 1),
#      each beside the same run without LoRA (the LoRA throughput run
#      twice), and with HISTORY=1 the
#      throughput run without the delta-first products
#      (TROUPE_LORA_DELTA_FIRST=0) and without the dense path
#      (TROUPE_LORA_DENSE=0).
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/lora-bench.sh [OUT_DIR]   # there
#   4. (only when asked) the LoRA throughput run's per-op device times
#      (TROUPE_PROFILE_OPS=1 --enforce-eager, 64 prompts), in profile.log;
#   5. (only when asked) the same for the batch-1 latency run, base and
#      LoRA, in profile_b1_base.log and profile_b1_lora.log;
#   6. online: `troupe serve` of the base alone and with the 8 adapters,
#      `troupe bench serve` at a fixed request rate (RATE, default 20/s;
#      random 1024 in / 128 out, 400 prompts; --lora-modules: each request
#      names an adapter drawn uniformly).
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
  for t in cuda_lora_test cuda_gemv_lora_test cuda_lora_products_test; do
    build-device/bin/$t >"$out/$t.log" 2>&1 || status=1
    grep -E "^\[  (PASSED|FAILED) " "$out/$t.log"
  done
  build-device/bin/cuda_lora_products_test --gtest_also_run_disabled_tests --gtest_filter='*bench*' \
    >"$out/products_b1.log" 2>&1 || status=1
  grep "a layer" "$out/products_b1.log"
fi
if [[ $sections == *" 2 "* ]]; then
  python3 scripts/gpu_lora_golden.py --troupe "$bin" | tee "$out/golden.md" || status=1
fi
# 8 random rank-16 adapters on all seven projections (sections 3 and 4).
mods=()
if [[ $sections == *" 3 "* || $sections == *" 4 "* || $sections == *" 5 "* || $sections == *" 6 "* ]]; then
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
    # The LoRA run again (it varies by about 2% from run to run, the base
    # by 0.1%); (HISTORY=1) the way here: without the delta-first products,
    # without the dense path.
    row throughput_lora8_again throughput "${tp[@]}" "${lora[@]}"
    if [[ ${HISTORY:-0} == 1 ]]; then
      ENV=TROUPE_LORA_DELTA_FIRST=0 row throughput_lora8_delta_after throughput "${tp[@]}" "${lora[@]}"
      ENV=TROUPE_LORA_DENSE=0 row throughput_lora8_segmented throughput "${tp[@]}" "${lora[@]}"
    fi
    row latency_b1_base latency "${lat[@]}"
    row latency_b1_lora latency "${lat[@]}" "${lora[@]}"
    # The way here: the decode deltas apart from the GEMV (shrink, expand,
    # and the RoPE and SiLU-and-mul epilogues as kernels of their own).
    ENV=TROUPE_LORA_GEMV=0 row latency_b1_lora_apart latency "${lat[@]}" "${lora[@]}"
    # The way here: decode products without the deltas in their epilogue.
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
if [[ $sections == *" 5 "* ]]; then
  for kind in base lora; do
    extra=()
    [[ $kind == lora ]] && extra=(--enable-lora --max-loras 8 --max-lora-rank 16 --lora-modules "${mods[@]}")
    TROUPE_PROFILE_OPS=1 "$bin" bench latency --model "$model" --load-format dummy --dtype bfloat16 \
      --log-level info --seed 0 --max-model-len 4096 --enforce-eager --batch-size 1 --input-len 128 \
      --output-len 32 --num-iters-warmup 1 --num-iters 1 "${extra[@]}" >"$out/profile_b1_$kind.log" 2>&1 || status=1
    echo "== batch 1, $kind"
    grep -A14 "op profile" "$out/profile_b1_$kind.log"
  done
fi
if [[ $sections == *" 6 "* ]]; then
  online() {  # name, serve args...
    local name=$1 port=18090; shift
    "$bin" serve --model "$model" --load-format dummy --dtype bfloat16 --log-level warn --seed 0 \
      --max-model-len 4096 --host 127.0.0.1 --port $port "$@" >"$out/serve_$name.log" 2>&1 &
    local pid=$! ready=""
    for _ in $(seq 1 1200); do
      if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then ready=1; break; fi
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    if [[ -z $ready ]]; then echo "| online_$name | FAIL (never healthy) | $out/serve_$name.log |"; status=1; kill -9 $pid 2>/dev/null; return; fi
    local names=()
    [[ $name == lora8 ]] && names=(--lora-modules a0 a1 a2 a3 a4 a5 a6 a7)
    "$bin" bench serve --port $port --dataset random --input-len 1024 --output-len 128 --num-prompts 400 \
      --request-rate "${RATE:-20}" --seed 0 --disable-progress "${names[@]}" >"$out/online_$name.log" 2>&1 || status=1
    kill -TERM $pid; wait $pid
    local log="$out/online_$name.log"
    echo "| online_$name | $(grep -oP 'Successful requests:\s+\K[0-9]+' "$log") done, $(grep -oP 'Output token throughput \(tok/s\):\s+\K[0-9.]+' "$log") output tok/s, median TTFT $(grep -oP 'Median TTFT \(ms\):\s+\K[0-9.]+' "$log") ms, median TPOT $(grep -oP 'Median TPOT \(ms\):\s+\K[0-9.]+' "$log") ms | $log |"
  }
  {
    echo "| run | result | log |"
    echo "| --- | --- | --- |"
    online base
    online lora8 --enable-lora --max-loras 8 --max-lora-rank 16 --lora-modules "${mods[@]}"
  } | tee "$out/online.md"
fi
exit $status
