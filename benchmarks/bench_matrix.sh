#!/usr/bin/env bash
# The benchmark matrix of issue 7, with `troupe bench` (docs/bench.md), for
# the GPU host: per model (dummy weights, bf16, --backend cuda by default)
#   latency     batch-1 latency (bench latency)
#   throughput  offline throughput, 1000 prompts at 1024/128, 128/128 and
#               1000/1000 in/out tokens (bench throughput)
#   serve       online, random 512/256 at request rates 1, 4, 8, 16 and inf
#               against `troupe serve` (bench serve)
#   prefix      online, prefix dataset with a 2000-token shared prefix, with
#               prefix caching on and then off
# Builds nothing: runs build-device/bin/troupe from scripts/device-bundle.sh
# (extracting build-device.tar.xz when needed). Writes every JSON result and
# log into OUT_DIR, and a markdown summary (GPU, date, commands, tables) to
# stdout and OUT_DIR/summary.md; PNG plots when python3 has matplotlib.
#
#   benchmarks/bench_matrix.sh OUT_DIR
#
# Everything is overridable by environment variables (defaults below), e.g.
#   QUICK=1                    a smoke run: prompt counts / 10, fewer iterations
#   STEPS="latency serve"      only some parts
#   MODELS="examples/models/qwen2.5-0.5b"
# A CPU smoke test of the plumbing with the fixture model:
#   QUICK=1 TROUPE=build-bench/troupe BACKEND=cpu DTYPE=float32 LOAD_FORMAT=auto \
#     MODELS=tests/data/models/tiny-llama ENGINE_ARGS="--max-model-len 4096" \
#     benchmarks/bench_matrix.sh /tmp/bench-smoke
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

out=${1:?usage: benchmarks/bench_matrix.sh OUT_DIR}
MODELS=${MODELS:-"examples/models/llama-3.1-8b examples/models/qwen2.5-0.5b"}
STEPS=${STEPS:-"latency throughput serve prefix"}
BACKEND=${BACKEND:-cuda}
DTYPE=${DTYPE:-bfloat16}
LOAD_FORMAT=${LOAD_FORMAT:-dummy}
ENGINE_ARGS=${ENGINE_ARGS:-"--max-model-len 4096"}
QUICK=${QUICK:-0}
scale() { if [[ $QUICK == 1 ]]; then echo $(((${1} + 9) / 10)); else echo "$1"; fi; }
LAT_INPUT_LEN=${LAT_INPUT_LEN:-128}
LAT_OUTPUT_LEN=${LAT_OUTPUT_LEN:-128}
LAT_ITERS=${LAT_ITERS:-$([[ $QUICK == 1 ]] && echo 3 || echo 10)}
LAT_WARMUP=${LAT_WARMUP:-$([[ $QUICK == 1 ]] && echo 1 || echo 3)}
TP_NUM_PROMPTS=${TP_NUM_PROMPTS:-$(scale 1000)}
TP_SHAPES=${TP_SHAPES:-"1024:128 128:128 1000:1000"}
SERVE_RATES=${SERVE_RATES:-"1 4 8 16 inf"}
SERVE_INPUT_LEN=${SERVE_INPUT_LEN:-512}
SERVE_OUTPUT_LEN=${SERVE_OUTPUT_LEN:-256}
SERVE_NUM_PROMPTS=${SERVE_NUM_PROMPTS:-$(scale 200)}
SERVE_MAX_SECONDS=${SERVE_MAX_SECONDS:-120}  # finite rates: at most rate x this many prompts
PREFIX_LEN=${PREFIX_LEN:-2000}
PREFIX_GROUPS=${PREFIX_GROUPS:-4}
PREFIX_SUFFIX_LEN=${PREFIX_SUFFIX_LEN:-128}
PREFIX_OUTPUT_LEN=${PREFIX_OUTPUT_LEN:-128}
PREFIX_NUM_PROMPTS=${PREFIX_NUM_PROMPTS:-$(scale 200)}
PREFIX_CONCURRENCY=${PREFIX_CONCURRENCY:-32}
PORT=${PORT:-8765}
SERVER_WAIT=${SERVER_WAIT:-900}  # s for `troupe serve` to answer /health

if [[ -z ${TROUPE:-} ]]; then
  [[ -d build-device ]] || tar -xJf build-device.tar.xz
  TROUPE=build-device/bin/troupe
  export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
