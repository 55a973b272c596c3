#!/usr/bin/env bash
# Runs benchmarks/bench_matrix.sh detached from the calling shell, for
# hosts that cut a command off after some minutes but keep processes of
# their own session running (the GPU host: 10 minutes a command).
#
#   benchmarks/bench_matrix_bg.sh start OUT_DIR    starts it (environment as
#                                                  for bench_matrix.sh), returns
#   benchmarks/bench_matrix_bg.sh wait OUT_DIR [S] waits up to S seconds (540) for
#                                                  OUT_DIR/DONE, printing progress;
#                                                  exit 0 once done, 3 if still running,
#                                                  1 if it died without finishing
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
cmd=${1:?usage: bench_matrix_bg.sh start|wait OUT_DIR [SECONDS]}
out=${2:?usage: bench_matrix_bg.sh start|wait OUT_DIR [SECONDS]}
case $cmd in
  start)
    mkdir -p "$out"
    setsid nohup benchmarks/bench_matrix.sh "$out" >"$out/matrix.out" 2>"$out/matrix.err" </dev/null &
    echo $! >"$out/matrix.pid"
    echo "bench_matrix_bg: started, pid $(cat "$out/matrix.pid"); log $out/matrix.err"
    ;;
  wait)
    limit=${3:-540}
    start=$SECONDS last=
    while ((SECONDS - start < limit)); do
      if [[ -f $out/DONE ]]; then
        echo "bench_matrix_bg: done at $(cat "$out/DONE")"
        exit 0
      fi
      if ! kill -0 "$(cat "$out/matrix.pid" 2>/dev/null)" 2>/dev/null; then
        echo "bench_matrix_bg: the matrix stopped without finishing; last lines:"
        tail -5 "$out/matrix.err"
        exit 1
      fi
      now=$(grep -c '^bench_matrix: ' "$out/matrix.err" 2>/dev/null)
      if [[ $now != "$last" ]]; then
        echo "bench_matrix_bg: $(date -u +%H:%M:%S) $now commands so far: $(grep '^bench_matrix: ' "$out/matrix.err" | tail -1 | cut -c1-150)"
        last=$now
      fi
      sleep 5
    done
    echo "bench_matrix_bg: still running after ${limit} s"
    exit 3
    ;;
  *) echo "usage: bench_matrix_bg.sh start|wait OUT_DIR [SECONDS]" >&2; exit 2 ;;
esac
