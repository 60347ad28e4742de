"""The default local target: a real llama.cpp server on a free loopback port.

`genbench run` without `--url` needs something to measure that every machine
has. This starts llama.cpp's own C++ server (continuous batching, OpenAI
endpoints, Prometheus `/metrics`) through the `xllamacpp` binding, serving the
random-weight model from `genbench.local.tinymodel`.

The server runs in a child process (`python -m genbench.local.llamacpp`), not
in genbench's own process, because:

* the benchmark client and the server share the machine's cores; in one
  process they would also share one GIL and one log stream, and a native
  crash in llama.cpp would take the measurement down with it;
* stopping is certain: the child is killed, and it also exits by itself when
  genbench dies (it watches its stdin, which only the parent holds open);
* its CPU use is bounded: it decodes on half the cores (`default_threads`)
  and gets `OMP_WAIT_POLICY=PASSIVE`. llama.cpp's CPU backend uses OpenMP,
  whose threads spin at each barrier; when anything else wants the same
  cores (the benchmark client, for one) a spinning barrier waits for a
  descheduled thread, and throughput fell tenfold or more in measurement
  (see docs/local-target.md).

The child prints one line, `READY <url>`, once the model is loaded and the
port is bound; the parent then also waits for `/health` to answer 200.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from genbench.errors import GenbenchError

READY = "READY"
MODEL_NAME = "genbench-tiny"

DESCRIPTION = (
    "local demo target: llama.cpp (via xllamacpp) on this machine, serving genbench-tiny, "
    "a small random-weight model genbench built itself. It exercises a real server "
    "(continuous batching, streaming, usage, /metrics) but its text is noise and its "
    "speed says nothing about real models; pass --url to measure your own server."
)


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads() -> int:
    """Half the cores, at least one: the other half is the benchmark client's.

    Measured on 2 cores (docs/local-target.md): one thread decodes a single
    stream twice as fast as two (no OpenMP barrier per operation) and 64
    streams as fast, on half the CPU; two spinning threads collapse as soon as
    anything else runs.
    """
    return max(1, cpu_count() // 2)


class LocalLlamaServer:
    """llama.cpp serving the generated model on 127.0.0.1, in a child process.

    Slots: `n_parallel` sequences decode together (continuous batching); a
    request beyond that waits in llama.cpp's queue. Each slot owns
    `ctx_per_slot` tokens of KV cache (prompt plus output; the default 8192
    fits a 4096-token reply after a prompt of up to ~4000 tokens), so memory
    is n_parallel * ctx_per_slot * 2 KiB: 1 GiB at the defaults. A request
    that does not fit its slot is refused with HTTP 400.

    Thinking: with `thinking=False` (default) replies are plain; a request
    can still ask for a thought with `chat_template_kwargs: {"enable_thinking":
    true}`, and `thinking=True` makes that the default. The thought comes back
    in `reasoning_content` (llama.cpp's deepseek reasoning format).
    """

    description = DESCRIPTION

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        kind: str = "tiny",
        n_parallel: int = 64,
        ctx_per_slot: int = 8192,
        threads: int | None = None,
        thinking: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout: float = 60.0,
        log_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.model = Path(model) if model is not None else None
        self.kind = kind
        self.n_parallel = n_parallel
        self.ctx_per_slot = ctx_per_slot
        self.threads = threads or default_threads()
        self.thinking = thinking
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path is not None else None
        self.cache_dir = cache_dir
        self.model_name = MODEL_NAME
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | Any | None = None
        self._root: str | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def root(self) -> str:
        """http://127.0.0.1:PORT, for /health, /metrics, /slots."""
        if self._root is None:
            raise GenbenchError("the local llama.cpp server is not running")
        return self._root

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: http://127.0.0.1:PORT/v1."""
        return self.root + "/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LocalLlamaServer:
        """Build the model if needed, start the child, wait until /health is 200."""
        if self.running:
            return self
        try:
            import xllamacpp  # noqa: F401
        except ImportError:
            raise GenbenchError(
                "the local target needs llama.cpp's Python binding: pip install 'genbench[local]'"
                " (or pass --url to measure a server you run)"
            ) from None
        if self.model is None:
            from genbench.local.tinymodel import ensure_model

            self.model = ensure_model(self.kind, self.cache_dir)
        cmd = [
            sys.executable,
            "-m",
            "genbench.local.llamacpp",
            "--model",
            str(self.model),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--parallel",
            str(self.n_parallel),
            "--ctx-per-slot",
            str(self.ctx_per_slot),
            "--threads",
            str(self.threads),
        ]
        if self.thinking:
            cmd.append("--thinking")
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # llama.cpp logs a line per request: to the caller's file, or to an
        # anonymous temporary one that only serves to explain a failed start
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the child
        else:
            self._log = tempfile.NamedTemporaryFile(prefix="genbench-llamacpp-", suffix=".log")  # noqa: SIM115
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            # own process group: a Ctrl-C in the terminal is genbench's to handle. Not a new
            # session: with autogroup scheduling a server in another session streams to the
            # client in bursts (docs/vllm-test-server.md)
            process_group=0,
        )
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._root = self._read_ready(deadline)
            self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 5 s). Safe to call twice."""
        proc, self._proc = self._proc, None
        self._root = None
        if proc is not None:
            if proc.stdin:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stdout:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalLlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    # ------------------------------------------------------------------ helpers

    def _fail(self, why: str) -> GenbenchError:
        reason = self._log_reason()
        where = f" (log: {self.log_path})" if self.log_path else ""
        return GenbenchError(f"the local llama.cpp server {why}{reason}{where}")

    def _log_reason(self) -> str:
        """The last error line llama.cpp logged, as ': ...', or ''."""
        if self._log is None:
            return ""
        with contextlib.suppress(OSError):
            self._log.flush()
            with open(self._log.name, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))
                lines = f.read().decode("utf-8", "replace").splitlines()
            # llama.cpp's error lines look like '0.00.009.698 E srv    load_model: why'
            errors = [ln.split(": ", 1)[-1].strip() for ln in lines if " E " in ln]
            errors = [e for e in errors if not e.startswith("exiting due to")] or errors
            if errors:
                return ": " + errors[-1]
            if lines:
                return ": " + lines[-1].strip()
        return ""

    def _read_ready(self, deadline: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        box: list[str] = []
        stdout = self._proc.stdout

        def reader() -> None:
            for line in stdout:
                if line.startswith(READY):
                    box.append(line.split()[1].rstrip("/"))
                    return

        t = threading.Thread(target=reader, name="llamacpp-ready", daemon=True)
        t.start()
        t.join(max(0.0, deadline - time.monotonic()))
        if box:
            return box[0]
        if not t.is_alive():  # stdout closed before READY: the child is on its way out
            try:
                code: int | None = self._proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            raise self._fail(f"exited with code {code} while starting")
        raise self._fail(f"did not start within {self.startup_timeout:.0f} s")

    def _wait_healthy(self, deadline: float) -> None:
        url = self.root + "/health"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self._proc is None or self._proc.poll() is not None:
                raise self._fail("exited while loading")
            if time.monotonic() > deadline:
                raise self._fail(f"/health was not 200 within {self.startup_timeout:.0f} s")
            time.sleep(0.05)


# ---------------------------------------------------------------------- the child


def _serve(args: argparse.Namespace) -> None:
    """Run llama.cpp's server in this process until stdin closes or a signal arrives."""
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.model
    p.model_alias = {MODEL_NAME}
    p.hostnames = [args.host]
    p.port = args.port
    p.n_parallel = args.parallel
    # one KV stream per slot (kv_unified off): each sequence attends only to
    # its own cells, and n_ctx is split evenly, ctx_per_slot each
    p.kv_unified = False
    p.n_ctx = args.parallel * args.ctx_per_slot
    p.cont_batching = True
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.use_jinja = True
    p.reasoning_format = xlc.common_reasoning_format.COMMON_REASONING_FORMAT_DEEPSEEK
    p.enable_reasoning = 1 if args.thinking else 0
    p.ui = False
    try:
        server = xlc.Server(p)
    except RuntimeError as e:  # llama.cpp has logged why, just above
        print(f"genbench: llama.cpp did not start: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"{READY} {server.listening_address}", flush=True)
    # the parent holds our stdin open; EOF means it is gone (or wants us gone)
    try:
        while sys.stdin.read(4096):
            pass
    except KeyboardInterrupt:
        pass
    os._exit(0)  # skip interpreter teardown; the C++ server has no clean shutdown here


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m genbench.local.llamacpp",
        description="Serve a GGUF model with llama.cpp (the genbench local target).",
    )
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port")
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--ctx-per-slot", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--thinking", action="store_true", help="think by default")
    _serve(ap.parse_args(argv))


if __name__ == "__main__":
    main()
