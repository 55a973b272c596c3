#!/usr/bin/env bash
# On the GPU host: every GPU test and benchmark of the bundle, then one
# summary table (the benchmarks' own tables after it):
#   - the CUDA kernel tests and the NCCL communicator's (on every visible
#     GPU, up to 4: the multi-GPU runs use this too), with
#     compute-sanitizer memcheck on each (SANITIZER=0 skips it),
#   - the fixture goldens through `troupe generate` in float32 and bfloat16
#     (scripts/gpu_golden.py); with the FP8 KV cache against the CPU
#     backend's run with it; again through a one-rank NCCL group
#     (TROUPE_DEBUG_TP_COMM=1: the tensor-parallel all-reduces run through
#     NCCL and are captured in the CUDA graphs); and with
#     --tensor-parallel-size 2 and 4, --pipeline-parallel-size 2 and 2 x 2
#     where that many GPUs are visible (issue 23's hosts),
#   - the GPU deployment example served end to end (scripts/gpu-serve-check.sh),
#   - issue 6's performance figures against the measured limits
#     (benchmarks/gpu_roofline.py: gemm_bench, attention_bench, bench
#     latency, the device timeline, start-up; ROOFLINE_ARGS=--quick: fewer
#     iterations, --no-ab: without the comparison rows; ROOFLINE=0 skips it).
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/gpu-check.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-check}
mkdir -p "$out"
source scripts/device-env.sh
export TROUPE_TEST_DATA=$PWD/tests/data
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
declare -a rows
for t in build-device/bin/cuda_*_test build-device/bin/nccl_*_test; do
  [[ -x $t ]] || continue
  name=$(basename "$t")
  if "$t" --gtest_brief=1 >"$out/$name.log" 2>&1; then status=pass; else status=FAIL; fi
  summary=$(grep -E '^\[  (PASSED|FAILED)' "$out/$name.log" | tr '\n' ' ')
  rows+=("| $name | $status | $summary |")
  if [[ ${SANITIZER:-1} == 1 ]] && command -v compute-sanitizer >/dev/null; then
    if compute-sanitizer --tool memcheck --error-exitcode 7 "$t" --gtest_brief=1 \
        >"$out/$name.memcheck.log" 2>&1; then ms=clean; else ms=ERRORS; fi
    rows+=("| $name (compute-sanitizer memcheck) | $ms | $(grep -m1 'ERROR SUMMARY' "$out/$name.memcheck.log") |")
  fi
done
# Fixture goldens: one row per (model, dtype). golden LABEL [gpu_golden.py args]
golden() {
  local label=$1 md="$out/golden$1.md"
  shift
  if python3 scripts/gpu_golden.py --tol-bf16 0.8 "$@" >"$md" 2>"${md%.md}.err"; then g=pass; else g=FAIL; fi
  while IFS='|' read -r _ model dtype passed tol top prompt _; do
    rows+=("| goldens$label:$model/$dtype | $passed | $tol, max top-5 logprob error $top, prompt logprobs $prompt |")
  done < <(grep -E '^\| tiny' "$md")
  rows+=("| goldens$label (scripts/gpu_golden.py) | $g | $md |")
}
golden ""
golden "-quant" --quant
# MoE in bf16: the fixtures' own bf16 probe deviates by up to 3.5 (routes
# flip at small top-k margins: docs/moe.md, "Tests"); float32 stays at 1e-3.
golden "-moe" --moe --tol-bf16 3.5
# The FP8 KV cache: against the CPU backend's float32 run with the same
# cache (its reference; the goldens hold float caches' results).
golden "-fp8kv" --reference cpu --extra '["--kv-cache-dtype", "fp8"]'
golden "-moe-fp8kv" --moe --tol-bf16 3.5 --reference cpu --extra '["--kv-cache-dtype", "fp8"]'
# One rank through NCCL: the log must say the group was made.
TROUPE_DEBUG_TP_COMM=1 build-device/bin/troupe generate --model tests/data/models/tiny-llama \
  --prompt-ids 1,2,3 --max-tokens 4 >"$out/nccl-one-rank.log" 2>&1
