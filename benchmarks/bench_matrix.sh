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
#   benchmarks/bench_matrix.sh OUT_DIR
#
# Everything is overridable by environment variables (defaults below), e.g.
#   QUICK=1                    a smoke run: prompt counts / 10, fewer iterations
#   STEPS="latency serve"      only some parts
#   MODELS="examples/models/qwen2.5-0.5b"
#   PEER=0                     no peer runs (PEER_STEPS="latency throughput": only some)
#   PEER_ARGS="--cuda-graph on" extra flags for every peer_transformers.py command
#   PEER_SCALE=10              the peer's online runs at finite request rates send
#                              1/10 of the prompts (at least 10): the same load for
#                              a shorter time; the peer is 10-30x slower and the
#                              full counts would not fit a GPU session
#   PEER_TP_NUM_PROMPTS=N      the peer's offline prompt count (default: troupe's);
#                              fewer prompts make smaller batches, which lowers its
#                              throughput (Qwen2.5-0.5B 128/128: 127 tok/s from 10
#                              prompts on an H100, 1,406 from 100 on an H200), so
#                              scale it only with that caveat
#   DOC=docs/benchmarks.md     also write the document there (benchmarks/
#                              benchmarks_head.md, then the summary), PNGs beside
#                              it in benchmarks/
# OUT_DIR/DONE is written last (benchmarks/bench_matrix_bg.sh waits for it).
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
SERVER_WAIT=${SERVER_WAIT:-900}  # s for a server to answer /health
PEER=${PEER:-1}
PEER_PYTHON=${PEER_PYTHON:-python3}  # the GPU host's python3 has torch and transformers
PEER_ARGS=${PEER_ARGS:-}
PEER_STEPS=${PEER_STEPS:-$STEPS}
PEER_PORT=${PEER_PORT:-$((PORT + 1))}
PEER_SCALE=${PEER_SCALE:-1}
PEER_TP_NUM_PROMPTS=${PEER_TP_NUM_PROMPTS:-$TP_NUM_PROMPTS}
DOC=${DOC:-}
peer_count() { awk -v n="$1" -v s="$PEER_SCALE" 'BEGIN { c = int((n + s - 1) / s); print (c < 10 && n >= 10 ? 10 : c) }'; }

if [[ -z ${TROUPE:-} ]]; then
  [[ -d build-device ]] || tar -xJf build-device.tar.xz
  TROUPE=build-device/bin/troupe
  [[ -f build-device/COMMIT ]] && TROUPE_COMMIT=$(cat build-device/COMMIT)
  export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
