#!/usr/bin/env bash
# On the GPU host: issue 24's packed-weight figures (docs/quantization.md).
# Dummy Llama-3.1-8B in bfloat16 against the same model as GPTQ 4-bit
# group 128 (examples/models/llama-3.1-8b-gptq-int4: dummy codes are the
# round-to-nearest quantization of the bf16 dummy weights), both with
# `--dtype bfloat16 --max-model-len 4096`, one after the other in one run:
#   - `bench latency` at batch 1, 16 and 128 (128 in / 128 out): decode
#     ms a token; batch 1 again with the row layout's GEMV
#     (TROUPE_PACKED_LAYOUT=rows), 16 with the weights dequantized for
#     cuBLAS (TROUPE_PACKED_KERNEL_ROWS=0);
#   - `bench latency` prefill of 8 x 1024 (output 2);
#   - per-op device times of a batch-1 step (TROUPE_PROFILE_OPS=1, eager);
#   - PARTS="fp8": the same bf16 model against FP8 W8A8 of it, online
#     (--quantization fp8: a scale a row, activations a token) and with
#     128 x 128 blocks (examples/models/llama-3.1-8b-fp8: activations per
#     token per 128): batch 1, 16, 128, prefill 8 x 1024, a batch-1
#     profile, and `eval kl` bf16 against both;
#   - PARTS="kvcache": the FP8 KV cache (--kv-cache-dtype fp8) against the
#     bf16 cache on dummy Llama-3.1-8B bf16: the memory plans' KV tokens,
#     `bench latency` at batch 1 and 64 over 2048-token prompts, `eval kl`
#     of the 8B and of the tiny fixtures (float32 and bfloat16) against
#     their own bf16 / float cache; "kvtp": `bench throughput`
#     1000 x 1000 in / 1000 out with each cache (issue 27's shape);
#   - PARTS="70b": dummy Llama-3.1-70B GPTQ 4-bit on one GPU, its memory
#     plan and batch-1 latency;
#   - PARTS="kl": `troupe eval kl` (docs/eval.md): dummy Llama-3.1-8B bf16
#     against GPTQ 4-bit g128 of the same weights (--compare
#     quantization=gptq), and the tiny fixtures float32 against bfloat16;
#     with QUANT_MOE_DIR (tests/cli/quantized_moe_test.cpp writes it when
#     TROUPE_QUANT_MOE_DIR is set), a GPTQ tiny-qwen3-moe against its
#     dequantized float twin in float32 and bfloat16.
# Every log goes to OUT_DIR; a summary is printed.
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/gpu-quant-bench.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-quant-bench}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
common=(--load-format dummy --dtype bfloat16 --max-model-len 4096 --log-level info)
parts=${PARTS:-"8b"}

latency() {  # LABEL MODEL BATCH INPUT OUTPUT
  local log=$out/$1.log
  "$bin" bench latency --model "$2" "${common[@]}" --batch-size "$3" --input-len "$4" --output-len "$5" \
    --num-iters-warmup 2 --num-iters 4 >"$log" 2>&1
  echo "$1: $(grep -E '^Avg (prefill time|decode time per output token)' "$log" | tr '\n' ' ')" \
       "$(grep -m1 -o 'weights packed.*\|dequantized to.*' "$log")"
}

if [[ $parts == *8b* ]]; then
  for b in 1 16 128; do
    latency "bf16.b$b" examples/models/llama-3.1-8b "$b" 128 128
    latency "gptq4.b$b" examples/models/llama-3.1-8b-gptq-int4 "$b" 128 128
  done
  # The row layout's GEMV against the tensor-core kernel at batch 1; the
  # weight dequantized for cuBLAS against the packed kernel at 16 (and
  # what 128 runs anyway).
  TROUPE_PACKED_LAYOUT=rows latency gptq4-rows.b1 examples/models/llama-3.1-8b-gptq-int4 1 128 128
  # The float config with --quantization gptq: the same dummy GPTQ model.
  saved=("${common[@]}")
  common+=(--quantization gptq)
  latency gptq4-flag.b1 examples/models/llama-3.1-8b 1 128 128
  common=("${saved[@]}")
  TROUPE_PACKED_KERNEL_ROWS=0 latency gptq4-dequantized.b16 examples/models/llama-3.1-8b-gptq-int4 16 128 128
  latency bf16.prefill8x1024 examples/models/llama-3.1-8b 8 1024 2
  latency gptq4.prefill8x1024 examples/models/llama-3.1-8b-gptq-int4 8 1024 2
  grep -m1 -o 'memory plan:.*' "$out/gptq4.b1.log"
  # Where a batch-1 step's time goes (eager, per op).
  for m in llama-3.1-8b llama-3.1-8b-gptq-int4; do
    TROUPE_PROFILE_OPS=1 "$bin" bench latency --model "examples/models/$m" "${common[@]}" --enforce-eager \
      --batch-size 1 --input-len 128 --output-len 32 --num-iters-warmup 1 --num-iters 2 >"$out/profile-$m.log" 2>&1
    echo "profile ($m, batch 1, eager):"
    grep -E "1x[0-9]+ -> |attention \(decode|rms_norm|silu|qkv_rope|gather" "$out/profile-$m.log" | head -11
  done
