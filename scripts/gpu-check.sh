#!/usr/bin/env bash
# On the GPU host: runs every GPU test of the bundle (and compute-sanitizer
# on the kernel tests) and the GPU kernel benchmarks, and prints a summary
# table last (the benchmarks' own tables after it).
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/gpu-check.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/gpu-check}
mkdir -p "$out"
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TROUPE_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
declare -a rows
for t in build-device/bin/cuda_*_test; do
  name=$(basename "$t")
  if "$t" --gtest_brief=1 >"$out/$name.log" 2>&1; then status=pass; else status=FAIL; fi
  passed=$(grep -c '^\[       OK \]' "$out/$name.log" || true)
  summary=$(grep -E '^\[  (PASSED|FAILED)' "$out/$name.log" | tr '\n' ' ')
  rows+=("| $name | $status | $summary |")
  if [[ ${SANITIZER:-1} == 1 ]] && command -v compute-sanitizer >/dev/null; then
    if compute-sanitizer --tool memcheck --error-exitcode 7 "$t" --gtest_brief=1 \
        >"$out/$name.memcheck.log" 2>&1; then ms=clean; else ms=ERRORS; fi
    rows+=("| $name (compute-sanitizer memcheck) | $ms | $(grep -m1 'ERROR SUMMARY' "$out/$name.memcheck.log") |")
  fi
done
# The GPU deployment example, served end to end.
while IFS= read -r line; do rows+=("$line"); done < <(scripts/gpu-serve-check.sh "$out/serve")
declare -a benches=()
for b in build-device/bin/attention_bench build-device/bin/gemm_bench; do
  [[ -x $b ]] || continue
  name=$(basename "$b")
  if "$b" >"$out/$name.log" 2>&1; then status=ran; benches+=("$out/$name.log"); else status=FAIL; fi
  rows+=("| $name | $status | $out/$name.log |")
done
echo
echo "| check | result | detail |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
for log in "${benches[@]}"; do
  echo
  cat "$log"
done
