"""Pytest fixtures for the real vLLM (CPU) test server.

Register with ``pytest_plugins = ["tests.fixtures_vllm"]`` (or the module's import path).

Fixtures (session scope), each yielding a :class:`VLLMServer`:

* ``vllm_server``: plain server, qwen3 reasoning parser on, and a tool parser (hermes) with
  auto tool choice: vLLM 0.32 serves a ``tool_choice`` that names a function only with a
  parser set, and a request without tools never meets the parser.
* ``vllm_spec_server``: the same plus n-gram speculative decoding (4 draft tokens).
* ``vllm_noparse_server``: no reasoning parser: the thinking arrives inline in ``content``
  (the chat template opened ``<think>``; the model's ``</think>`` ends it); no tool parser.
* ``vllm_tools_server``: the plain server (one vLLM start fewer: ~30 s of the suite), or
  ``GENBENCH_VLLM_TOOLS_URL`` where set.

They run ``scripts/vllm-test-server.sh setup`` once (installs vLLM into its own venv and builds
the tiny model; minutes the first time, seconds after), start the server on a free loopback
port and stop it when the session ends.

Environment:

* ``GENBENCH_VLLM_URL`` / ``GENBENCH_VLLM_SPEC_URL`` / ``GENBENCH_VLLM_NOPARSE_URL``: use an
  already running server instead (base URL, with or without ``/v1``); nothing is installed
  or started then.
* ``GENBENCH_SKIP_VLLM=1``: skip tests that need the server. Without it, a failed setup or
  start FAILS (errors) those tests: it never silently skips.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm-test-server.sh"
RUN_DIR = Path(os.environ.get("GENBENCH_VLLM_RUN_DIR", REPO / ".cache"))
SERVED_MODEL_NAME = "tiny-llama"
SETUP_TIMEOUT_S = float(os.environ.get("GENBENCH_VLLM_SETUP_TIMEOUT", "1800"))
START_TIMEOUT_S = float(os.environ.get("GENBENCH_VLLM_START_TIMEOUT", "300"))


@dataclass(frozen=True)
class VLLMServer:
    """A running vLLM server. ``url`` ends in ``/v1``; ``root`` has /health and /metrics."""

    url: str
    root: str
    model: str
    spec: bool
    name: str | None = None  # script name when this session started it
    log_path: Path | None = None

    def metrics_text(self) -> str:
        r = httpx.get(f"{self.root}/metrics", timeout=10)
        r.raise_for_status()
        return r.text


def _skip_requested() -> bool:
    return os.environ.get("GENBENCH_SKIP_VLLM", "").strip().lower() in ("1", "true", "yes")


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _from_env(url: str, spec: bool) -> VLLMServer:
    root = url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    try:
        r = httpx.get(f"{root}/v1/models", timeout=10)
        r.raise_for_status()
        model = r.json()["data"][0]["id"]
    except Exception as e:  # noqa: BLE001 - report any failure as a test failure
        pytest.fail(f"vLLM server at {url} (from the environment) is not usable: {e!r}")
    return VLLMServer(url=f"{root}/v1", root=root, model=model, spec=spec)


_setup_state: dict[str, object] = {}


def _setup_once() -> None:
    if "ok" in _setup_state:
        return
    if "error" in _setup_state:
        pytest.fail(str(_setup_state["error"]), pytrace=False)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    log = RUN_DIR / "vllm-setup.log"
    t0 = time.monotonic()
    try:
        with log.open("w") as f:
            proc = subprocess.run(
                ["bash", str(SCRIPT), "setup"],
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=SETUP_TIMEOUT_S,
                check=False,
            )
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        rc = f"timeout after {SETUP_TIMEOUT_S:.0f} s"
    if rc != 0:
        msg = (
            f"vLLM test server setup failed ({rc}); set GENBENCH_SKIP_VLLM=1 to skip the vllm "
            f"tests deliberately. Log {log}:\n{_tail(log)}"
        )
        _setup_state["error"] = msg
        pytest.fail(msg, pytrace=False)
    _setup_state["ok"] = time.monotonic() - t0


def _start(kind: str, spec: bool, parser: bool = True, tools: str = "") -> VLLMServer:
    _setup_once()
    name = f"pytest-{kind}-{os.getpid()}"
    port = _free_port()
    cmd = ["bash", str(SCRIPT), "start", name, str(port)] + (["--spec"] if spec else [])
    cmd += [] if parser else ["--no-reasoning-parser"]
    cmd += ["--tool-call-parser", tools] if tools else []
    log_path = RUN_DIR / f"vllm-{name}.log"
    try:
        # The server stays in this process's session (no setsid), which keeps streaming
        # smooth under the kernel's autogroup scheduling; see docs/vllm-test-server.md.
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=START_TIMEOUT_S + 60,
            env={**os.environ, "GENBENCH_VLLM_START_TIMEOUT": str(int(START_TIMEOUT_S))},
            check=False,
        )
    except subprocess.TimeoutExpired:
        _stop(name)
        pytest.fail(f"vLLM server {name} did not start in time. Log:\n{_tail(log_path)}")
    if proc.returncode != 0:
        pytest.fail(
            f"vLLM server {name} failed to start (rc {proc.returncode}):\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    root = proc.stdout.strip().splitlines()[-1]
    return VLLMServer(
        url=f"{root}/v1",
        root=root,
        model=SERVED_MODEL_NAME,
        spec=spec,
        name=name,
        log_path=log_path,
    )


def _stop(name: str) -> None:
    subprocess.run(
        ["bash", str(SCRIPT), "stop", name],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def _server(
    kind: str, env_var: str, spec: bool, parser: bool = True, tools: str = ""
) -> Iterator[VLLMServer]:
    if _skip_requested():
        pytest.skip("GENBENCH_SKIP_VLLM=1: vLLM test server disabled")
    url = os.environ.get(env_var, "").strip()
    if url:
        yield _from_env(url, spec)
        return
    server = _start(kind, spec, parser, tools)
    try:
        yield server
    finally:
        assert server.name is not None
        _stop(server.name)
        if server.log_path and not os.environ.get("GENBENCH_VLLM_KEEP_LOGS"):
            server.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VLLMServer]:
    """Plain vLLM server (reasoning parser qwen3; tool parser hermes, auto tool choice)."""
    yield from _server("plain", "GENBENCH_VLLM_URL", spec=False, tools="hermes")


@pytest.fixture(scope="session")
def vllm_spec_server() -> Iterator[VLLMServer]:
    """vLLM server with n-gram speculative decoding (and the reasoning parser)."""
    yield from _server("spec", "GENBENCH_VLLM_SPEC_URL", spec=True)


@pytest.fixture(scope="session")
def vllm_noparse_server() -> Iterator[VLLMServer]:
    """vLLM server without a reasoning parser: thinking arrives inline in content."""
    yield from _server("noparse", "GENBENCH_VLLM_NOPARSE_URL", spec=False, parser=False)


@pytest.fixture(scope="session")
def vllm_tools_server(request: pytest.FixtureRequest) -> Iterator[VLLMServer]:
    """The plain server: its tool parser (hermes) and auto tool choice, the reasoning parser on."""
    url = os.environ.get("GENBENCH_VLLM_TOOLS_URL", "").strip()
    if url and not _skip_requested():
        yield _from_env(url, spec=False)
        return
    yield request.getfixturevalue("vllm_server")