fi
if [[ $parts == *fp8* ]]; then
  for b in 1 16 128; do
    latency "bf16.b$b" examples/models/llama-3.1-8b "$b" 128 128
    latency "fp8-block.b$b" examples/models/llama-3.1-8b-fp8 "$b" 128 128
    saved=("${common[@]}")
    common+=(--quantization fp8)
    latency "fp8-online.b$b" examples/models/llama-3.1-8b "$b" 128 128
    common=("${saved[@]}")
  done
  latency bf16.prefill8x1024 examples/models/llama-3.1-8b 8 1024 2
  latency fp8-block.prefill8x1024 examples/models/llama-3.1-8b-fp8 8 1024 2
  grep -m1 -o 'memory plan:.*' "$out/fp8-block.b1.log"
  TROUPE_PROFILE_OPS=1 "$bin" bench latency --model examples/models/llama-3.1-8b-fp8 "${common[@]}" --enforce-eager \
    --batch-size 1 --input-len 128 --output-len 32 --num-iters-warmup 1 --num-iters 2 >"$out/profile-fp8.log" 2>&1
  echo "profile (fp8 block, batch 1, eager):"
  grep -E "1x[0-9]+ -> |attention \(decode|rms_norm|silu|qkv_rope|gather" "$out/profile-fp8.log" | head -11
  for cmp in examples/models/llama-3.1-8b-fp8 fp8; do
    label=$([[ $cmp == fp8 ]] && echo online || echo block)
    arg=$([[ $cmp == fp8 ]] && echo quantization=fp8 || echo "model=$cmp")
    "$bin" eval kl --model examples/models/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-model-len 1024 \
      --compare "$arg" --json-out "$out/kl-fp8-$label.json" >"$out/kl-fp8-$label.log" 2>&1
    echo "kl bf16 vs fp8 $label:"
    grep -E '^(Positions|KL divergence|Argmax|First-token|Greedy-sequence)' "$out/kl-fp8-$label.log" ||
      tail -5 "$out/kl-fp8-$label.log"
  done
fi
if [[ $parts == *kvcache* ]]; then
  for b in 1 64; do
    latency "kv-bf16.b$b" examples/models/llama-3.1-8b "$b" 2048 128
    saved=("${common[@]}")
    common+=(--kv-cache-dtype fp8)
    latency "kv-fp8.b$b" examples/models/llama-3.1-8b "$b" 2048 128
    common=("${saved[@]}")
  done
  for kv in bf16 fp8; do
    echo "kv $kv: $(grep -m1 -o 'KV cache: .*' "$out/kv-$kv.b1.log")"
  done
  kvkl() {  # LABEL ARGS...
    local label=$1
    shift
    "$bin" eval kl "$@" --compare kv_cache_dtype=fp8 --json-out "$out/kl-kv-$label.json" >"$out/kl-kv-$label.log" 2>&1
    echo "kl kv cache vs fp8 kv cache, $label:"
    grep -E '^(Positions|KL divergence|Argmax|First-token|Greedy-sequence)' "$out/kl-kv-$label.log" ||
      tail -5 "$out/kl-kv-$label.log"
  }
  kvkl 8b-bf16 --model examples/models/llama-3.1-8b "${common[@]}" --num-prompts 32 --input-len 128 --output-len 64
  for m in models/tiny-llama moe/tiny-qwen3-moe; do
    for t in float32 bfloat16; do
      kvkl "$(basename "$m")-$t" --model "tests/data/$m" --dtype $t --num-prompts 16 --input-len 64 \
        --output-len 32 --max-model-len 256
    done
  done
fi
if [[ $parts == *kvtp* ]]; then
  for kv in auto fp8; do
    "$bin" bench throughput --model examples/models/llama-3.1-8b "${common[@]}" --kv-cache-dtype $kv \
      --dataset random --num-prompts 1000 --input-len 1000 --output-len 1000 --seed 0 >"$out/tp-kv-$kv.log" 2>&1
    echo "throughput kv $kv: $(grep -iE '^(throughput|preemptions)' "$out/tp-kv-$kv.log" | tr '\n' ' ')"
  done
fi
if [[ $parts == *70b* ]]; then
  latency gptq4-70b.b1 examples/models/llama-3.1-70b-gptq-int4 1 128 128
  grep -m1 -o 'memory plan:.*' "$out/gptq4-70b.b1.log"
fi
if [[ $parts == *kl* ]]; then
  kl() {  # LABEL ARGS...
    local label=$1
    shift
    "$bin" eval kl "$@" --json-out "$out/kl-$label.json" >"$out/kl-$label.log" 2>&1
    echo "kl $label:"
    grep -E '^(Positions|KL divergence|Argmax|First-token|Greedy-sequence|Elapsed)' "$out/kl-$label.log" ||
      tail -5 "$out/kl-$label.log"
  }
  kl 8b-bf16-vs-gptq4 --model examples/models/llama-3.1-8b "${common[@]}" --compare quantization=gptq \
    --num-prompts 32 --input-len 128 --output-len 64
  if [[ -n ${QUANT_MOE_DIR:-} ]]; then
    for t in float32 bfloat16; do
      kl "gptq-moe-vs-dequantized-$t" --model "$QUANT_MOE_DIR/tiny-qwen3-moe-gptq" --dtype $t \
        --compare "model=$QUANT_MOE_DIR/tiny-qwen3-moe-dequantized" --num-prompts 16 --input-len 64 \
        --output-len 32 --max-model-len 256
      grep -m1 -o 'gptq 4-bit weights.*' "$out/kl-gptq-moe-vs-dequantized-$t.log"
    done
  fi
  for m in models/tiny-llama moe/tiny-qwen3-moe quant/tiny-llama-gptq-g64; do
    kl "$(basename "$m")-f32-vs-bf16" --model "tests/data/$m" --dtype float32 --compare dtype=bfloat16 \
      --num-prompts 16 --input-len 64 --output-len 32 --max-model-len 256
  done
fi
