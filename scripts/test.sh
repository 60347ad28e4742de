#!/usr/bin/env bash
# The test command: installs genbench with its test extras into .venv, prepares the
# vLLM CPU test server's own environment (cached), then runs the whole suite.
# Every server the tests use (the sim, llama.cpp, vLLM) is started by the tests themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[local,parquet,report,dev]'
if [ "${GENBENCH_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/vllm-test-server.sh setup
fi
exec .venv/bin/python -m pytest "$@"
