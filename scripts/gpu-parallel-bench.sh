#!/usr/bin/env bash
# On a GPU host with two or more GPUs (issue 23; docs/parallelism.md,
# "Measured on H200s"): tensor and pipeline parallelism with dummy
# Llama-3.1-8B / 70B in bfloat16, in parts (PARTS="tokens latency 70b kill",
# default: all), each printing a markdown table:
#   tokens   greedy outputs (8 random prompts, 128 tokens) at T = 1, T = 2
#            (and 4 where visible), P = 2 in one process and P = 2 in two
#            processes (head on GPU 0, `troupe worker` on GPU 1), compared
#            with T = 1 token by token (bfloat16, and float32 for T = 2);
#   latency  `troupe bench latency` at batch 1 and 64 (128 in / 128 out),
#            T = 1 against T = 2 (and 4), and benchmarks/allreduce_bench
#            (NCCL's all-reduce through troupe's communicator for the
#            step's message sizes);
#   70b      dummy Llama-3.1-70B at T = 2 (and 4): `bench throughput`
#            (200 prompts, 1024 in / 128 out) and `bench serve` against
#            `troupe serve` (random 512 / 256, 200 prompts at 4 requests/s
#            and at inf);
#   kill     P = 2 in two processes serving dummy Llama-3.1-8B; the worker
#            process killed (SIGKILL) 10 s into `bench serve`: how long
#            in-flight requests take to fail, with which status, what
#            /health says, and the head's log line naming the rank.
# NCCL_NVLS_ENABLE=0 in every process (exported below).
#   scripts/device-bundle.sh            # here, after building
#   (carry build-device.tar.xz) scripts/gpu-parallel-bench.sh [OUT_DIR]   # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-parallel}
mkdir -p "$out"
source scripts/device-env.sh
export NCCL_NVLS_ENABLE=0
bin=build-device/bin/troupe
parts=" ${PARTS:-tokens latency 70b kill} "
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1 && cat "$out/topo.txt"
m8=examples/models/llama-3.1-8b
m70=examples/models/llama-3.1-70b
common=(--load-format dummy --log-level warn --seed 0 --max-model-len 4096)
ts=()
for t in 2 4; do (( gpus >= t )) && ts+=("$t"); done

# Two processes: `troupe worker` for stage 1 on GPU 1 (port $1, log $2,
# then the model's flags), a child of this shell; its pid in $wpid.
start_worker() {
  local port=$1 log=$2; shift 2
  CUDA_VISIBLE_DEVICES=1 "$bin" worker --connect "127.0.0.1:$port" --pipeline-parallel-size 2 \
    --distributed-timeout 120 "$@" >"$log" 2>&1 &
  wpid=$!
}

if [[ $parts == *" tokens "* ]]; then
  python3 -c "
