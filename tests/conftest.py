"""Shared fixtures: real servers on 127.0.0.1 and a way to run the genbench CLI as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from genbench.sim.process import SimProcess

pytest_plugins: list[str] = []
for _plugin in ("fixtures_vllm", "fixtures_routers", "fixtures_hs"):
    if Path(__file__).with_name(f"{_plugin}.py").exists():
        pytest_plugins.append(_plugin)

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that need vLLM run last: its session-scoped servers stay up (~3 GB, busy on a
    core) once started, and would slow the timing tests against the sim that follow them."""
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimProcess]]:
    """Start sims with the given flags; all are stopped at the end of the test."""
    procs: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        p = SimProcess(*args)
        p.__enter__()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.__exit__(None, None, None)


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[SimProcess]:
    """A healthy sim shared by a module's tests that don't depend on its state."""
    with SimProcess("--tps", "500", "--ttft-ms", "20", "--per-seq-ms", "0.1") as p:
        yield p


def genbench(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the genbench CLI in a subprocess, exactly as a user would."""
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "genbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )
