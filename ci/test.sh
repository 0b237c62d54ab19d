#!/usr/bin/env bash
# The whole test suite, from a fresh machine or a warm one: installs what is missing
# (ci/setup.sh), then lints, the Rust tests, the Python tests and the small benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
CACHE=${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}
VENV=${HYBRIDLLM_VENV:-$CACHE/venv}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/cargo-target}
export PATH=$VENV/bin:$PATH

echo "== lint"
ruff check python tests bench
lint-imports --no-cache --no-logo
python ci/count_fallback_lines.py | tail -n 1  # printed: the Python fallback's own lines
cargo fmt --all --check
cargo clippy --release --all-targets -- -D warnings
python ci/check_rust_modules.py  # no module cycle in the Rust frontend
python ci/check_rust_modules.py crates/hybridllm-api  # nor in the API core

echo "== rust tests"
cargo test --release

echo "== python tests"
# Two parts. The folders whose tests mostly wait (on servers starting and stopping, sockets,
# timeouts) run on two pytest-xdist workers, each taking whole files in order (so a module's
# server starts once); the folders that compute (in-process engines, the conformance
# servers) run alone: two torch processes computing at once on 2 cores slowed each other
# several-fold (docs/testing.md).
# HYBRIDLLM_TEST_WORKERS=0 runs the first part serially too.
WAITING=(tests/reliability tests/scaleout tests/e2e tests/ecosystem)
pytest_part() {  # a part that a -k filter leaves empty (exit 5) is no failure
  python -m pytest -q -rs "$@" || { rc=$?; [ "$rc" -eq 5 ] || exit "$rc"; }
}
pytest_part -n "${HYBRIDLLM_TEST_WORKERS:-2}" --dist loadfile "${WAITING[@]}" "$@"
pytest_part "${WAITING[@]/#/--ignore=}" tests "$@"

if [ -x ci/bench_smoke.sh ]; then
  echo "== benchmark smoke run (figures are printed, timings never fail the build)"
  bash ci/bench_smoke.sh
fi
