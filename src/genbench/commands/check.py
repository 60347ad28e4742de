"""`genbench check`: preflight a server and print the verdict."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import typer

from genbench.check.preflight import preflight
from genbench.check.render import print_check
from genbench.commands import common
from genbench.commands.console import err, out
from genbench.engines.start import serving
from genbench.errors import UsageError, checked
from genbench.transport.thinking import parse_dialect, parse_tags


def check(
    url: str = common.URL,
    serve: list[str] | None = common.SERVE,
    engine_start_timeout: float = common.ENGINE_START_TIMEOUT,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    timeout: float = typer.Option(
        120.0, "--test-timeout", help="Seconds the test request may take, whole (not silence)."
    ),
    connect_timeout: float = typer.Option(
        3.0, "--connect-timeout", help="Seconds to wait for a connection."
    ),
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    json: bool = common.JSON,
) -> None:
    """Check that a server is alive, serves the model and answers one tiny request."""
    common.positive("--test-timeout", timeout)
    common.positive("--connect-timeout", connect_timeout)
    if serve:  # start the engine, check it, stop it: why an engine will not come up
        if url or len(serve) > 1:
            raise UsageError("check takes one server: --url URL or one --serve CMD")
        common.positive("--engine-start-timeout", engine_start_timeout)
    elif not url:
        raise UsageError(
            "--url is required: the server to check, e.g. http://127.0.0.1:8000/v1 "
            "(or --serve CMD: an engine to start)"
        )
    keys = (api_key_env, api_key_file)  # an engine started with a key asks for it
    engine = serving(serve, None, engine_start_timeout, common.loading(err), keys) if serve \
        else None  # fmt: skip
    t0 = time.monotonic()
    with engine or nullcontext() as cmds:  # --url: nothing to start
        started = time.monotonic() - t0 if serve else None
        ep = common.endpoint(cmds[0].url if cmds else url, api_key_env, api_key_file)
        common.descriptors(1)
        tags, dialect = checked(parse_tags, think_tags), checked(parse_dialect, think_dialect)
        checks = preflight(ep, model, timeout=timeout, connect_timeout=connect_timeout,
                           think_tags=tags, think_dialect=dialect)  # fmt: skip
        rep = common.run_async(checks)
        if json:
            common.print_json(rep.to_dict())
        else:
            print_check(rep, out, err, started)
        raise typer.Exit(rep.exit_code)
