#!/usr/bin/env bash
# Configures and builds troupe into build/ (Release). The CUDA backend is
# compiled too when nvcc is found (TROUPE_CUDA=AUTO); pass -DTROUPE_CUDA=OFF
# or any other CMake option as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
