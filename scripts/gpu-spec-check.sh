#!/usr/bin/env bash
# On the GPU host: greedy outputs with speculative decoding equal those
# without, for every fixture model's golden prompts, in float32 and
# bfloat16, batched, one request at a time (--max-num-seqs 1), and one at a
# time with TROUPE_SPEC_CONSISTENT_ROWS=1 ("one, consistent"), with chunked
# prefill and prefix caching on, async scheduling on, every draft verified
# (TROUPE_SPEC_CONTROL=0), 64 tokens each. Prints one markdown row per
# (model, dtype, batch); exit 1 on a difference in float32, or in bfloat16
# one at a time with consistent rows (the verify steps' products then sum
# every row as a decode's do: ops::keep_rows_consistent). bfloat16 may
# otherwise differ (a verify step's products have more rows than a
# decode's and may run another kernel, which rounds otherwise; a near-tie
# can flip): the goldens' rule
# (scripts/gpu_golden.py, the same tolerance as scripts/gpu-check.sh) is
# then checked with speculation on (verify steps replaying the decode graphs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-spec-check}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
status=0
echo "| model | dtype | batch | identical | spec stats |"
echo "| --- | --- | --- | --- | --- |"
for m in tiny-llama tiny-llama-mha tiny-qwen2 tiny-qwen3; do
  dir=tests/data/models/$m
  python3 -c "import json,sys; [print(json.dumps({'prompt_ids': c['prompt_ids']})) for c in json.load(open('$dir/golden.json'))['cases']]" >"$out/$m.jsonl"
  for dt in float32 bfloat16; do
    for batch in batched one one-consistent; do
      run=$out/$m.$dt.$batch
      args=(generate --model "$dir" --dtype "$dt" --max-tokens 64 --temperature 0 --ignore-eos --prompts-file "$out/$m.jsonl" --log-level warn)
      [[ $batch == one* ]] && args+=(--max-num-seqs 1)
      consistent=$([[ $batch == one-consistent ]] && echo 1 || echo 0)
      "$bin" "${args[@]}" >"$run.off" 2>"$run.off.err"
      TROUPE_SPEC_CONTROL=0 TROUPE_SPEC_CONSISTENT_ROWS=$consistent "$bin" "${args[@]}" --speculative-config "$spec" >"$run.on" 2>"$run.on.err"
      if [[ -s $run.off ]] && cmp -s "$run.off" "$run.on"; then
        same=yes
      else
        same=no
        [[ $dt == float32 || $batch == one-consistent ]] && status=1
      fi
      echo "| $m | $dt | $batch | $same | $(grep -o 'spec_draft_tokens=.*acceptance_rate=[0-9.]*' "$run.on.err") |"
    done
  done
done
echo
extra=$(python3 -c 'import json, sys; print(json.dumps(["--speculative-config", sys.argv[1]]))' "$spec")
TROUPE_SPEC_CONTROL=0 python3 scripts/gpu_golden.py --tol-bf16 0.8 --extra "$extra" || status=1
exit $status
