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
# and after each of them the same for the peer engine, Hugging Face
# transformers' continuous batching (benchmarks/peer_transformers.py: random
# weights from the same config.json, bf16, EOS ignored; offline through its
# ContinuousBatchingManager, online through that script's /v1/completions
# driver), with troupe/peer ratios in the summary.
# Builds nothing: runs build-device/bin/troupe from scripts/device-bundle.sh
# (extracting build-device.tar.xz when needed). Writes every JSON result and
# log into OUT_DIR, and a markdown summary (GPU, date, commands, tables) to
# stdout and OUT_DIR/summary.md; PNG plots when python3 has matplotlib.
#
#   benchmarks/bench_matrix.sh OUT_DIR             measure, then summarise
#   benchmarks/bench_matrix.sh --summary OUT_DIR   summarise what OUT_DIR holds
#                                                  (an interrupted run, say)
#
# The summary is built from OUT_DIR's files alone (the run's settings are in
# OUT_DIR/matrix.env), so a row that did not run is simply absent.
#
# Everything is overridable by environment variables (defaults below), e.g.
#   QUICK=1                    a smoke run: prompt counts / 10, fewer iterations
#   STEPS="latency serve"      only some parts
#   MODELS="examples/models/qwen2.5-0.5b"
#   GPUS="0 1"                 measure the models in parallel, one GPU each
#                              (CUDA_VISIBLE_DEVICES; models go round-robin,
#                              ports PORT + 10 x slot); default: one after the
#                              other on the visible GPU
#   PEER=0                     no peer runs (PEER_STEPS="latency throughput": only some)
#   PEER_ARGS="--cuda-graph on" extra flags for every peer_transformers.py command
#   NOTE="..."                 a line for the summary's header
# The peer is 10-30x slower than troupe; at troupe's counts its part alone
# would take over 40 minutes on an H100. These bound it (each says so in the
# summary's header and the prompts columns):
#   PEER_SCALE=10              the peer's online runs at finite request rates send
#                              1/10 of the prompts (at least 10): the same load for
#                              a shorter time
#   PEER_INF_NUM_PROMPTS=N     the peer's all-at-once burst (default: troupe's count);
#                              when smaller, the ratios compare its TTFT and TPOT
#                              with troupe's first N requests sent (burst_head.py)
#   PEER_PREFIX_NUM_PROMPTS=N  the peer's prefix-caching runs (default: troupe's)
#   PEER_LAT_ITERS=N           the peer's timed latency iterations (default: troupe's)
#   PEER_TP_NUM_PROMPTS=N      the peer's offline prompt count (default: troupe's),
#                              or per shape: "1024:128=100 128:128=200 1000:1000=25"
#                              (a shape not listed: troupe's count). Fewer
#                              prompts make smaller batches, which lowers its
#                              throughput (Qwen2.5-0.5B 128/128: 127 tok/s from 10
#                              prompts on an H100, 1,406 from 100 on an H200), so
#                              scale it only with that caveat
#   RESULTS=PATH               where the summary says the run's files are (default
#                              OUT_DIR; for a summary rebuilt from an archive)
#   DOC=docs/benchmarks.md     also write the document there (benchmarks/
#                              benchmarks_head.md, then the summary), PNGs in a
#                              folder of the document's name (docs/benchmarks/)
# OUT_DIR/measured_<model> is written when that model's runs are done (with
# GPUS, its GPU is free from then on); OUT_DIR/DONE is written last
# (benchmarks/bench_matrix_bg.sh waits for it).
# A CPU smoke test of the plumbing with the fixture model:
#   QUICK=1 TROUPE=build-bench/troupe BACKEND=cpu DTYPE=float32 LOAD_FORMAT=auto \
#     MODELS=tests/data/models/tiny-llama ENGINE_ARGS="--max-model-len 4096" \
#     benchmarks/bench_matrix.sh /tmp/bench-smoke
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

summary_only=0
if [[ ${1:-} == --summary ]]; then
  summary_only=1
  shift
fi
out=${1:?usage: benchmarks/bench_matrix.sh [--summary] OUT_DIR}
log() { echo "bench_matrix: $*" >&2; }

# --- the settings (saved in OUT_DIR/matrix.env; --summary reads them back) ----
settings=(MODELS STEPS BACKEND DTYPE LOAD_FORMAT ENGINE_ARGS QUICK LAT_INPUT_LEN LAT_OUTPUT_LEN LAT_ITERS
  LAT_WARMUP TP_NUM_PROMPTS TP_SHAPES SERVE_RATES SERVE_INPUT_LEN SERVE_OUTPUT_LEN SERVE_NUM_PROMPTS
  SERVE_MAX_SECONDS PREFIX_LEN PREFIX_GROUPS PREFIX_SUFFIX_LEN PREFIX_OUTPUT_LEN PREFIX_NUM_PROMPTS
  PREFIX_CONCURRENCY PEER PEER_STEPS PEER_SCALE PEER_INF_NUM_PROMPTS PEER_PREFIX_NUM_PROMPTS PEER_LAT_ITERS
  PEER_TP_NUM_PROMPTS PEER_ARGS PEER_PYTHON GPUS NOTE TROUPE TROUPE_COMMIT peer_name peer_note gpu_info started)
