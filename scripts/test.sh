#!/usr/bin/env bash
# The test command: installs genbench with its test extras into .venv, runs the core tests
# (exact, in memory, seconds: a wrong formula fails here first), prepares the vLLM CPU test
# server's own environment (cached), then runs the rest of the suite with the arguments
# given. Every server the tests use (the sim, llama.cpp, vLLM) is started by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[local,parquet,report,dev]'
.venv/bin/python -m pytest -m core -x -q tests/core
if [ "${GENBENCH_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/vllm-test-server.sh setup
fi
# the core tests ran above: deselect them here (a later -m in "$@" takes precedence)
rc=0
.venv/bin/python -m pytest -m "not core" "$@" || rc=$?
# 5: nothing left to run once the core tests are deselected (e.g. `scripts/test.sh
# tests/core`); those passed above
[ "$rc" -eq 5 ] && rc=0
exit "$rc"
