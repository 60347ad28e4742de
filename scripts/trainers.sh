#!/usr/bin/env bash
# The drafter trainers' own data pipelines, pinned, for the tests that feed them genbench's
# exports: SpecForge's (PyPI `specforge`) and vllm-project/speculators' (PyPI `speculators`)
# loaders read what `genbench export` wrote. Only their data modules are used, on the CPU
# torch + transformers of the vLLM test venv, so nothing heavy is installed twice: a small
# venv of its own whose site-packages reach the vLLM venv's through a .pth file, and into it,
# with --no-deps, the two wheels and the few packages their data paths import that the vLLM
# venv lacks (Hugging Face `datasets` and its pyarrow, pandas, xxhash; speculators' loguru and
# hs-connectors). The vLLM venv itself is never written to.
#
#   scripts/trainers.sh setup     # create or reuse the venv (idempotent; seconds when cached)
#   scripts/trainers.sh python    # print the venv's python
#
# Environment:
#   GENBENCH_TRAINERS_VENV  venv for the trainers (default $REPO/.cache/trainers-venv)
#   GENBENCH_VLLM_VENV      the vLLM test venv it builds on (default $REPO/.cache/vllm-venv)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GENBENCH_TRAINERS_VENV:-$REPO/.cache/trainers-venv}"
VLLM_VENV="${GENBENCH_VLLM_VENV:-$REPO/.cache/vllm-venv}"
# specforge.data and speculators.data_generation import torch, transformers, pydantic, tqdm
# (the vLLM venv has them) and datasets, whose own requirements the vLLM venv lacks follow.
# speculators 0.9.0 declares datasets<=5.1.0, which wants an older fsspec than the vLLM venv's;
# its data path runs on 5.2.0 (the test reads an export with it).
PACKAGES=(
    "specforge==0.2.0"
    "speculators==0.9.0"
    "loguru==0.7.3"
    "hs-connectors==0.9.0"
    "datasets==5.2.0"
    "multiprocess==0.70.19"
    "xxhash==4.1.0"
    "pandas==3.1.1"
    "pyarrow==26.0.1"
    "python-dateutil==4.0.0"
    "tzdata==2025.2"
)
RECIPE=1
STAMP="${PACKAGES[*]} recipe=$RECIPE on $VLLM_VENV"

log() { printf '[trainers] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

check_imports() {
    "$VENV/bin/python" - <<'EOF'
import specforge.data.prompt_builder, specforge.data.preprocessing, specforge.data.loss_mask
import specforge.data.template, datasets, torch, transformers
import speculators.data_generation.preprocessing
EOF
}

install() {
    local site
    log "creating $VENV on $VLLM_VENV"
    "$VLLM_VENV/bin/python" -m venv "$VENV"
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # after this venv's own site-packages: its pinned packages win, the vLLM venv gives the rest
    "$VLLM_VENV/bin/python" -c '
import sys, sysconfig
print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])
' >"$site/genbench-vllm-venv.pth"
    "$VENV/bin/python" -m pip install --no-input --progress-bar off -q --no-deps "${PACKAGES[@]}"
}

setup() {
    local marker="$VENV/.genbench-trainers-installed"
    [[ -x "$VLLM_VENV/bin/python" ]] \
        || die "no vLLM test venv at $VLLM_VENV: run scripts/vllm-test-server.sh setup first"
    # its real path: the .pth and the stamp must not depend on a symlink to it
    VLLM_VENV="$(cd "$VLLM_VENV" && pwd -P)"
    STAMP="${PACKAGES[*]} recipe=$RECIPE on $VLLM_VENV"
    mkdir -p "$(dirname "$VENV")"
    exec 9>"$(dirname "$VENV")/.trainers-setup.lock"
    flock 9
    if [[ -f "$marker" && "$(cat "$marker")" == "$STAMP" && -x "$VENV/bin/python" ]]; then
        log "venv ok: $VENV"
        return 0
    fi
    if [[ -e "$VENV" ]]; then
        # only ever delete something that is a virtual environment (or empty)
        if [[ -f "$VENV/pyvenv.cfg" ]] || [[ -d "$VENV" && -z "$(ls -A "$VENV")" ]]; then
            rm -rf "$VENV"
        else
            die "$VENV exists and is not a virtual environment; remove it or set GENBENCH_TRAINERS_VENV"
        fi
    fi
    install
    # fail here, not at the first test, when the data modules do not import on this machine
    check_imports || die "the trainers' data modules do not import in $VENV"
    echo "$STAMP" >"$marker"
    log "installed ${PACKAGES[*]}"
}

case "${1:-}" in
    setup) setup ;;
    python) echo "$VENV/bin/python" ;;
    *) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
