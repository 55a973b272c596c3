#!/usr/bin/env bash
# Sets up, builds and runs the main job on a fresh machine: `troupe generate`
# on the default model (the tiny Llama checkpoint in tests/data), greedy,
# on the CPU backend. (`troupe serve` replaces this once the server exists.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/troupe generate --model tests/data/models/tiny-llama \
  --prompt-ids 989,229,186,822,100,504,324 --max-tokens 24 --temperature 0 --logprobs 5 --json "$@"
