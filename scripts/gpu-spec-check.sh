#!/usr/bin/env bash
# On the GPU host: greedy outputs with speculative decoding equal those
# without, for every fixture model's golden prompts, with chunked prefill,
# prefix caching and async scheduling on, every draft verified
# (TROUPE_SPEC_CONTROL=0), 64 tokens each: batched and one request at a
# time (--max-num-seqs 1), and in bfloat16 the same two with
# --batch-invariant ("batched, invariant", "one, invariant": every row
# computed as any batch computes it, docs/gpu.md "Batch invariance"). Prints
# one markdown row per (model, dtype, batch). Exit 1 on a difference in
# float32, or in bfloat16 with --batch-invariant: speculation on or off,
# and batched against one at a time (the invariant runs must all print the
# same). Without it bfloat16 may differ (a verify step's products have
# more rows than a decode's and may run another kernel, which rounds
# otherwise; a near-tie can flip): the goldens' rule (scripts/gpu_golden.py,
# the same tolerance as scripts/gpu-check.sh) is then checked with
# speculation on (verify steps replaying the decode graphs).
#
# Then long contexts, where decode attention splits its keys by the batch
# (LONG_TOKENS, 700 by default: past two splits' 512 keys): two models in
# bfloat16, the golden prompts batched and one at a time, with and without
# --batch-invariant, speculation off; the invariant runs (and one with
# speculation on, batched) must print the same.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-/tmp/gpu-spec-check}
mkdir -p "$out"
source scripts/device-env.sh
bin=build-device/bin/troupe
spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
status=0
same() { [[ -s $1 ]] && cmp -s "$1" "$2"; }
echo "| model | dtype | batch | identical | spec stats |"
echo "| --- | --- | --- | --- | --- |"
for m in tiny-llama tiny-llama-mha tiny-qwen2 tiny-qwen3; do
  dir=tests/data/models/$m
  python3 -c "import json,sys; [print(json.dumps({'prompt_ids': c['prompt_ids']})) for c in json.load(open('$dir/golden.json'))['cases']]" >"$out/$m.jsonl"
  for dt in float32 bfloat16; do
    batches=(batched one)
    [[ $dt == bfloat16 ]] && batches+=(batched-invariant one-invariant)
    for batch in "${batches[@]}"; do
      run=$out/$m.$dt.$batch
      args=(generate --model "$dir" --dtype "$dt" --max-tokens 64 --temperature 0 --ignore-eos --prompts-file "$out/$m.jsonl" --log-level warn)
      [[ $batch == one* ]] && args+=(--max-num-seqs 1)
      [[ $batch == *invariant ]] && args+=(--batch-invariant)
      "$bin" "${args[@]}" >"$run.off" 2>"$run.off.err"
      TROUPE_SPEC_CONTROL=0 "$bin" "${args[@]}" --speculative-config "$spec" >"$run.on" 2>"$run.on.err"
      if same "$run.off" "$run.on"; then
        identical=yes
      else
        identical=no
        [[ $dt == float32 || $batch == *invariant ]] && status=1
      fi
      if [[ $batch == one-invariant ]]; then
        if same "$run.off" "$out/$m.$dt.batched-invariant.off"; then
          identical+=", = batched"
        else
          identical+=", != batched"
          status=1
        fi
      fi
      echo "| $m | $dt | $batch | $identical | $(grep -o 'spec_draft_tokens=.*acceptance_rate=[0-9.]*' "$run.on.err") |"
    done
  done
done
echo
long=${LONG_TOKENS:-700}
echo "Long contexts ($long tokens, bfloat16, speculation off unless said):"
echo
echo "| model | batched = one | batched = one, invariant | invariant batched = speculation on |"
echo "| --- | --- | --- | --- |"
for m in tiny-llama tiny-qwen3; do
  dir=tests/data/models/$m
  run=$out/$m.long
  args=(generate --model "$dir" --dtype bfloat16 --max-tokens "$long" --temperature 0 --ignore-eos --prompts-file "$out/$m.jsonl" --log-level warn)
  "$bin" "${args[@]}" >"$run.batched" 2>"$run.batched.err"
  "$bin" "${args[@]}" --max-num-seqs 1 >"$run.one" 2>"$run.one.err"
  "$bin" "${args[@]}" --batch-invariant >"$run.inv.batched" 2>"$run.inv.batched.err"
  "$bin" "${args[@]}" --batch-invariant --max-num-seqs 1 >"$run.inv.one" 2>"$run.inv.one.err"
  TROUPE_SPEC_CONTROL=0 "$bin" "${args[@]}" --batch-invariant --speculative-config "$spec" >"$run.inv.spec" 2>"$run.inv.spec.err"
  plain=$(same "$run.batched" "$run.one" && echo yes || echo no)
  inv=$(same "$run.inv.batched" "$run.inv.one" && echo yes || echo no)
  spec_same=$(same "$run.inv.batched" "$run.inv.spec" && echo yes || echo no)
  [[ $inv == yes && $spec_same == yes ]] || status=1
  echo "| $m | $plain | $inv | $spec_same ($(grep -o 'spec_accepted_tokens=[0-9]*' "$run.inv.spec.err")) |"
done
echo
extra=$(python3 -c 'import json, sys; print(json.dumps(["--speculative-config", sys.argv[1]]))' "$spec")
TROUPE_SPEC_CONTROL=0 python3 scripts/gpu_golden.py --tol-bf16 0.8 --extra "$extra" || status=1
exit $status