[[ -x $TROUPE ]] || { echo "bench_matrix: no executable troupe at '$TROUPE'" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/DONE"
behind=()  # rows where troupe's headline figure is behind the peer's
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true  # one socket per request in flight
read -r -a engine_args <<<"$ENGINE_ARGS"
common=(--load-format "$LOAD_FORMAT" --backend "$BACKEND" --dtype "$DTYPE" "${engine_args[@]}" --log-level warn)
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
log() { echo "bench_matrix: $*" >&2; }

# --- the peer: transformers ---------------------------------------------------
peer_script=benchmarks/peer_transformers.py
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
read -r -a peer_args <<<"$PEER_ARGS"
peer_mml=$(sed -nE 's/.*--max-model-len[= ]+([0-9]+).*/\1/p' <<<"$ENGINE_ARGS")
peer_args+=(--max-model-len "${peer_mml:-0}")
peer_on() { [[ $PEER == 1 && " $PEER_STEPS " == *" $1 "* ]] && has_step "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
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
# is_behind TROUPE PEER higher|lower: troupe's figure is worse than the peer's.
is_behind() {
  awk -v t="$1" -v p="$2" -v dir="$3" 'BEGIN { if (t == "" || p == "") exit 1;
    if (dir == "higher") exit !(t + 0 < p + 0); exit !(t + 0 > p + 0) }'
}
value() { sed -nE "s/^$1[^0-9-]*([-0-9.]+).*/\1/p" "$2" | head -1; }  # value LABEL FILE

# --- the server -------------------------------------------------------------
server_pid= serve_port=$PORT
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
start_server() {  # start_server MODEL LOG EXTRA_ARGS...
  local model=$1 logfile=$2
  shift 2
  serve_port=$PORT
  commands+=("$TROUPE serve --model $model ${common[*]} $* --host 127.0.0.1 --port $PORT")
  "$TROUPE" serve --model "$model" "${common[@]}" "$@" --host 127.0.0.1 --port "$PORT" >"$logfile" 2>&1 &
  server_pid=$!
  wait_healthy "troupe serve" "$logfile"
}
start_peer_server() {  # start_peer_server MODEL LOG EXTRA_ARGS...: the peer's /v1/completions driver
  local model=$1 logfile=$2
  shift 2
  serve_port=$PEER_PORT
  commands+=("$PEER_PYTHON $peer_script serve --model-config $model ${peer_args[*]} $* --host 127.0.0.1 --port $PEER_PORT")
  "$PEER_PYTHON" "$peer_script" serve --model-config "$model" "${peer_args[@]}" "$@" --host 127.0.0.1 \
    --port "$PEER_PORT" >"$logfile" 2>&1 &
  server_pid=$!
  wait_healthy "the peer server ($peer_script serve)" "$logfile"
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
  run_logged "$out/$name.txt" "$TROUPE" bench serve --base-url "http://127.0.0.1:$serve_port" --vocab-size "${vocab:-32000}" \
    --metric-percentiles 50,90,99 --disable-progress --json-out "$out/$name.json" "$@"
}

# --- the tables -------------------------------------------------------------
lat_rows=() tp_rows=() serve_rows=() prefix_rows=()
cmp_lat_rows=() cmp_tp_rows=() cmp_serve_rows=() cmp_prefix_rows=()
declare -A t_serve  # "NAME FIELD" -> troupe's figure, for the ratios
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
serve_cmp() {  # serve_cmp troupe|peer serve|prefix KEY FILE: keeps troupe's figures; for the peer, a ratio row
  local engine=$1 kind=$2 key="$2 $3" f=$4 out_tps ttft tpot failed
  out_tps=$(value 'Output token throughput' "$f") ttft=$(value 'Mean TTFT' "$f") tpot=$(value 'Mean TPOT' "$f")
  failed=$(value 'Failed requests:' "$f")
  if [[ $engine == troupe ]]; then
    t_serve["$key out"]=$out_tps t_serve["$key ttft"]=$ttft t_serve["$key tpot"]=$tpot
    return
  fi
  local t_out=${t_serve["$key out"]:-} t_ttft=${t_serve["$key ttft"]:-} t_tpot=${t_serve["$key tpot"]:-} row
  local -a k
  read -r -a k <<<"$3"
  is_behind "$t_out" "$out_tps" higher && behind+=("$kind ${k[0]} ${k[1]} (output tok/s)")
  is_behind "$t_ttft" "$ttft" lower && behind+=("$kind ${k[0]} ${k[1]} (mean TTFT)")
  is_behind "$t_tpot" "$tpot" lower && behind+=("$kind ${k[0]} ${k[1]} (mean TPOT)")
  row="| ${k[0]} | ${k[1]} | $t_out | $out_tps | $(ratio "$t_out" "$out_tps") | $t_ttft | $ttft | $(ratio "$t_ttft" "$ttft") | $t_tpot | $tpot | $(ratio "$t_tpot" "$tpot") | $failed |"
  if [[ $kind == prefix ]]; then cmp_prefix_rows+=("$row"); else cmp_serve_rows+=("$row"); fi
}

for model in $MODELS; do
  tag=$(basename "$model")
  if has_step latency; then
    f="$out/latency_${tag}_b1.txt" t_lat=()
    if run_logged "$f" "$TROUPE" bench latency --model "$model" "${common[@]}" --batch-size 1 \
      --input-len "$LAT_INPUT_LEN" --output-len "$LAT_OUTPUT_LEN" --num-iters "$LAT_ITERS" \
      --num-iters-warmup "$LAT_WARMUP" --json-out "$out/latency_${tag}_b1.json"; then
      lat_rows+=("| $tag | troupe | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(lat_row "$f") |")
      t_lat=("$(value 'Avg latency:' "$f")" "$(value 'Avg prefill time:' "$f")" "$(value 'Avg decode time per output token' "$f")")
    fi
    if peer_on latency; then
      f="$out/peer_latency_${tag}_b1.txt"
      if run_logged "$f" "$PEER_PYTHON" "$peer_script" latency --model-config "$model" "${peer_args[@]}" \
        --batch-size 1 --input-len "$LAT_INPUT_LEN" --output-len "$LAT_OUTPUT_LEN" --num-iters "$LAT_ITERS" \
        --num-iters-warmup "$LAT_WARMUP" --json-out "$out/peer_latency_${tag}_b1.json"; then
        lat_rows+=("| $tag | $peer_name | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | $(lat_row "$f") |")
        p=("$(value 'Avg latency:' "$f")" "$(value 'Avg prefill time:' "$f")" "$(value 'Avg decode time per output token' "$f")")
        cmp_lat_rows+=("| $tag | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | ${t_lat[0]:-} | ${p[0]} | $(ratio "${t_lat[0]:-}" "${p[0]}") | ${t_lat[1]:-} | ${p[1]} | $(ratio "${t_lat[1]:-}" "${p[1]}") | ${t_lat[2]:-} | ${p[2]} | $(ratio "${t_lat[2]:-}" "${p[2]}") |")
        is_behind "${t_lat[0]:-}" "${p[0]}" lower && behind+=("latency $tag batch 1 (avg latency)")
      else
        lat_rows+=("| $tag | $peer_name | 1 | $LAT_INPUT_LEN | $LAT_OUTPUT_LEN | failed: $(basename "$f").err |||||")
      fi
    fi
  fi
  if has_step throughput; then
    for shape in $TP_SHAPES; do
      in=${shape%:*} o=${shape#*:} t_tp=()
      f="$out/throughput_${tag}_${in}_${o}.txt"
      if run_logged "$f" "$TROUPE" bench throughput --model "$model" "${common[@]}" --num-prompts "$TP_NUM_PROMPTS" \
        --input-len "$in" --output-len "$o" --json-out "$out/throughput_${tag}_${in}_${o}.json"; then
        tp_rows+=("| $tag | troupe | $TP_NUM_PROMPTS | $in | $o | $(tp_row "$f") |")
        read -r -a t_tp <<<"$(tp_figures "$f")"
      fi
      if peer_on throughput; then
        f="$out/peer_throughput_${tag}_${in}_${o}.txt"
        peer_n=$PEER_TP_NUM_PROMPTS
        if run_logged "$f" "$PEER_PYTHON" "$peer_script" offline --model-config "$model" "${peer_args[@]}" \
          --num-prompts "$peer_n" --input-len "$in" --output-len "$o" \
          --json-out "$out/peer_throughput_${tag}_${in}_${o}.json"; then
          tp_rows+=("| $tag | $peer_name | $peer_n | $in | $o | $(tp_row "$f") |")
          read -r -a p <<<"$(tp_figures "$f")"
          is_behind "${t_tp[2]:-}" "${p[2]:-}" higher && behind+=("offline $tag $in/$o (output tok/s)")
          cmp_tp_rows+=("| $tag | $TP_NUM_PROMPTS / $peer_n | $in | $o | ${t_tp[2]:-} | ${p[2]:-} | $(ratio "${t_tp[2]:-}" "${p[2]:-}") | ${t_tp[1]:-} | ${p[1]:-} | $(ratio "${t_tp[1]:-}" "${p[1]:-}") | ${t_tp[0]:-} | ${p[0]:-} | $(ratio "${t_tp[0]:-}" "${p[0]:-}") |")
        else
          tp_rows+=("| $tag | $peer_name | $peer_n | $in | $o | failed: $(basename "$f").err |||||")
        fi
      fi
    done
  fi
  # Online: troupe at every rate, then the peer at the same rates, prompts and seeds.
  for engine in troupe peer; do
    has_step serve || break
    if [[ $engine == troupe ]]; then
      start_server "$model" "$out/serve_${tag}.log" || continue
      prefix=serve label=troupe
    else
      peer_on serve || break
      if ! start_peer_server "$model" "$out/peer_serve_${tag}.log"; then
        serve_rows+=("| $tag | $peer_name | all | | not available: the peer server did not start (peer_serve_${tag}.log) ||||||||||")
        continue
      fi
      prefix=peer_serve label=$peer_name
    fi
    seed=0
    for rate in $SERVE_RATES; do
      n=$SERVE_NUM_PROMPTS
      if [[ $rate != inf ]]; then
        cap=$(awk -v r="$rate" -v s="$SERVE_MAX_SECONDS" 'BEGIN { c = int(r * s); print (c < 32 ? 32 : c) }')
        ((n > cap)) && n=$cap
      fi
      # Finite rates: the same load for a shorter time. All at once (inf) is a
      # burst whose size matters: unscaled.
      [[ $engine == peer && $rate != inf ]] && n=$(peer_count "$n")
      name="${prefix}_${tag}_rate${rate}"
      seed=$((seed + 1))  # other prompts each run: nothing left in the prefix cache helps
      if bench_serve "$model" "$name" --dataset random --input-len "$SERVE_INPUT_LEN" --output-len "$SERVE_OUTPUT_LEN" \
        --num-prompts "$n" --request-rate "$rate" --seed "$seed"; then
        serve_rows+=("| $tag | $label | $rate | $n | $(serve_row "$out/$name.txt") |")
        serve_cmp "$engine" serve "$tag $rate" "$out/$name.txt"
      fi
    done
    stop_server
  done
  if has_step prefix; then
    for caching in on off; do
      for engine in troupe peer; do
        name="prefix_${tag}_caching_${caching}"
        if [[ $engine == troupe ]]; then
          flag=--enable-prefix-caching
          [[ $caching == off ]] && flag=--no-enable-prefix-caching
          start_server "$model" "$out/prefix_${tag}_${caching}.log" "$flag" || continue
          label=troupe
        else
          peer_on prefix || continue
          peer_flags=()
          [[ $caching == off ]] && peer_flags=(--no-prefix-caching)
          if ! start_peer_server "$model" "$out/peer_prefix_${tag}_${caching}.log" "${peer_flags[@]}"; then
            prefix_rows+=("| $tag | $peer_name | $caching | | | not available: the peer server did not start (peer_prefix_${tag}_${caching}.log) ||||||||||")
            continue
          fi
          name="peer_$name" label=$peer_name
        fi
        n=$PREFIX_NUM_PROMPTS
        if bench_serve "$model" "$name" --dataset prefix --prefix-len "$PREFIX_LEN" --num-prefix-groups "$PREFIX_GROUPS" \
          --input-len "$PREFIX_SUFFIX_LEN" --output-len "$PREFIX_OUTPUT_LEN" --num-prompts "$n" \
          --max-concurrency "$PREFIX_CONCURRENCY"; then
          hit=$(value 'Prefix cache hit rate' "$out/$name.txt")
          prefix_rows+=("| $tag | $label | $caching | $n | ${hit:-n/a} | $(serve_row "$out/$name.txt") |")
          serve_cmp "$engine" prefix "$tag $caching" "$out/$name.txt"
        fi
        stop_server
      done
    done
  fi
done

# --- the summary ------------------------------------------------------------
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
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
{
  echo "# troupe bench matrix"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPU: ${gpu:-none (nvidia-smi not found)}"
  echo "- troupe: $TROUPE, commit ${TROUPE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "- models: $MODELS (load_format $LOAD_FORMAT, dtype $DTYPE, backend $BACKEND, $ENGINE_ARGS)"
  echo "- peer: $peer_note"
  [[ $QUICK == 1 ]] && echo "- QUICK=1: prompt counts divided by 10"
  [[ $PEER_SCALE != 1 && $PEER == 1 ]] && echo "- PEER_SCALE=$PEER_SCALE: at finite request rates the peer gets 1/$PEER_SCALE of troupe's prompts (at least 10): the same load, a shorter run (the prompts columns say how many)"
  [[ $PEER_TP_NUM_PROMPTS != "$TP_NUM_PROMPTS" && $PEER == 1 ]] && echo "- PEER_TP_NUM_PROMPTS=$PEER_TP_NUM_PROMPTS: the peer's offline runs use $PEER_TP_NUM_PROMPTS prompts against troupe's $TP_NUM_PROMPTS; fewer prompts make smaller batches and a lower throughput for it"
  echo "- results: $out (one JSON per run, with every figure and per-request arrays)"
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
    echo "## Targets ($lt, troupe)"
    echo
    echo "| target | measured | met |"
    echo "| --- | --- | --- |"
    f="$out/throughput_${lt}_1024_128.txt"
    if [[ -f $f ]]; then
      read -r -a v <<<"$(tp_figures "$f")"
      echo "| offline 1024 in / 128 out: at least 25 requests/s | ${v[0]:-n/a} requests/s | $(awk -v x="${v[0]:-0}" 'BEGIN { print (x >= 25 ? "yes" : "no, by " sprintf("%.1f", 25 - x) " requests/s") }') |"
    else
      echo "| offline 1024 in / 128 out: at least 25 requests/s | not in this run | |"
    fi
    f="$out/serve_${lt}_rate4.txt"
    if [[ -f $f ]]; then
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

if [[ -n $DOC ]]; then
  docdir=$(dirname "$DOC")
  mkdir -p "$docdir/benchmarks"
  pngs=()
  for png in "$out"/*.png; do
    [[ -f $png ]] || continue
    cp "$png" "$docdir/benchmarks/"
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
      for png in "${pngs[@]}"; do echo "![${png%.png}](benchmarks/$png)"; echo; done
    fi
  } >"$DOC"
  log "wrote $DOC and ${#pngs[@]} plots in $docdir/benchmarks/"
fi
date -u '+%Y-%m-%d %H:%M:%S UTC' >"$out/DONE"
