#!/usr/bin/env bash
# Sets up (apt), builds and runs the whole test suite under CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" --timeout 900