import json, random
r = random.Random(23)
for i in range(8):
    print(json.dumps({'prompt_ids': [r.randrange(1000, 120000) for _ in range(32 + 24 * i)]}))" >"$out/prompts.jsonl"
  gen() {  # name, env, args...
    local name=$1 envs=$2; shift 2
    env $envs "$bin" generate --model "$m8" "${common[@]}" --prompts-file "$out/prompts.jsonl" \
      --max-tokens 128 --temperature 0 --ignore-eos "$@" >"$out/tok.$name" 2>"$out/tok.$name.err"
    echo "exit $?" >>"$out/tok.$name.err"
  }
  for dt in bfloat16 float32; do
    gen "$dt.t1" "" --dtype "$dt"
    for t in "${ts[@]}"; do
      [[ $dt == float32 && $t != 2 ]] && continue
      gen "$dt.t$t" "" --dtype "$dt" --tensor-parallel-size "$t"
    done
  done
  gen bfloat16.p2 "" --dtype bfloat16 --pipeline-parallel-size 2
  (( gpus >= 4 )) && gen bfloat16.t2p2 "" --dtype bfloat16 --tensor-parallel-size 2 --pipeline-parallel-size 2
  start_worker 29700 "$out/tok.p2procs.worker.log" --model "$m8" "${common[@]}" --dtype bfloat16
  gen bfloat16.p2procs "CUDA_VISIBLE_DEVICES=0" --dtype bfloat16 --pipeline-parallel-size 2 \
    --distributed-port 29700 --distributed-timeout 120
  wait "$wpid"; echo "worker exit $?" >>"$out/tok.p2procs.worker.log"
  echo
  echo "Greedy tokens against T = 1 (8 prompts x 128 tokens):"
  echo
  echo "| run | prompts identical | first difference (prompt: token index) | exit |"
  echo "| --- | --- | --- | --- |"
  for f in "$out"/tok.*; do
    [[ $f == *.err || $f == *.log || $f == *.t1 ]] && continue
    name=${f##*/tok.}
    ref=$out/tok.${name%%.*}.t1
    python3 - "$ref" "$f" "$name" "$(tail -1 "$f.err")" <<'EOF'
import sys
ref, got, name, code = sys.argv[1:5]
def load(p):
    return [l.split(":", 1)[1].split() for l in open(p) if l.startswith("prompt ")]
a, b = load(ref), load(got)
same = sum(x == y for x, y in zip(a, b)) if len(a) == len(b) else 0
diffs = []
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        j = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
        diffs.append(f"{i}: {j}")
print(f"| {name} | {same}/{len(a)} | {', '.join(diffs) or '-'} | {code} |")
EOF
  done
fi

if [[ $parts == *" latency "* ]]; then
  echo
  echo "bench latency, dummy Llama-3.1-8B bf16, 128 in / 128 out (3 warm-up, 5 timed iterations):"
  echo
  echo "| batch | T | avg latency s | decode ms/token (step) | output tok/s | log |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for b in 1 64; do
    for t in 1 "${ts[@]}"; do
      log=$out/latency.b$b.t$t.log
      "$bin" bench latency --model "$m8" "${common[@]}" --dtype bfloat16 --tensor-parallel-size "$t" \
        --batch-size "$b" --input-len 128 --output-len 128 --num-iters-warmup 3 --num-iters 5 >"$log" 2>&1
      avg=$(grep -oP 'Avg latency: \K[0-9.]+' "$log")
      step=$(grep -oP 'per output token[^0-9]*\K[0-9.]+' "$log" | head -1)
      tps=$(python3 -c "print(f'{$b * 128 / $avg:.1f}')" 2>/dev/null)
      echo "| $b | $t | ${avg:-FAIL} | ${step:-} | ${tps:-} | $log |"
    done
  done
  echo
  for t in "${ts[@]}"; do
    build-device/bin/allreduce_bench --ranks "$t" --hidden 4096 --rows 1,8,64,256,1024 2>&1
    echo
  done
fi

if [[ $parts == *" 70b "* ]]; then
  echo
  echo "Dummy Llama-3.1-70B bf16:"
  echo
  for t in "${ts[@]}"; do
    log=$out/70b.t$t.throughput.log
    "$bin" bench throughput --model "$m70" "${common[@]}" --dtype bfloat16 --tensor-parallel-size "$t" \
      --dataset random --num-prompts 200 --input-len 1024 --output-len 128 \
      --json-out "$out/70b.t$t.throughput.json" >"$log" 2>&1
    echo "T = $t, bench throughput 200 x 1024/128: $(grep -E '^Throughput|^Preemptions' "$log" | tr '\n' ' ')"
    port=$((8300 + t))
    "$bin" serve --model "$m70" "${common[@]}" --dtype bfloat16 --tensor-parallel-size "$t" \
      --port "$port" --served-model-name llama70 >"$out/70b.t$t.serve.log" 2>&1 &
    spid=$!
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
    for rate in 4 inf; do
      blog=$out/70b.t$t.serve.r$rate.log
      "$bin" bench serve --port "$port" --vocab-size 128256 --dataset random --input-len 512 --output-len 256 \
        --num-prompts 200 --request-rate "$rate" --disable-progress >"$blog" 2>&1
      echo "T = $t, bench serve 512/256 at $rate req/s: $(grep -E 'Successful requests|Request throughput|Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' "$blog" | sed 's/  */ /g' | tr '\n' ';')"
    done
    kill -INT "$spid"; wait "$spid"
  done
fi

if [[ $parts == *" kill "* ]]; then
  echo
  echo "A worker process killed during bench serve (P = 2, two processes, dummy Llama-3.1-8B bf16):"
  port=8310
  start_worker 29710 "$out/kill.worker.log" --model "$m8" "${common[@]}" --dtype bfloat16
  CUDA_VISIBLE_DEVICES=0 "$bin" serve --model "$m8" "${common[@]}" --dtype bfloat16 \
    --pipeline-parallel-size 2 --distributed-port 29710 --distributed-timeout 120 --port "$port" \
    --log-level info >"$out/kill.head.log" 2>&1 &
  hpid=$!
  for _ in $(seq 1 180); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  "$bin" bench serve --port "$port" --vocab-size 128256 --dataset random --input-len 512 --output-len 1024 \
    --num-prompts 200 --request-rate 8 --disable-progress --json-out "$out/kill.bench.json" \
    >"$out/kill.bench.log" 2>&1 &
  bpid=$!
  # One request not streamed, in flight at the kill: its status and when.
  sleep 8
  (curl -s -o "$out/kill.curl.body" -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$port/v1/completions" \
     -H 'Content-Type: application/json' \
     -d '{"prompt":[1,2,3,4],"max_tokens":2000,"ignore_eos":true}' >"$out/kill.curl.txt") &
  cpid=$!
  sleep 2
  t0=$(date +%s.%N)
  kill -9 "$wpid"
  wait "$cpid"
  t1=$(date +%s.%N)
  wait "$bpid"
  t2=$(date +%s.%N)
  health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
  echo
  echo "- killed at t0; the curl request in flight ended $(python3 -c "print(f'{$t1 - $t0:.2f}')") s later: HTTP $(cut -d' ' -f1 "$out/kill.curl.txt"), body $(head -c 300 "$out/kill.curl.body")"
  echo "- bench serve ended $(python3 -c "print(f'{$t2 - $t0:.2f}')") s after the kill: $(grep -E 'Successful requests|Failed' "$out/kill.bench.log" | sed 's/  */ /g' | tr '\n' ';')"
  echo "- /health after: HTTP $health"
  echo "- head log: $(grep -m2 -i 'lost' "$out/kill.head.log")"
  kill -INT "$hpid"; wait "$hpid"; echo "- head exit $?"
fi
