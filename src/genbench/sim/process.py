"""`SimProcess`: a `genbench sim` in its own process, for tests and benchmarks.

A separate process keeps the server's timing independent of the client under test:
a client that blocks its event loop cannot delay the tokens it is measuring.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO

_LINE = re.compile(
    r"listening on (?P<url>(?P<root>http://(?P<host>\[[^\]]+\]|[^:/\s]+):(?P<port>\d+))/v1)"
)


class SimProcess:
    """Start `genbench sim --port 0 ARGS...`; wait for its startup line; stop it on exit.

    Usage: `with SimProcess("--tps", "500") as sim: httpx.get(sim.url + "/models")`.
    `url` ends in /v1; `root` is scheme://host:port, for /health, /metrics, /sim/config.
    """

    def __init__(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.args: Sequence[str] = [str(a) for a in args]
        self.env = env
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.root = ""
        self.port = 0
        self.line = ""
        self._stderr: IO[bytes] | None = None

    def spawn(self) -> SimProcess:
        """Start the process without waiting for it (see `start_all`)."""
        cmd = [sys.executable, "-m", "genbench", "sim", "--port", "0", *self.args]
        env = dict(os.environ if self.env is None else self.env)
        # stderr goes to a file, not a pipe, so a chatty server can never block on it
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        return self

    def wait_ready(self) -> SimProcess:
        """Wait for the startup line and take the URL from it."""
        try:
            self.line = self._read_line()
            m = _LINE.search(self.line)
            if m is None:
                raise RuntimeError(f"genbench sim printed an unexpected first line: {self.line!r}")
        except BaseException:
            self.kill()
            self._close_files()
            raise
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(m["host"], m["host"])
        self.port = int(m["port"])
        self.root = f"http://{host}:{self.port}"
        self.url = self.root + "/v1"
        return self

    def start(self) -> SimProcess:
        return self.spawn().wait_ready()

    def _read_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"genbench sim printed no startup line within {self.timeout:g} s"
                        + self._stderr_tail()
                    )
                if not sel.select(left):
                    continue
                data = os.read(fd, 4096)
                if not data:  # EOF: the process died before it was ready
                    rc = self.proc.wait()
                    raise RuntimeError(
                        f"genbench sim exited with code {rc} before it was ready"
                        + self._stderr_tail()
                    )
                buf += data
        return buf.split(b"\n", 1)[0].decode(errors="replace")

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far."""
        if self._stderr is None or self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _stderr_tail(self) -> str:
        text = self.stderr().strip()
        return f":\n{text[-4000:]}" if text else ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then wait (SIGKILL if it does not stop in `timeout`); the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL and wait: the server vanishes like an OOM kill; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    def _close_files(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()

    def close(self) -> None:
        """Stop the server (SIGTERM) and release its pipes."""
        try:
            self.stop()
        finally:
            self._close_files()

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_all(sims: Sequence[SimProcess]) -> None:
    """Start several servers at once: their imports overlap instead of adding up."""
    for sim in sims:
        sim.spawn()
    try:
        for sim in sims:
            sim.wait_ready()
    except BaseException:
        for sim in sims:
            sim.close()
        raise


def stop_all(sims: Sequence[SimProcess]) -> None:
    """SIGTERM every server first, then wait for each: their shutdowns overlap."""
    for sim in sims:
        if sim.proc is not None and sim.proc.poll() is None:
            sim.proc.send_signal(signal.SIGTERM)
    for sim in sims:
        sim.close()