if grep -q "tensor parallel rank 0/1" "$out/nccl-one-rank.log"; then nccl=pass; else nccl=FAIL; fi
rows+=("| one-rank NCCL group in troupe (TROUPE_DEBUG_TP_COMM=1) | $nccl | $out/nccl-one-rank.log |")
TROUPE_DEBUG_TP_COMM=1 golden "-nccl1"
TROUPE_DEBUG_TP_COMM=1 golden "-moe-nccl1" --moe --tol-bf16 3.5
gpus=$(nvidia-smi -L | wc -l)
for t in 2 4; do
  (( gpus >= t )) && golden "-tp$t" --extra "[\"--tensor-parallel-size\", \"$t\"]"
  (( gpus >= t )) && golden "-moe-tp$t" --moe --tol-bf16 3.5 --extra "[\"--tensor-parallel-size\", \"$t\"]"
done
(( gpus >= 2 )) && golden "-pp2" --extra '["--pipeline-parallel-size", "2"]'
(( gpus >= 4 )) && golden "-tp2pp2" --extra '["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]'
# Pipeline stages in two processes meeting in a NCCL group (the ids sent
# in the rendezvous' welcome): the goldens on two GPUs; on one GPU, NCCL
# must refuse the two processes' ranks on the same device and both must
# say so and exit (the id reached the worker: they joined one group).
if (( gpus >= 2 )); then
  golden "-pp2-procs" --worker-devices 1
else
  CUDA_VISIBLE_DEVICES=0 timeout 150 build-device/bin/troupe worker --connect 127.0.0.1:29590 \
    --model tests/data/models/tiny-llama --backend cuda --pipeline-parallel-size 2 \
    --max-num-batched-tokens 256 --max-num-seqs 8 \
    --distributed-timeout 60 >"$out/stages-one-gpu.worker.log" 2>&1 &
  wpid=$!
  CUDA_VISIBLE_DEVICES=0 timeout 150 build-device/bin/troupe generate --model tests/data/models/tiny-llama \
    --backend cuda --pipeline-parallel-size 2 --distributed-port 29590 --distributed-timeout 60 \
    --max-num-batched-tokens 256 --max-num-seqs 8 \
    --prompt-ids 1,2,3 --max-tokens 4 >"$out/stages-one-gpu.log" 2>&1
  head_rc=$?
  wait "$wpid"
  worker_rc=$?
  if (( head_rc != 0 && head_rc != 124 && worker_rc != 124 )) &&
     grep -q "GPUs of its own" "$out/stages-one-gpu.log"; then s=pass; else s=FAIL; fi
  rows+=("| stages in two processes on one GPU refused by NCCL (head exit $head_rc, worker $worker_rc) | $s | $out/stages-one-gpu.log |")
fi
true
# The GPU deployment example, served end to end.
while IFS= read -r line; do rows+=("$line"); done < <(scripts/gpu-serve-check.sh "$out/serve")
# Performance against the physical limits.
if [[ ${ROOFLINE:-1} == 1 ]]; then
  if python3 benchmarks/gpu_roofline.py ${ROOFLINE_ARGS:-} "$out/roofline" >"$out/roofline.log" 2>&1; then r=ran; else r=FAIL; fi
  rows+=("| benchmarks/gpu_roofline.py | $r | $out/roofline/roofline.md |")
fi
echo
echo "| check | result | detail |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
if [[ ${ROOFLINE:-1} == 1 ]]; then
  cat "$out/roofline/roofline.md" 2>/dev/null || tail -20 "$out/roofline.log"
fi
for log in "$out/roofline/attention_bench.log.out" "$out/roofline/gemm_bench.log.out"; do
  [[ -f $log ]] && { echo; cat "$log"; }
done
