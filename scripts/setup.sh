#!/usr/bin/env bash
# Installs everything troupe needs to build and test on Debian 12, with apt,
# and the openai npm client that tests/net/openai_client drives the server
# with (npm ci, from its package-lock.json). Idempotent: packages already
# present are left alone. Needs root (or sudo) for apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libboost-dev libsimdjson-dev libspdlog-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  libpcre2-dev libutf8proc-dev
  # benchmarks/bench_matrix.sh (and its CTest) polls the servers' /health.
  curl
  # The fuzz target (tests/fuzz): clang++ and its libFuzzer/sanitizer runtimes
  # (only recommended by clang, and recommends are not installed here).
  clang libclang-rt-14-dev
  # tests/grammar/structured_outputs_test.py validates constrained outputs
  # with an independent JSON Schema validator.
  python3 python3-jsonschema
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js (>= 18) and npm for tests/net/openai_client, from apt only when no
# node is on PATH: a node installed some other way is kept.
if ! command -v node >/dev/null 2>&1; then
  for p in nodejs npm; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
else
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The openai client's node_modules, when missing or older than the lock file
# (npm writes node_modules/.package-lock.json on every install).
client_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/net/openai_client"
if [[ ! -f $client_dir/node_modules/.package-lock.json ||
      $client_dir/package-lock.json -nt $client_dir/node_modules/.package-lock.json ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: npm not found (needed for tests/net/openai_client)" >&2
    exit 1
  fi
  echo "setup: npm ci in tests/net/openai_client"
  npm ci --prefix "$client_dir" --no-audit --no-fund --loglevel=error
fi
