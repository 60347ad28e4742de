"""Pytest fixtures for the real routers: sglang-router and vllm-router in front of servers.

``router_factory(kind, worker_urls)`` starts one router on 127.0.0.1 (its HTTP port and its
Prometheus listener each on a free port: both routers open the latter on a fixed default
port otherwise), waits until it routes, and stops it when the test ends.

The wheels live in their own venv, made once by ``scripts/routers.sh setup`` (seconds when
cached). ``GENBENCH_SKIP_ROUTERS=1`` skips the tests that need a router; without it, a failed
setup or start FAILS those tests: it never silently skips.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "routers.sh"
KINDS = ("sglang-router", "vllm-router")
START_TIMEOUT_S = 60.0
SETUP_TIMEOUT_S = 900.0


@dataclass
class Router:
    """A running router. ``url`` ends in /v1; ``metrics`` is its own Prometheus listener."""

    kind: str
    url: str
    root: str
    metrics: str
    workers: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def _skip_requested() -> bool:
    return os.environ.get("GENBENCH_SKIP_ROUTERS", "").strip().lower() in ("1", "true", "yes")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_bin: dict[str, Path | str] = {}


def router_bin() -> Path:
    """The venv's bin directory; installs the routers the first time in a session."""
    if "ok" in _bin:
        return Path(_bin["ok"])
    if "error" in _bin:
        pytest.fail(str(_bin["error"]), pytrace=False)
    try:
        p = subprocess.run(
            ["bash", str(SCRIPT), "setup"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=SETUP_TIMEOUT_S,
            check=False,
        )
        rc: int | str = p.returncode
        tail = (p.stderr or "")[-3000:]
    except subprocess.TimeoutExpired:
        rc, tail = f"timeout after {SETUP_TIMEOUT_S:.0f} s", ""
    if rc != 0:
        _bin["error"] = (
            f"router setup failed ({rc}); set GENBENCH_SKIP_ROUTERS=1 to skip the router tests "
            f"deliberately:\n{tail}"
        )
        pytest.fail(str(_bin["error"]), pytrace=False)
    out = subprocess.run(["bash", str(SCRIPT), "bin"], capture_output=True, text=True, check=True)
    _bin["ok"] = out.stdout.strip()
    return Path(_bin["ok"])


def command(kind: str, bindir: Path, port: int, prom: int, workers: Sequence[str]) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port)]
    common += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom)]
    common += ["--worker-urls", *workers]
    if kind == "sglang-router":
        return [str(bindir / "python"), "-m", "sglang_router.launch_router", *common]
    if kind == "vllm-router":
        return [str(bindir / "vllm-router"), *common]
    raise ValueError(kind)


def _routes(root: str) -> bool:
    """The router is up and has its workers: /readiness says ready and /v1/models answers."""
    try:
        ready = httpx.get(root + "/readiness", timeout=2)
        models = httpx.get(root + "/v1/models", timeout=2)
    except httpx.HTTPError:
        return False
    return ready.status_code == 200 and models.status_code == 200


def start_router(
    kind: str, workers: Sequence[str], log_dir: Path, *extra: str, timeout: float = START_TIMEOUT_S
) -> Router:
    """Start a router in front of `workers` (server roots, no /v1) and wait until it routes."""
    bindir = router_bin()
    port, prom = _free_port(), _free_port()
    log = log_dir / f"{kind}-{port}.log"
    cmd = command(kind, bindir, port, prom, workers) + list(extra)
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    r = Router(kind, root + "/v1", root, f"http://127.0.0.1:{prom}", tuple(workers), proc, log)
    deadline = time.monotonic() + timeout
    while not _routes(root):
        if proc.poll() is not None or time.monotonic() > deadline:
            r.stop()
            why = f"exited with {proc.returncode}" if proc.returncode is not None else "timed out"
            pytest.fail(f"{kind} did not start ({why}); log:\n{r.log_tail()}", pytrace=False)
        time.sleep(0.1)
    return r


@pytest.fixture
def router_factory(tmp_path: Path) -> Iterator[Callable[..., Router]]:
    """Start routers (`kind`, worker roots, extra flags); all are stopped at the end."""
    if _skip_requested():
        pytest.skip("GENBENCH_SKIP_ROUTERS=1: router tests disabled")
    routers: list[Router] = []

    def start(kind: str, workers: Sequence[str], *extra: str) -> Router:
        r = start_router(kind, workers, tmp_path, *extra)
        routers.append(r)
        return r

    yield start
    for r in routers:
        r.stop()