if ((summary_only)); then
  [[ -f $out/matrix.env ]] || { echo "bench_matrix: $out/matrix.env not found (not a bench_matrix.sh output folder)" >&2; exit 2; }
  # shellcheck disable=SC1091
  source "$out/matrix.env"
  DOC=${DOC:-}
fi
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
SERVER_WAIT=${SERVER_WAIT:-900}  # s for a server to answer /health
GPUS=${GPUS:-}
NOTE=${NOTE:-}  # a line for the summary's header
PEER=${PEER:-1}
PEER_PYTHON=${PEER_PYTHON:-python3}  # the GPU host's python3 has torch and transformers
PEER_ARGS=${PEER_ARGS:-}
PEER_STEPS=${PEER_STEPS:-$STEPS}
PEER_SCALE=${PEER_SCALE:-1}
PEER_INF_NUM_PROMPTS=${PEER_INF_NUM_PROMPTS:-$SERVE_NUM_PROMPTS}
PEER_PREFIX_NUM_PROMPTS=${PEER_PREFIX_NUM_PROMPTS:-$PREFIX_NUM_PROMPTS}
PEER_LAT_ITERS=${PEER_LAT_ITERS:-$LAT_ITERS}
PEER_TP_NUM_PROMPTS=${PEER_TP_NUM_PROMPTS:-$TP_NUM_PROMPTS}
DOC=${DOC:-}
peer_name=${peer_name:-transformers} peer_note=${peer_note:-}

