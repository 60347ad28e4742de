"""Options shared by the commands that talk to a server, and their validation."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import typer

from genbench.endpoint import DEFAULT_KEY_ENV, Endpoint, load_api_key
from genbench.errors import UsageError
from genbench.limits import Descriptors, fit_descriptors

T = TypeVar("T")

URL = typer.Option(None, "--url", help="Server base URL, e.g. http://127.0.0.1:8000/v1")
MODEL = typer.Option(None, "--model", help="Model to use (default: the only one served).")
KEY_ENV = typer.Option(
    DEFAULT_KEY_ENV,
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the API key.",
)
KEY_FILE = typer.Option(
    None, "--api-key-file", metavar="PATH", help="File whose first line is the API key."
)
JSON = typer.Option(False, "--json", help="Print one JSON object instead of the table.")


def endpoint(url: str, key_env: str | None, key_file: Path | None) -> Endpoint:
    return Endpoint.parse(url, load_api_key(key_env, key_file))


def positive(name: str, value: float | int | None) -> None:
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be a positive number, got {value}")


def descriptors(streams: int, servers: int = 1, lower: str = "--concurrency") -> Descriptors:
    """Before anything is sent: raise the open-file limit to fit `streams` connections over
    `servers`, or refuse in one line (genbench.limits)."""
    return fit_descriptors(streams, servers, lower)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop where installed: its loop costs less per chunk than asyncio's."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
