#!/usr/bin/env bash
# The test command, and the whole set-up a fresh machine needs: a browser for the report's
# screenshot test (Debian's chromium), Debian's prometheus for the metrics test, Debian's
# slurm-wlm and munge for the Slurm array test, genbench with its test extras in .venv, the core tests
# (exact, in memory, seconds: a wrong formula fails here first), the vLLM CPU test server's own
# environment (cached) and the trainers' data pipelines on it (SpecForge, speculators; cached),
# the routers' (sglang-router, vllm-router; cached), then the rest of the suite with the
# arguments given.
# Every server the tests use (the sim, llama.cpp, vLLM, the routers) is started by the tests.
# As root it installs chromium itself; a non-root user runs `sudo apt-get install chromium` once.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have_browser() {
    local b
    for b in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$b" >/dev/null 2>&1 && return 0
    done
    return 1
}

if ! have_browser && [ "${GENBENCH_SKIP_BROWSER:-0}" != "1" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "[test.sh] installing chromium (the report test takes a screenshot with it)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "[test.sh] error: no chromium on PATH: run 'sudo apt-get install chromium' once" \
            "(or set GENBENCH_SKIP_BROWSER=1 to skip the report's browser test)" >&2
        exit 1
    fi
fi

# Debian's prometheus: tests/test_watch.py scrapes a running job with it. The test starts its
# own binary (a generated config, a temp storage dir, a free loopback port); whether the
# package's service started or not does not matter (no systemd in a container: it does not).
if ! command -v prometheus >/dev/null 2>&1 && [ "${GENBENCH_SKIP_PROMETHEUS:-0}" != "1" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "[test.sh] installing prometheus (the metrics test scrapes a job with it)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
    else
        echo "[test.sh] error: no prometheus on PATH: run 'sudo apt-get install prometheus' once" \
            "(or set GENBENCH_SKIP_PROMETHEUS=1 to skip the metrics test)" >&2
        exit 1
    fi
fi

# Debian's slurm-wlm and munge: tests/test_slurm.py starts its own munged, slurmctld and slurmd
# (a one-node cluster in a temp dir, on free ports) and runs the plan's sbatch array on it.
# Without root it skips, saying why.
if ! command -v slurmctld >/dev/null 2>&1 && [ "${GENBENCH_SKIP_SLURM:-0}" != "1" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "[test.sh] installing slurm-wlm and munge (the Slurm array test runs on them)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
    else
        echo "[test.sh] error: no slurmctld on PATH: run 'sudo apt-get install slurm-wlm munge'" \
            "once (or set GENBENCH_SKIP_SLURM=1 to skip the Slurm array test)" >&2
        exit 1
    fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[local,parquet,report,dev]'
.venv/bin/python -m pytest -m core -x -q tests/core
if [ "${GENBENCH_SKIP_VLLM:-0}" != "1" ]; then
    bash scripts/vllm-test-server.sh setup
    # SpecForge's and speculators' data pipelines on the vLLM venv's torch (cached; they read
    # genbench export's files in tests/test_export_vllm.py)
    bash scripts/trainers.sh setup
fi
# sglang-router and vllm-router, pinned, in their own cached venv (tests/fixtures_routers.py)
if [ "${GENBENCH_SKIP_ROUTERS:-0}" != "1" ]; then
    bash scripts/routers.sh setup
fi
# the core tests ran above: deselect them here (a later -m in "$@" takes precedence)
rc=0
.venv/bin/python -m pytest -m "not core" "$@" || rc=$?
# 5: nothing left to run once the core tests are deselected (e.g. `scripts/test.sh
# tests/core`); those passed above
[ "$rc" -eq 5 ] && rc=0
exit "$rc"
