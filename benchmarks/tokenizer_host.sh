#!/usr/bin/env bash
# On the GPU host (or any machine with Python `tokenizers`): troupe's
# tokenizer_bench and Hugging Face tokenizers on the same CPU, same corpus.
# Expects build-device/ from `scripts/device-bundle.sh build/model/tokenizer/tokenizer_bench`.
#   benchmarks/tokenizer_host.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/tokenizer-bench}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build-device/lib
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  for t in qwen3 llama3_1 llama2 deepseek_v3; do
    echo "troupe $t: $(build-device/bin/tokenizer_bench tests/data/tokenizers/$t tests/data/tokenizers/corpus/bench.txt 5)"
  done
} | tee "$out/troupe_bench.txt"
python3 scripts/tokenizer_reference.py "$out/hf" | tee "$out/hf_bench.txt"
cp "$out/hf/hf_bench.json" "$out/"
