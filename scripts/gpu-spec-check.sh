#!/usr/bin/env bash
# On the GPU host: greedy outputs with speculative decoding equal those
# without, for every fixture model's golden prompts, in float32 and
# bfloat16 (batched, chunked prefill and prefix caching on, async
# scheduling on, every draft verified: TROUPE_SPEC_CONTROL=0), 64 tokens each.
# Prints one markdown row per (model, dtype); exit 1 on a difference in
# float32. bfloat16 may differ (a verify pass and a decode pass round
# differently; a near-tie can flip): the goldens' rule (scripts/gpu_golden.py,
# the same tolerance as scripts/gpu-check.sh) is then checked with
# speculation on (verify steps replaying the decode graphs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-spec-check}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
status=0
echo "| model | dtype | identical | spec stats |"
echo "| --- | --- | --- | --- |"
for m in tiny-llama tiny-llama-mha tiny-qwen2 tiny-qwen3; do
  dir=tests/data/models/$m
  python3 -c "import json,sys; [print(json.dumps({'prompt_ids': c['prompt_ids']})) for c in json.load(open('$dir/golden.json'))['cases']]" >"$out/$m.jsonl"
  for dt in float32 bfloat16; do
    args=(generate --model "$dir" --dtype "$dt" --max-tokens 64 --temperature 0 --ignore-eos --prompts-file "$out/$m.jsonl" --log-level warn)
    "$bin" "${args[@]}" >"$out/$m.$dt.off" 2>"$out/$m.$dt.off.err"
    TROUPE_SPEC_CONTROL=0 "$bin" "${args[@]}" --speculative-config "$spec" >"$out/$m.$dt.on" 2>"$out/$m.$dt.on.err"
    if [[ -s $out/$m.$dt.off ]] && cmp -s "$out/$m.$dt.off" "$out/$m.$dt.on"; then
      same=yes
    else
      same=no
      [[ $dt == float32 ]] && status=1
    fi
    echo "| $m | $dt | $same | $(grep -o 'spec_draft_tokens=.*acceptance_rate=[0-9.]*' "$out/$m.$dt.on.err") |"
  done
done
echo
extra=$(python3 -c 'import json, sys; print(json.dumps(["--speculative-config", sys.argv[1]]))' "$spec")
TROUPE_SPEC_CONTROL=0 python3 scripts/gpu_golden.py --tol-bf16 0.8 --extra "$extra" || status=1
exit $status
