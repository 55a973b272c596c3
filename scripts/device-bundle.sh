#!/usr/bin/env bash
# Collects what the GPU host needs to run troupe's binaries built here:
# build-device/bin/<binaries> and build-device/lib/<the non-CUDA, non-glibc
# shared libraries they load> (CAF, yaml-cpp, simdjson, spdlog, fmt,
# OpenBLAS, PCRE2, utf8proc, ...). The GPU host has the CUDA libraries; it
# has none of these. Run binaries there with LD_LIBRARY_PATH=build-device/lib.
#
#   scripts/device-bundle.sh [BINARY...]   (default: build/troupe, the benches and
#                                           the CUDA tests)
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-device
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=("$@")
if ((${#bins[@]} == 0)); then
  bins=(build/troupe)
  for b in build/model/tokenizer/tokenizer_bench build/tests/kernels/cuda_kernels_test build/tests/kernels/cuda_gemv_test build/tests/kernels/cuda_gemv_lora_test build/tests/kernels/cuda_lora_test build/tests/kernels/cuda_lora_products_test build/tests/kernels/cuda_moe_test build/tests/kernels/cuda_qgemm_test build/tests/kernels/cuda_fp8_test build/tests/kernels/cuda_fp8_kv_test \
           build/tests/kernels/cuda_sampling_test build/tests/kernels/cuda_attention_test build/tests/parallel/nccl_communicator_test build/benchmarks/attention_bench build/benchmarks/gemm_bench build/benchmarks/allreduce_bench; do
    [[ -x $b ]] && bins+=("$b")
  done
fi
for b in "${bins[@]}"; do
  cp "$b" "$out/bin/"
  # Every resolved dependency except glibc's own and the CUDA driver/toolkit.
  ldd "$b" | awk '/=> \// { print $3 }' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda*|libcudart*|libcublas*|libnccl*) ;;
      *) cp -L -n "$lib" "$out/lib/" ;;
    esac
  done
done
# Which source built them (read by benchmarks/bench_matrix.sh there: the
# GPU host's copy of the checkout carries no history).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!build-device.tar.xz' || echo +dirty)" >"$out/COMMIT"
# The checkout travels to the GPU host too (64 MiB in all): ship the bundle
# compressed (OpenBLAS alone is 35 MB, 6 MB as xz). Carry build-device.tar.xz.
# The tracked files are about 50 MiB, 28 of them the tokenizer fixtures
# (tests/data/tokenizers), which no GPU script reads: with troupe and more
# than one CUDA test binary (about 10 MB each as xz), move that folder aside
# for the call and back after it.
tar -cJf build-device.tar.xz "$out"
du -sh "$out" build-device.tar.xz
ls "$out/lib"