# --- prompt counts (the same functions measure and summarise) -----------------
peer_count() { awk -v n="$1" -v s="$PEER_SCALE" 'BEGIN { c = int((n + s - 1) / s); print (c < 10 && n >= 10 ? 10 : c) }'; }
serve_count() {  # serve_count troupe|peer RATE
  local n=$SERVE_NUM_PROMPTS cap
  if [[ $2 == inf ]]; then
    [[ $1 == peer ]] && n=$PEER_INF_NUM_PROMPTS
    echo "$n"
    return
  fi
  cap=$(awk -v r="$2" -v s="$SERVE_MAX_SECONDS" 'BEGIN { c = int(r * s); print (c < 32 ? 32 : c) }')
  ((n > cap)) && n=$cap
  # Finite rates: the peer gets the same load for a shorter time.
  [[ $1 == peer ]] && n=$(peer_count "$n")
  echo "$n"
}
tp_count() {  # tp_count troupe|peer IN:OUT
  [[ $1 == troupe ]] && { echo "$TP_NUM_PROMPTS"; return; }
  if [[ $PEER_TP_NUM_PROMPTS =~ ^[0-9]+$ ]]; then echo "$PEER_TP_NUM_PROMPTS"; return; fi
  local kv
  for kv in $PEER_TP_NUM_PROMPTS; do
    [[ ${kv%%=*} == "$2" ]] && { echo "${kv#*=}"; return; }
  done
  echo "$TP_NUM_PROMPTS"
}
prefix_count() { if [[ $1 == peer ]]; then echo "$PEER_PREFIX_NUM_PROMPTS"; else echo "$PREFIX_NUM_PROMPTS"; fi; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
peer_on() { [[ $PEER == 1 && " $PEER_STEPS " == *" $1 "* ]] && has_step "$1"; }

# --- measuring ------------------------------------------------------------------
ok() { [[ -f $1 && ! -f $1.failed ]]; }  # a run's stdout, and it did not fail
run_logged() {  # run_logged LOGFILE CMD...: stdout to LOGFILE, stderr to LOGFILE.err
  local logfile=$1 t0=$SECONDS rc
  shift
  log "$*"
  rm -f "$logfile.failed"
  "$@" >"$logfile" 2>"$logfile.err"
  rc=$?
  echo "$* # $((SECONDS - t0)) s$( ((rc == 0)) || echo ", exit $rc")" >>"$commands_file"
  if ((rc != 0)); then
    log "exit $rc (see $logfile.err)"
    echo "exit $rc" >"$logfile.failed"
  fi
  return $rc
}
server_pid='' serve_port=$PORT
wait_healthy() {  # wait_healthy NAME LOG: until $server_pid answers /health on $serve_port
  local waited=0
  until curl -sf "http://127.0.0.1:$serve_port/health" >/dev/null 2>&1; do
    if ! kill -0 "$server_pid" 2>/dev/null || ((waited >= SERVER_WAIT * 2)); then
      log "$1 did not become healthy (see $2)"
      stop_server
      return 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
}
start_server() {  # start_server PORT MODEL LOG COMMAND...: a server in the background
  serve_port=$1
  local model=$2 logfile=$3
  shift 3
  echo "$* # server, log $(basename "$logfile")" >>"$commands_file"
  "$@" >"$logfile" 2>&1 &
  server_pid=$!
  wait_healthy "$model's server ($1)" "$logfile"
}
stop_server() {
  [[ -n $server_pid ]] || return 0
  kill -INT "$server_pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}
bench_serve() {  # bench_serve MODEL_DIR NAME ARGS...
  local model=$1 name=$2 vocab
  shift 2
  vocab=$(sed -nE 's/.*"vocab_size"[^0-9]*([0-9]+).*/\1/p' "$model/config.json" | head -1)
  run_logged "$out/$name.txt" "$TROUPE" bench serve --base-url "http://127.0.0.1:$serve_port" --vocab-size "${vocab:-32000}" \
    --metric-percentiles 50,90,99 --disable-progress --json-out "$out/$name.json" "$@"
}

# measure_model MODEL SLOT: every run of one model (in a subshell: its own
# server and ports PORT + 10 x SLOT, + 1 for the peer's server).
measure_model() {
  local model=$1 tag port=$((PORT + 10 * $2)) peer_port=$((PORT + 10 * $2 + 1)) shape in o n engine rate caching name
  tag=$(basename "$model")
  commands_file="$out/commands_${tag}.txt"
  trap stop_server EXIT
  if has_step latency; then
    run_logged "$out/latency_${tag}_b1.txt" "$TROUPE" bench latency --model "$model" "${common[@]}" --batch-size 1 \
      --input-len "$LAT_INPUT_LEN" --output-len "$LAT_OUTPUT_LEN" --num-iters "$LAT_ITERS" \
      --num-iters-warmup "$LAT_WARMUP" --json-out "$out/latency_${tag}_b1.json"
    peer_on latency && run_logged "$out/peer_latency_${tag}_b1.txt" "$PEER_PYTHON" "$peer_script" latency \
      --model-config "$model" "${peer_args[@]}" --batch-size 1 --input-len "$LAT_INPUT_LEN" \
      --output-len "$LAT_OUTPUT_LEN" --num-iters "$PEER_LAT_ITERS" --num-iters-warmup "$LAT_WARMUP" \
      --json-out "$out/peer_latency_${tag}_b1.json"
  fi
  if has_step throughput; then
    for shape in $TP_SHAPES; do
      in=${shape%:*} o=${shape#*:}
      run_logged "$out/throughput_${tag}_${in}_${o}.txt" "$TROUPE" bench throughput --model "$model" "${common[@]}" \
        --num-prompts "$(tp_count troupe "$shape")" --input-len "$in" --output-len "$o" \
        --json-out "$out/throughput_${tag}_${in}_${o}.json"
      peer_on throughput && run_logged "$out/peer_throughput_${tag}_${in}_${o}.txt" "$PEER_PYTHON" "$peer_script" \
        offline --model-config "$model" "${peer_args[@]}" --num-prompts "$(tp_count peer "$shape")" \
        --input-len "$in" --output-len "$o" --json-out "$out/peer_throughput_${tag}_${in}_${o}.json"
    done
  fi
  # Online: troupe at every rate, then the peer at the same rates and seeds.
  for engine in troupe peer; do
    has_step serve || break
    [[ $engine == peer ]] && { peer_on serve || break; }
    local prefix=serve
    if [[ $engine == troupe ]]; then
      start_server "$port" "$model" "$out/serve_${tag}.log" "$TROUPE" serve --model "$model" "${common[@]}" \
        --host 127.0.0.1 --port "$port"
    else
      prefix=peer_serve
      start_server "$peer_port" "$model" "$out/peer_serve_${tag}.log" "$PEER_PYTHON" "$peer_script" serve \
        --model-config "$model" "${peer_args[@]}" --host 127.0.0.1 --port "$peer_port"
    fi || { echo "${prefix}_${tag}.log" >"$out/${prefix}_${tag}.nostart"; continue; }
    local seed=0
    for rate in $SERVE_RATES; do
      seed=$((seed + 1))  # other prompts each run: nothing left in the prefix cache helps
      bench_serve "$model" "${prefix}_${tag}_rate${rate}" --dataset random --input-len "$SERVE_INPUT_LEN" \
        --output-len "$SERVE_OUTPUT_LEN" --num-prompts "$(serve_count "$engine" "$rate")" --request-rate "$rate" \
        --seed "$seed"
    done
    stop_server
  done
  if has_step prefix; then
    for caching in on off; do
      for engine in troupe peer; do
        name="prefix_${tag}_caching_${caching}"
        if [[ $engine == troupe ]]; then
          local flag=--enable-prefix-caching
          [[ $caching == off ]] && flag=--no-enable-prefix-caching
          start_server "$port" "$model" "$out/$name.log" "$TROUPE" serve --model "$model" "${common[@]}" "$flag" \
            --host 127.0.0.1 --port "$port"
        else
          peer_on prefix || continue
          name="peer_$name"
          local peer_flags=()
          [[ $caching == off ]] && peer_flags=(--no-prefix-caching)
          start_server "$peer_port" "$model" "$out/$name.log" "$PEER_PYTHON" "$peer_script" serve \
            --model-config "$model" "${peer_args[@]}" "${peer_flags[@]}" --host 127.0.0.1 --port "$peer_port"
        fi || { echo "$name.log" >"$out/$name.nostart"; continue; }
        bench_serve "$model" "$name" --dataset prefix --prefix-len "$PREFIX_LEN" --num-prefix-groups "$PREFIX_GROUPS" \
          --input-len "$PREFIX_SUFFIX_LEN" --output-len "$PREFIX_OUTPUT_LEN" --num-prompts "$(prefix_count "$engine")" \
          --max-concurrency "$PREFIX_CONCURRENCY"
        stop_server
      done
    done
  fi
  # This model's part is done (with GPUS, its GPU is free from here).
  date -u '+%Y-%m-%d %H:%M:%S UTC' >"$out/measured_${tag}"
}

peer_script=benchmarks/peer_transformers.py
if ((!summary_only)); then
  if [[ -z ${TROUPE:-} ]]; then
    [[ -d build-device ]] || tar -xJf build-device.tar.xz
    TROUPE=build-device/bin/troupe
    [[ -f build-device/COMMIT ]] && TROUPE_COMMIT=$(cat build-device/COMMIT)
    export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  TROUPE_COMMIT=${TROUPE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  [[ -x $TROUPE ]] || { echo "bench_matrix: no executable troupe at '$TROUPE'" >&2; exit 2; }
  if [[ -d $out && -n $(ls -A "$out" 2>/dev/null) && ! -f $out/matrix.env ]]; then
    echo "bench_matrix: $out is not empty and not an earlier bench_matrix.sh output folder" >&2
    exit 2
  fi
  mkdir -p "$out"
  # An earlier run's files would mix into this one's summary.
  rm -f "$out"/*.txt "$out"/*.json "$out"/*.err "$out"/*.failed "$out"/*.nostart "$out"/*.log "$out"/*.png \
    "$out/summary.md" "$out/MEASURED" "$out/DONE" "$out"/measured_*
  started=$(date -u '+%Y-%m-%d %H:%M UTC')
  gpu_info=
  for g in ${GPUS:-first}; do
    sel=(); [[ $g != first ]] && sel=(-i "$g")
    gpu_info+="${gpu_info:+; }$(nvidia-smi "${sel[@]}" --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  done
  [[ $gpu_info == *[a-zA-Z]* ]] || gpu_info="none (nvidia-smi found no GPU)"
  peer_name=transformers peer_note=
  if [[ $PEER == 1 ]]; then
    if peer_info=$("$PEER_PYTHON" "$peer_script" check 2>"$out/peer_check.err"); then
      peer_name=${peer_info%%,*}  # "transformers X.Y.Z"
      peer_note="$peer_info; $peer_script: random weights from the same config.json, bf16, EOS ignored, sampling at temperature 1; offline through ContinuousBatchingManager (started and warmed up before the clock); online through the script's /v1/completions driver over the same manager (not \`transformers serve\`, see docs/bench.md)"
    else
      peer_note="skipped: $("$PEER_PYTHON" --version 2>&1 | head -1): $(tail -1 "$out/peer_check.err")"
      log "peer $peer_note"
      PEER=0
    fi
  else
    peer_note="skipped (PEER=$PEER)"
  fi
  declare -p "${settings[@]}" >"$out/matrix.env"
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true  # one socket per request in flight
  read -r -a engine_args <<<"$ENGINE_ARGS"
  common=(--load-format "$LOAD_FORMAT" --backend "$BACKEND" --dtype "$DTYPE" "${engine_args[@]}" --log-level warn)
  read -r -a peer_args <<<"$PEER_ARGS"
  peer_mml=$(sed -nE 's/.*--max-model-len[= ]+([0-9]+).*/\1/p' <<<"$ENGINE_ARGS")
  peer_args+=(--max-model-len "${peer_mml:-0}")
  read -r -a gpus <<<"$GPUS"
  pids=() slot=0
  for model in $MODELS; do
    if ((${#gpus[@]})); then
      (export CUDA_VISIBLE_DEVICES=${gpus[slot % ${#gpus[@]}]}; measure_model "$model" "$slot") &
      pids+=($!)
      # More models than GPUs: the next round waits for this one.
      (((slot + 1) % ${#gpus[@]} == 0)) && { wait "${pids[@]}"; pids=(); }
    else
      (measure_model "$model" "$slot")
    fi
    slot=$((slot + 1))
  done
  ((${#pids[@]})) && wait "${pids[@]}"
  date -u '+%Y-%m-%d %H:%M:%S UTC' >"$out/MEASURED"
fi

# --- the summary (from OUT_DIR's files alone) ---------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
# is_behind TROUPE PEER higher|lower: troupe's figure is worse than the peer's.
is_behind() {
  awk -v t="$1" -v p="$2" -v dir="$3" 'BEGIN { if (t == "" || p == "") exit 1;
    if (dir == "higher") exit !(t + 0 < p + 0); exit !(t + 0 > p + 0) }'
}
value() { sed -nE "s/^$1[^0-9-]*([-0-9.]+).*/\1/p" "$2" | head -1; }  # value LABEL FILE
serve_row() {  # serve_row FILE: the figures of a bench serve table
  local f=$1
  printf '%s | %s | %s | %s | %s | %s | %s | %s | %s | %s' \
    "$(value 'Successful requests:' "$f")" "$(value 'Failed requests:' "$f")" \
    "$(value 'Request throughput' "$f")" "$(value 'Output token throughput' "$f")" \
    "$(value 'Mean TTFT' "$f")" "$(value 'P99 TTFT' "$f")" "$(value 'Mean TPOT' "$f")" \
    "$(value 'P99 TPOT' "$f")" "$(value 'Mean ITL' "$f")" "$(value 'P99 E2EL' "$f")"
}
lat_row() {  # lat_row FILE: the figures of a bench latency output (troupe's or the peer's: same lines)
  local f=$1
  printf '%s | %s | %s | %s | %s' "$(value 'Avg latency:' "$f")" "$(value '50% percentile latency:' "$f")" \
    "$(value '99% percentile latency:' "$f")" "$(value 'Avg prefill time:' "$f")" \
    "$(value 'Avg decode time per output token' "$f")"
}
tp_figures() {  # tp_figures FILE: "req/s total-tok/s output-tok/s" of a bench throughput output
  sed -nE 's/^Throughput: ([0-9.]+) requests\/s, ([0-9.]+) total tokens\/s, ([0-9.]+) output tokens\/s/\1 \2 \3/p' "$1"
}
tp_row() {
  local v
  read -r -a v <<<"$(tp_figures "$1")"
  printf '%s | %s | %s | %s | %s' "${v[0]:-}" "${v[1]:-}" "${v[2]:-}" "$(value 'Elapsed time' "$1")" \
    "$(value 'Preemptions:' "$1" | grep . || echo n/a)"
}
failed_note() { echo "failed ($(cat "$1.failed" 2>/dev/null), see $(basename "$1").err)"; }

lat_rows=() tp_rows=() serve_rows=() prefix_rows=()
cmp_lat_rows=() cmp_tp_rows=() cmp_serve_rows=() cmp_prefix_rows=()
behind=()   # rows where troupe's headline figure is behind the peer's
declare -A t_serve  # "KIND KEY FIELD" -> troupe's figure, for the ratios
serve_cmp() {  # serve_cmp troupe|peer serve|prefix KEY FILE: keeps troupe's figures; for the peer, a ratio row
  local engine=$1 kind=$2 key="$2 $3" f=$4 out_tps ttft tpot failed
  out_tps=$(value 'Output token throughput' "$f") ttft=$(value 'Mean TTFT' "$f") tpot=$(value 'Mean TPOT' "$f")
  failed=$(value 'Failed requests:' "$f")
  if [[ $engine == troupe ]]; then
    t_serve["$key out"]=$out_tps t_serve["$key ttft"]=$ttft t_serve["$key tpot"]=$tpot t_serve["$key json"]=${f%.txt}.json
    return
  fi
  local t_out=${t_serve["$key out"]:-} t_ttft=${t_serve["$key ttft"]:-} t_tpot=${t_serve["$key tpot"]:-} row
  local -a k h
  read -r -a k <<<"$3"
  # A smaller all-at-once burst for the peer: its TTFT and TPOT compare with
  # troupe's first requests sent, as many as the peer's (burst_head.py).
  local n_t n_p label=${k[1]}
  if [[ $kind == serve && ${k[1]} == inf ]]; then
    n_t=$(serve_count troupe inf) n_p=$(serve_count peer inf)
    if ((n_p < n_t)); then
      label="inf (peer: $n_p prompts; troupe: the whole burst of $n_t)"
      if read -r -a h < <(python3 benchmarks/burst_head.py "${t_serve["$key json"]:-}" "$n_p" 2>/dev/null) &&
        ((${#h[@]} == 3)); then
        t_ttft=${h[0]} t_tpot=${h[1]} label="inf ($n_p prompts: troupe's first $n_p sent of its $n_t)"
      fi
    fi
  fi
  is_behind "$t_out" "$out_tps" higher && behind+=("$kind ${k[0]} ${k[1]} (output tok/s)")
  is_behind "$t_ttft" "$ttft" lower && behind+=("$kind ${k[0]} ${k[1]} (mean TTFT)")
  is_behind "$t_tpot" "$tpot" lower && behind+=("$kind ${k[0]} ${k[1]} (mean TPOT)")
  row="| ${k[0]} | $label | $t_out | $out_tps | $(ratio "$t_out" "$out_tps") | $t_ttft | $ttft | $(ratio "$t_ttft" "$ttft") | $t_tpot | $tpot | $(ratio "$t_tpot" "$tpot") | $failed |"
  if [[ $kind == prefix ]]; then cmp_prefix_rows+=("$row"); else cmp_serve_rows+=("$row"); fi
}

for model in $MODELS; do
  tag=$(basename "$model")
  # Latency.
  f="$out/latency_${tag}_b1.txt" t_lat=()
  if ok "$f"; then
    lat_rows+=("| $tag | troupe | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(lat_row "$f") |")
    t_lat=("$(value 'Avg latency:' "$f")" "$(value 'Avg prefill time:' "$f")" "$(value 'Avg decode time per output token' "$f")")
  elif [[ -f $f.failed ]]; then
    lat_rows+=("| $tag | troupe | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(failed_note "$f") |||||")
  fi
  f="$out/peer_latency_${tag}_b1.txt"
  if ok "$f"; then
    lat_rows+=("| $tag | $peer_name | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(lat_row "$f") |")
    p=("$(value 'Avg latency:' "$f")" "$(value 'Avg prefill time:' "$f")" "$(value 'Avg decode time per output token' "$f")")
    cmp_lat_rows+=("| $tag | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | ${t_lat[0]:-} | ${p[0]} | $(ratio "${t_lat[0]:-}" "${p[0]}") | ${t_lat[1]:-} | ${p[1]} | $(ratio "${t_lat[1]:-}" "${p[1]}") | ${t_lat[2]:-} | ${p[2]} | $(ratio "${t_lat[2]:-}" "${p[2]}") |")
    is_behind "${t_lat[0]:-}" "${p[0]}" lower && behind+=("latency $tag batch 1 (avg latency)")
  elif [[ -f $f.failed ]]; then
    lat_rows+=("| $tag | $peer_name | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(failed_note "$f") |||||")
  fi
  # Offline throughput.
  for shape in $TP_SHAPES; do
    in=${shape%:*} o=${shape#*:} t_tp=() p=()
    f="$out/throughput_${tag}_${in}_${o}.txt"
    if ok "$f"; then
      tp_rows+=("| $tag | troupe | $(tp_count troupe "$shape") | $in | $o | $(tp_row "$f") |")
      read -r -a t_tp <<<"$(tp_figures "$f")"
    elif [[ -f $f.failed ]]; then
      tp_rows+=("| $tag | troupe | $(tp_count troupe "$shape") | $in | $o | $(failed_note "$f") |||||")
    fi
    f="$out/peer_throughput_${tag}_${in}_${o}.txt"
    if ok "$f"; then
      tp_rows+=("| $tag | $peer_name | $(tp_count peer "$shape") | $in | $o | $(tp_row "$f") |")
      read -r -a p <<<"$(tp_figures "$f")"
      is_behind "${t_tp[2]:-}" "${p[2]:-}" higher && behind+=("offline $tag $in/$o (output tok/s)")
      cmp_tp_rows+=("| $tag | $(tp_count troupe "$shape") / $(tp_count peer "$shape") | $in | $o | ${t_tp[2]:-} | ${p[2]:-} | $(ratio "${t_tp[2]:-}" "${p[2]:-}") | ${t_tp[1]:-} | ${p[1]:-} | $(ratio "${t_tp[1]:-}" "${p[1]:-}") | ${t_tp[0]:-} | ${p[0]:-} | $(ratio "${t_tp[0]:-}" "${p[0]:-}") |")
    elif [[ -f $f.failed ]]; then
      tp_rows+=("| $tag | $peer_name | $(tp_count peer "$shape") | $in | $o | $(failed_note "$f") |||||")
    fi
  done
  # Online.
  for engine in troupe peer; do
    prefix=serve label=troupe
    [[ $engine == peer ]] && prefix=peer_serve label=$peer_name
    if [[ -f $out/${prefix}_${tag}.nostart ]]; then
      serve_rows+=("| $tag | $label | all | | not available: the server did not start ($(cat "$out/${prefix}_${tag}.nostart")) ||||||||||")
      continue
    fi
    for rate in $SERVE_RATES; do
      f="$out/${prefix}_${tag}_rate${rate}.txt"
      if ok "$f"; then
        serve_rows+=("| $tag | $label | $rate | $(serve_count "$engine" "$rate") | $(serve_row "$f") |")
        serve_cmp "$engine" serve "$tag $rate" "$f"
      elif [[ -f $f.failed ]]; then
        serve_rows+=("| $tag | $label | $rate | $(serve_count "$engine" "$rate") | $(failed_note "$f") ||||||||||")
      fi
    done
  done
  # Prefix caching.
  for caching in on off; do
    for engine in troupe peer; do
      name="prefix_${tag}_caching_${caching}" label=troupe
      [[ $engine == peer ]] && name="peer_$name" label=$peer_name
      f="$out/$name.txt"
      if [[ -f $out/$name.nostart ]]; then
        prefix_rows+=("| $tag | $label | $caching | | | not available: the server did not start ($(cat "$out/$name.nostart")) ||||||||||")
      elif ok "$f"; then
        hit=$(value 'Prefix cache hit rate' "$f")
        prefix_rows+=("| $tag | $label | $caching | $(prefix_count "$engine") | ${hit:-n/a} | $(serve_row "$f") |")
        serve_cmp "$engine" prefix "$tag $caching" "$f"
      elif [[ -f $f.failed ]]; then
        prefix_rows+=("| $tag | $label | $caching | $(prefix_count "$engine") | | $(failed_note "$f") ||||||||||")
      fi
    done
  done
done
# table HEADING HEADER ROWS...: a markdown section, only when there are rows
# (the rule line has as many columns as the header).
table() {
  local heading=$1 head=$2 rule="|" i cols
  shift 2
  (($#)) || return 0
  cols=$(($(tr -cd '|' <<<"$head" | wc -c) - 1))
  for ((i = 0; i < cols; i++)); do rule+=" --- |"; done
  printf '\n%s\n\n%s\n%s\n' "$heading" "$head" "$rule"
  printf '%s\n' "$@"
}
{
  echo "# troupe bench matrix"
  echo
  echo "- date: $started (measuring began)"
  echo "- GPU: $gpu_info${GPUS:+ (GPUS=\"$GPUS\": the models measured in parallel, one GPU each)}"
  echo "- troupe: $TROUPE, commit $TROUPE_COMMIT"
  echo "- models: $MODELS (load_format $LOAD_FORMAT, dtype $DTYPE, backend $BACKEND, $ENGINE_ARGS)"
  echo "- peer: $peer_note"
  [[ -n $NOTE ]] && echo "- note: $NOTE"
  [[ -f $out/MEASURED ]] || echo "- INCOMPLETE: the measuring stopped before its end; rows not listed did not run"
  [[ $QUICK == 1 ]] && echo "- QUICK=1: prompt counts divided by 10"
  if [[ $PEER == 1 ]]; then
    [[ $PEER_SCALE != 1 ]] && echo "- PEER_SCALE=$PEER_SCALE: at finite request rates the peer gets 1/$PEER_SCALE of troupe's prompts (at least 10): the same load, a shorter run (the prompts columns say how many)"
    [[ $PEER_INF_NUM_PROMPTS != "$SERVE_NUM_PROMPTS" ]] && echo "- PEER_INF_NUM_PROMPTS=$PEER_INF_NUM_PROMPTS: the peer's all-at-once burst is $PEER_INF_NUM_PROMPTS prompts against troupe's $SERVE_NUM_PROMPTS"
    [[ $PEER_PREFIX_NUM_PROMPTS != "$PREFIX_NUM_PROMPTS" ]] && echo "- PEER_PREFIX_NUM_PROMPTS=$PEER_PREFIX_NUM_PROMPTS: the peer's prefix-caching runs send $PEER_PREFIX_NUM_PROMPTS prompts against troupe's $PREFIX_NUM_PROMPTS (the same concurrency)"
    [[ $PEER_LAT_ITERS != "$LAT_ITERS" ]] && echo "- PEER_LAT_ITERS=$PEER_LAT_ITERS: the peer's latency is timed over $PEER_LAT_ITERS iterations against troupe's $LAT_ITERS"
    [[ $PEER_TP_NUM_PROMPTS != "$TP_NUM_PROMPTS" ]] && echo "- PEER_TP_NUM_PROMPTS=\"$PEER_TP_NUM_PROMPTS\": the peer's offline runs use fewer prompts than troupe's $TP_NUM_PROMPTS (the prompts columns say how many); fewer prompts make smaller batches and a lower throughput for it"
  fi
  echo "- results: ${RESULTS:-$out} (one JSON per run, with every figure and per-request arrays)"
  header="| ok | failed | req/s | output tok/s | mean TTFT ms | p99 TTFT ms | mean TPOT ms | p99 TPOT ms | mean ITL ms | p99 E2EL ms |"
  table "## Latency (bench latency, batch 1)" \
    "| model | engine | batch | input | output | avg s | p50 s | p99 s | prefill s | decode ms/token |" \
    "${lat_rows[@]}"
  table "## Offline throughput (bench throughput)" \
    "| model | engine | prompts | input | output | req/s | total tok/s | output tok/s | elapsed s | preemptions |" \
    "${tp_rows[@]}"
  table "## Online serving (bench serve, random $SERVE_INPUT_LEN in / $SERVE_OUTPUT_LEN out)" \
    "| model | engine | request rate | prompts ${header}" "${serve_rows[@]}"
  table "## Prefix caching (bench serve, $PREFIX_GROUPS groups sharing a $PREFIX_LEN-token prefix, suffix $PREFIX_SUFFIX_LEN, output $PREFIX_OUTPUT_LEN, max concurrency $PREFIX_CONCURRENCY)" \
    "| model | engine | prefix caching | prompts | hit rate % ${header}" "${prefix_rows[@]}"
  if ((${#cmp_lat_rows[@]} + ${#cmp_tp_rows[@]} + ${#cmp_serve_rows[@]} + ${#cmp_prefix_rows[@]})); then
    echo
    echo "## troupe / $peer_name"
    echo
    echo "The same shapes on the same GPU, each ratio troupe's figure over the peer's: above 1 for"
    echo "throughput, below 1 for times, means troupe is ahead."
  fi
  table "### Latency (batch 1)" \
    "| model | input | output | troupe avg s | peer avg s | troupe/peer | troupe prefill s | peer prefill s | troupe/peer | troupe decode ms/token | peer decode ms/token | troupe/peer |" \
    "${cmp_lat_rows[@]}"
  table "### Offline throughput" \
    "| model | prompts (troupe / peer) | input | output | troupe output tok/s | peer output tok/s | troupe/peer | troupe total tok/s | peer total tok/s | troupe/peer | troupe req/s | peer req/s | troupe/peer |" \
    "${cmp_tp_rows[@]}"
  cmp_header="| troupe output tok/s | peer output tok/s | troupe/peer | troupe mean TTFT ms | peer mean TTFT ms | troupe/peer | troupe mean TPOT ms | peer mean TPOT ms | troupe/peer | peer failed |"
  table "### Online serving (random $SERVE_INPUT_LEN in / $SERVE_OUTPUT_LEN out)" \
    "| model | request rate ${cmp_header}" "${cmp_serve_rows[@]}"
  table "### Prefix caching" "| model | prefix caching ${cmp_header}" "${cmp_prefix_rows[@]}"
  # Issue 7's targets, for the first Llama model of the run.
  lt=$(for m in $MODELS; do basename "$m"; done | grep -m1 -i llama)
  if [[ -n $lt ]]; then
    echo
    echo "## Targets ($lt, troupe, on this run's GPU; issue 7 sets them for one H100)"
    echo
    echo "| target | measured | met |"
    echo "| --- | --- | --- |"
    f="$out/throughput_${lt}_1024_128.txt"
    if ok "$f"; then
      read -r -a v <<<"$(tp_figures "$f")"
      echo "| offline 1024 in / 128 out: at least 25 requests/s | ${v[0]:-n/a} requests/s | $(awk -v x="${v[0]:-0}" 'BEGIN { print (x >= 25 ? "yes" : "no, by " sprintf("%.1f", 25 - x) " requests/s") }') |"
    else
      echo "| offline 1024 in / 128 out: at least 25 requests/s | not in this run | |"
    fi
    f="$out/serve_${lt}_rate4.txt"
    if ok "$f"; then
      ttft=$(value 'Median TTFT' "$f") tpot=$(value 'Median TPOT' "$f")
      echo "| online 512/256 at 4 requests/s: median TTFT at most 40 ms | ${ttft:-n/a} ms | $(awk -v x="${ttft:-1e9}" 'BEGIN { print (x <= 40 ? "yes" : "no, by " sprintf("%.1f", x - 40) " ms") }') |"
      echo "| online 512/256 at 4 requests/s: median TPOT at most 15 ms | ${tpot:-n/a} ms | $(awk -v x="${tpot:-1e9}" 'BEGIN { print (x <= 15 ? "yes" : "no, by " sprintf("%.1f", x - 15) " ms") }') |"
    else
      echo "| online 512/256 at 4 requests/s: median TTFT <= 40 ms, TPOT <= 15 ms | not in this run | |"
    fi
    if [[ $PEER == 1 ]]; then
      if ((${#behind[@]})); then
        echo "| ahead of the peer on every row | behind on ${#behind[@]}: $(IFS=';'; echo "${behind[*]}") | no |"
      else
        echo "| ahead of the peer on every row | ahead on every compared figure (throughput, TTFT, TPOT, latency) | yes |"
      fi
    fi
  fi
  echo
  echo "## Commands"
  echo
  echo "Each with its wall time; servers with their logs."
  echo
  echo '```'
  for model in $MODELS; do cat "$out/commands_$(basename "$model").txt" 2>/dev/null; done
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

if [[ -n $DOC ]]; then
  # The plots go to a folder named as the document (docs/benchmarks.md:
  # docs/benchmarks/), so that documents of several runs can sit side by side.
  plotdir=${DOC%.md}
  mkdir -p "$plotdir"
  pngs=()
  for png in "$out"/*.png; do
    [[ -f $png ]] || continue
    cp "$png" "$plotdir/"
    pngs+=("$(basename "$png")")
  done
  {
    cat benchmarks/benchmarks_head.md
    echo
    sed '1d' "$out/summary.md"  # its title: the head has one
    if ((${#pngs[@]})); then
      echo
      echo "## Plots"
      echo
      for png in "${pngs[@]}"; do echo "![${png%.png}]($(basename "$plotdir")/$png)"; echo; done
    fi
  } >"$DOC"
  log "wrote $DOC and ${#pngs[@]} plots in $plotdir/"
fi
date -u '+%Y-%m-%d %H:%M:%S UTC' >"$out/DONE"
