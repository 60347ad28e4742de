"""`genbench generate`'s options for watching a job and for the shape of its answers.

`--metrics-port` / `--metrics-host` serve the job's progress to Prometheus while it runs
(generate/metrics_server.py); `--answers` writes OpenAI Batch output lines instead of, or beside,
the conversations (generate/store/batch.py, written by the job's end). Kept apart from
generate.py, which holds the job's other options.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

from genbench.errors import UsageError
from genbench.generate.jobconfig import JobConfig
from genbench.generate.listeners import Listeners
from genbench.generate.outcome import Listener

ANSWERS = typer.Option(
    "conversations",
    "--answers",
    help="conversations; batch: data files in OpenAI's Batch output shape instead; both: "
    "conversations, and batch_output.jsonl beside them at the end of every run.",
)
METRICS_PORT = typer.Option(
    None,
    "--metrics-port",
    metavar="PORT",
    help="Serve the job's progress as Prometheus metrics on http://HOST:PORT/metrics while "
    "it runs (0: any free port). See docs/generate.md.",
)
DEFAULT_METRICS_HOST = "127.0.0.1"
METRICS_HOST = typer.Option(
    DEFAULT_METRICS_HOST,
    "--metrics-host",
    help="Address --metrics-port listens on: loopback unless you choose another (0.0.0.0: "
    "every interface).",
)
def listeners(console_listener: Listener, cfg: JobConfig, host: str, port: int | None,
              console: Console) -> tuple[Listener, Any]:  # fmt: skip
    """Who hears the job: the console, and the metrics server when asked (started
    here, so a port in use fails before any request); (listener, metrics server or None)."""
    metrics = None
    if port is None and host != DEFAULT_METRICS_HOST:
        console.print(f"  [yellow]--metrics-host {host} is ignored without --metrics-port[/]")
    if port is not None:
        if not 0 <= port <= 65535:
            raise UsageError(f"--metrics-port {port}: expected a port from 0 to 65535")
        from genbench.generate.metrics_server import MetricsServer

        metrics = MetricsServer(host, port)
        console.print(f"  metrics: {metrics.start()}")
    return Listeners(console_listener, *([metrics] if metrics else [])), metrics


def stop(metrics: Any) -> None:
    if metrics is not None:
        metrics.stop()

