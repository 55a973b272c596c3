#!/usr/bin/env bash
# The whole GPU run (tests, goldens, issue 6's figures, issue 7's benchmark
# matrix with the peer) started in one command and collected in another,
# for a GPU host that ends each command after some minutes:
#
#   scripts/gpu-all.sh start OUT      sanity checks in the foreground (the
#                                     GEMV, kernel and attention tests, the goldens; where
#                                     they fail, again with TROUPE_PDL=0, then
#                                     also TROUPE_GEMV=off, and the long part
#                                     runs the first way that passed; if none
#                                     did, it stops here), then the rest detached
#   scripts/gpu-all.sh wait OUT [S]   waits up to S seconds (540); exit 0
#                                     when all is done, 3 while running;
#                                     packs OUT/results.tar.xz either way
#
# With two or more GPUs the matrix measures its two models in parallel
# (GPUS="0 1") and scripts/gpu-check.sh runs on GPU 1 once the second
# model's part is done; with one GPU the matrix runs first (issue 7 wants it
# from one run; a host that is taken back mid-way keeps it whole), then gpu-check.
# The matrix uses benchmarks/benchmarks_head.md's settings (override any
# through the environment) and writes its document to OUT/doc/benchmarks.md
# with the plots in OUT/doc/benchmarks/ (copy them to docs/ to publish).
# Needs build-device/ or build-device.tar.xz (scripts/device-bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
cmd=${1:?usage: scripts/gpu-all.sh start|wait OUT [SECONDS]}
out=${2:?usage: scripts/gpu-all.sh start|wait OUT [SECONDS]}
[[ $out == /* ]] || out=$PWD/$out

pack() {
  tar -cJf "$out/results.tar.xz" -C "$out" --exclude=results.tar.xz . 2>/dev/null
}

case $cmd in
  start)
    mkdir -p "$out/sanity"
    [[ -d build-device ]] || tar -xJf build-device.tar.xz
    export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export TROUPE_TEST_DATA=$PWD/tests/data PYTHONUNBUFFERED=1
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
    echo "gpu-all: $gpus GPU(s), troupe $(cat build-device/COMMIT 2>/dev/null)"
    # sanity TAG TEST...: those kernel tests and the goldens (through the
    # engine: graphs, GEMV tuning, PDL) with the current environment.
    sanity() {
      local tag=$1 ok=1 t
      shift
      mkdir -p "$out/sanity/$tag"
      for t in "$@"; do
        if build-device/bin/$t --gtest_brief=1 >"$out/sanity/$tag/$t.log" 2>&1; then
          echo "gpu-all: [$tag] $t passed"
        else
          echo "gpu-all: [$tag] $t FAILED:"; grep -E 'Failure|FAILED|error' "$out/sanity/$tag/$t.log" | head -10; ok=0
        fi
      done
      if python3 scripts/gpu_golden.py --tol-bf16 0.8 >"$out/sanity/$tag/golden.md" 2>"$out/sanity/$tag/golden.err"; then
        echo "gpu-all: [$tag] goldens passed"
      else
        echo "gpu-all: [$tag] goldens FAILED:"; cat "$out/sanity/$tag/golden.md"; tail -5 "$out/sanity/$tag/golden.err"; ok=0
      fi
      ((ok))
    }
    # The newest speed-ups can each be turned off: where the defaults fail,
    # try without programmatic dependent launch, then without the GEMV too,
    # and run the long part the first way that passes (and say so).
    fallback=
    if ! sanity defaults cuda_gemv_test cuda_kernels_test cuda_attention_test; then
      export TROUPE_PDL=0
      fallback="TROUPE_PDL=0"
      if ! sanity no-pdl cuda_gemv_test cuda_kernels_test cuda_attention_test; then
        export TROUPE_GEMV=off
        fallback="TROUPE_PDL=0 TROUPE_GEMV=off"
        # (the GEMV's own test no longer matters: the engine does not use it)
        if ! sanity no-pdl-no-gemv cuda_kernels_test; then pack; echo "gpu-all: stopped before the long part"; exit 1; fi
      fi
      echo "gpu-all: the defaults failed their checks; the long part runs with $fallback"
      export NOTE="${NOTE:+$NOTE; }run with $fallback: the defaults failed gpu-all.sh's sanity checks (see sanity/)"
    fi
    export DOC=${DOC:-$out/doc/benchmarks.md} SERVE_MAX_SECONDS=${SERVE_MAX_SECONDS:-30}
    export PEER_SCALE=${PEER_SCALE:-10} PEER_INF_NUM_PROMPTS=${PEER_INF_NUM_PROMPTS:-50}
    export PEER_PREFIX_NUM_PROMPTS=${PEER_PREFIX_NUM_PROMPTS:-32} PEER_LAT_ITERS=${PEER_LAT_ITERS:-3}
    export PEER_TP_NUM_PROMPTS=${PEER_TP_NUM_PROMPTS:-"1024:128=100 128:128=200 1000:1000=25"}
    mkdir -p "$(dirname "$DOC")"
    if ((gpus >= 2)); then
      export GPUS=${GPUS:-"0 1"}
      setsid nohup benchmarks/bench_matrix.sh "$out/matrix" >"$out/matrix.out" 2>"$out/matrix.err" </dev/null &
      last=$(basename "$(echo "${MODELS:-examples/models/llama-3.1-8b examples/models/qwen2.5-0.5b}" | awk '{print $NF}')")
      setsid nohup bash -c "until [[ -f '$out/matrix/measured_$last' ]]; do sleep 5; done
        CUDA_VISIBLE_DEVICES=1 ROOFLINE_ARGS=\${ROOFLINE_ARGS:---quick} scripts/gpu-check.sh '$out/check' >'$out/check.out' 2>&1
        date -u > '$out/check.done'" </dev/null >/dev/null 2>&1 &
    else
      setsid nohup bash -c "benchmarks/bench_matrix.sh '$out/matrix' >'$out/matrix.out' 2>'$out/matrix.err'
        ROOFLINE_ARGS=\${ROOFLINE_ARGS:---quick} scripts/gpu-check.sh '$out/check' >'$out/check.out' 2>&1
        date -u > '$out/check.done'" </dev/null >/dev/null 2>&1 &
    fi
    echo "gpu-all: started; scripts/gpu-all.sh wait $out"
    ;;
  wait)
    limit=${3:-540} start=$SECONDS last=
    while ((SECONDS - start < limit)); do
      if [[ -f $out/matrix/DONE && -f $out/check.done ]]; then
        pack
        echo "gpu-all: done"; tail -40 "$out/check.out"
        exit 0
      fi
      commands=$(grep -c '^bench_matrix: ' "$out/matrix.err" 2>/dev/null)
      matrix_state="${commands:-0} commands"
      [[ -f $out/matrix/DONE ]] && matrix_state+=" (finished)"
      check_state="$(find "$out/check" -type f 2>/dev/null | wc -l) files"
      [[ -f $out/check.done ]] && check_state="finished"
      now="matrix: $matrix_state; check: $check_state"
      if [[ $now != "$last" ]]; then
        echo "gpu-all: $(date -u +%H:%M:%S) $now; $(grep '^bench_matrix: ' "$out/matrix.err" 2>/dev/null | tail -1 | cut -c15-120)"
        last=$now
      fi
      sleep 5
    done
    pack
    echo "gpu-all: still running after $limit s (partial results packed)"
    exit 3
    ;;
  *) echo "usage: scripts/gpu-all.sh start|wait OUT [SECONDS]" >&2; exit 2 ;;
esac
