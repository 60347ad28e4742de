#!/usr/bin/env bash
# The routers the tests put in front of servers: sglang-router and vllm-router (Rust load
# balancers shipped as manylinux wheels on PyPI), pinned, in their own cached venv so their
# dependencies (fastapi, aiohttp, ...) never mix with genbench's.
#
#   scripts/routers.sh setup     # create or reuse the venv (idempotent; seconds when cached)
#   scripts/routers.sh bin       # print the venv's bin directory
#
# Environment:
#   GENBENCH_ROUTER_VENV    venv for the routers  (default $REPO/.cache/router-venv)
#   GENBENCH_ROUTER_PYTHON  python that creates it (default python3)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SGLANG_ROUTER_VERSION="0.3.2"
VLLM_ROUTER_VERSION="0.1.17"
VENV="${GENBENCH_ROUTER_VENV:-$REPO/.cache/router-venv}"
BASE_PYTHON="${GENBENCH_ROUTER_PYTHON:-python3}"
STAMP="sglang-router==$SGLANG_ROUTER_VERSION vllm-router==$VLLM_ROUTER_VERSION"

log() { printf '[routers] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

setup() {
    local marker="$VENV/.genbench-routers-installed"
    if [[ -f "$marker" && "$(cat "$marker")" == "$STAMP" && -x "$VENV/bin/python" ]]; then
        log "venv ok: $VENV ($STAMP)"
        return 0
    fi
    log "installing $STAMP into $VENV"
    if [[ -e "$VENV" ]]; then
        # only ever delete something that is a virtual environment (or empty)
        if [[ -f "$VENV/pyvenv.cfg" ]] || [[ -d "$VENV" && -z "$(ls -A "$VENV")" ]]; then
            rm -rf "$VENV"
        else
            die "$VENV exists and is not a virtual environment; remove it or set GENBENCH_ROUTER_VENV"
        fi
    fi
    mkdir -p "$(dirname "$VENV")"
    "$BASE_PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --no-input --progress-bar off -q \
        "sglang-router==$SGLANG_ROUTER_VERSION" "vllm-router==$VLLM_ROUTER_VERSION"
    # fail here, not at the first test, when a wheel does not run on this machine
    "$VENV/bin/python" -c "import sglang_router.launch_router, vllm_router.launch_router" \
        || die "the router wheels do not import"
    [[ -x "$VENV/bin/vllm-router" ]] || die "no vllm-router entry point in $VENV/bin"
    echo "$STAMP" >"$marker"
    log "installed $STAMP"
}

case "${1:-}" in
    setup) setup ;;
    bin) echo "$VENV/bin" ;;
    *) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