[[ -x $TROUPE ]] || { echo "bench_matrix: no executable troupe at '$TROUPE'" >&2; exit 2; }
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true  # one socket per request in flight
read -r -a engine_args <<<"$ENGINE_ARGS"
common=(--load-format "$LOAD_FORMAT" --backend "$BACKEND" --dtype "$DTYPE" "${engine_args[@]}" --log-level warn)
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
log() { echo "bench_matrix: $*" >&2; }
commands=()
run_logged() {  # run_logged LOGFILE CMD...: stdout to LOGFILE, stderr to LOGFILE.err
  local logfile=$1
  shift
  commands+=("$*")
  log "$*"
  "$@" >"$logfile" 2>"$logfile.err"
  local rc=$?
  ((rc == 0)) || log "exit $rc (see $logfile.err)"
  return $rc
}
value() { sed -nE "s/^$1[^0-9-]*([-0-9.]+).*/\1/p" "$2" | head -1; }  # value LABEL FILE

# --- the server -------------------------------------------------------------
server_pid=
start_server() {  # start_server MODEL LOG EXTRA_ARGS...
  local model=$1 logfile=$2
  shift 2
  commands+=("$TROUPE serve --model $model ${common[*]} $* --host 127.0.0.1 --port $PORT")
  "$TROUPE" serve --model "$model" "${common[@]}" "$@" --host 127.0.0.1 --port "$PORT" >"$logfile" 2>&1 &
  server_pid=$!
  local waited=0
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
    if ! kill -0 "$server_pid" 2>/dev/null || ((waited >= SERVER_WAIT * 2)); then
      log "troupe serve did not become healthy (see $logfile)"
      stop_server
      return 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
}
stop_server() {
  [[ -n $server_pid ]] || return 0
  kill -INT "$server_pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}
trap stop_server EXIT

bench_serve() {  # bench_serve MODEL_DIR NAME ARGS...
  local model=$1 name=$2 vocab
  shift 2
  vocab=$(sed -nE 's/.*"vocab_size"[^0-9]*([0-9]+).*/\1/p' "$model/config.json" | head -1)
  run_logged "$out/$name.txt" "$TROUPE" bench serve --base-url "http://127.0.0.1:$PORT" --vocab-size "${vocab:-32000}" \
    --metric-percentiles 50,90,99 --disable-progress --json-out "$out/$name.json" "$@"
}

# --- the tables -------------------------------------------------------------
lat_rows=() tp_rows=() serve_rows=() prefix_rows=()
serve_row() {  # serve_row FILE: the figures of a bench serve table
  local f=$1
  printf '%s | %s | %s | %s | %s | %s | %s | %s | %s | %s' \
    "$(value 'Successful requests:' "$f")" "$(value 'Failed requests:' "$f")" \
    "$(value 'Request throughput' "$f")" "$(value 'Output token throughput' "$f")" \
    "$(value 'Mean TTFT' "$f")" "$(value 'P99 TTFT' "$f")" "$(value 'Mean TPOT' "$f")" \
    "$(value 'P99 TPOT' "$f")" "$(value 'Mean ITL' "$f")" "$(value 'P99 E2EL' "$f")"
}

for model in $MODELS; do
  tag=$(basename "$model")
  if has_step latency; then
    f="$out/latency_${tag}_b1.txt"
    if run_logged "$f" "$TROUPE" bench latency --model "$model" "${common[@]}" --batch-size 1 \
      --input-len "$LAT_INPUT_LEN" --output-len "$LAT_OUTPUT_LEN" --num-iters "$LAT_ITERS" \
      --num-iters-warmup "$LAT_WARMUP" --json-out "$out/latency_${tag}_b1.json"; then
      lat_rows+=("| $tag | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(value 'Avg latency:' "$f") | $(value '50% percentile latency:' "$f") | $(value '99% percentile latency:' "$f") | $(value 'Avg prefill time:' "$f") | $(value 'Avg decode time per output token' "$f") |")
    fi
  fi
  if has_step throughput; then
    for shape in $TP_SHAPES; do
      in=${shape%:*} o=${shape#*:}
      f="$out/throughput_${tag}_${in}_${o}.txt"
      if run_logged "$f" "$TROUPE" bench throughput --model "$model" "${common[@]}" --num-prompts "$TP_NUM_PROMPTS" \
        --input-len "$in" --output-len "$o" --json-out "$out/throughput_${tag}_${in}_${o}.json"; then
        tp=$(sed -nE 's/^Throughput: ([0-9.]+) requests\/s, ([0-9.]+) total tokens\/s, ([0-9.]+) output tokens\/s/\1 | \2 | \3/p' "$f")
        tp_rows+=("| $tag | $TP_NUM_PROMPTS | $in | $o | $tp | $(value 'Elapsed time' "$f") | $(value 'Preemptions:' "$f") |")
      fi
    done
  fi
  if has_step serve && start_server "$model" "$out/serve_${tag}.log"; then
    seed=0
    for rate in $SERVE_RATES; do
      n=$SERVE_NUM_PROMPTS
      if [[ $rate != inf ]]; then
        cap=$(awk -v r="$rate" -v s="$SERVE_MAX_SECONDS" 'BEGIN { c = int(r * s); print (c < 32 ? 32 : c) }')
        ((n > cap)) && n=$cap
      fi
      name="serve_${tag}_rate${rate}"
      seed=$((seed + 1))  # other prompts each run: nothing left in the prefix cache helps
      bench_serve "$model" "$name" --dataset random --input-len "$SERVE_INPUT_LEN" --output-len "$SERVE_OUTPUT_LEN" \
        --num-prompts "$n" --request-rate "$rate" --seed "$seed" &&
        serve_rows+=("| $tag | $rate | $n | $(serve_row "$out/$name.txt") |")
    done
    stop_server
  fi
  if has_step prefix; then
    for caching in on off; do
      flag=--enable-prefix-caching
      [[ $caching == off ]] && flag=--no-enable-prefix-caching
      start_server "$model" "$out/prefix_${tag}_${caching}.log" "$flag" || continue
      name="prefix_${tag}_caching_${caching}"
      if bench_serve "$model" "$name" --dataset prefix --prefix-len "$PREFIX_LEN" --num-prefix-groups "$PREFIX_GROUPS" \
        --input-len "$PREFIX_SUFFIX_LEN" --output-len "$PREFIX_OUTPUT_LEN" --num-prompts "$PREFIX_NUM_PROMPTS" \
        --max-concurrency "$PREFIX_CONCURRENCY"; then
        hit=$(value 'Prefix cache hit rate' "$out/$name.txt")
        prefix_rows+=("| $tag | $caching | ${hit:-n/a} | $(serve_row "$out/$name.txt") |")
      fi
      stop_server
    done
  fi
done

# --- the summary ------------------------------------------------------------
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
{
  echo "# troupe bench matrix"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPU: ${gpu:-none (nvidia-smi not found)}"
  echo "- troupe: $TROUPE, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- models: $MODELS (load_format $LOAD_FORMAT, dtype $DTYPE, backend $BACKEND, $ENGINE_ARGS)"
  [[ $QUICK == 1 ]] && echo "- QUICK=1: prompt counts divided by 10"
  echo "- results: $out (one JSON per run, with every figure and per-request arrays)"
  if ((${#lat_rows[@]})); then
    echo
    echo "## Latency (bench latency, batch 1)"
    echo
    echo "| model | batch | input | output | avg s | p50 s | p99 s | prefill s | decode ms/token |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${lat_rows[@]}"
  fi
  if ((${#tp_rows[@]})); then
    echo
    echo "## Offline throughput (bench throughput)"
    echo
    echo "| model | prompts | input | output | req/s | total tok/s | output tok/s | elapsed s | preemptions |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${tp_rows[@]}"
  fi
  header="| ok | failed | req/s | output tok/s | mean TTFT ms | p99 TTFT ms | mean TPOT ms | p99 TPOT ms | mean ITL ms | p99 E2EL ms |"
  rule="| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  if ((${#serve_rows[@]})); then
    echo
    echo "## Online serving (bench serve, random $SERVE_INPUT_LEN in / $SERVE_OUTPUT_LEN out)"
    echo
    echo "| model | request rate | prompts ${header}"
    echo "| --- | --- | --- ${rule}"
    printf '%s\n' "${serve_rows[@]}"
  fi
  if ((${#prefix_rows[@]})); then
    echo
    echo "## Prefix caching (bench serve, $PREFIX_GROUPS groups sharing a $PREFIX_LEN-token prefix, suffix $PREFIX_SUFFIX_LEN, output $PREFIX_OUTPUT_LEN, max concurrency $PREFIX_CONCURRENCY)"
    echo
    echo "| model | prefix caching | hit rate % ${header}"
    echo "| --- | --- | --- ${rule}"
    printf '%s\n' "${prefix_rows[@]}"
  fi
  echo
  echo "## Commands"
  echo
  echo '```'
  printf '%s\n' "${commands[@]}"
  echo '```'
} | tee "$out/summary.md"

plotted=0
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" scripts/plot_bench.py "$out" || log "plot_bench.py failed"
    plotted=1
    break
  fi
done
((plotted)) || log "no python3 with matplotlib: no plots (the JSON files hold everything)"
