#!/usr/bin/env bash
# Sets up, builds and runs the main job on a fresh machine: `troupe serve`,
# the OpenAI-compatible server, on the default model — a small Qwen3-shaped
# model with random weights and the real Qwen3 tokenizer and chat template
# (examples/deploy-qwen3-dummy-cpu.yaml; nothing to download), on the CPU.
# Extra arguments are passed to `troupe serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cat <<'MSG'
troupe serve is starting on http://127.0.0.1:8000 (Ctrl-C to stop). Try:
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"qwen3-tiny","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'
MSG
exec build/troupe serve --config examples/deploy-qwen3-dummy-cpu.yaml "$@"
