"""`genbench check`: preflight a server and print the verdict."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from genbench.check import CheckReport, preflight
from genbench.commands import common
from genbench.console import err, out
from genbench.errors import UsageError
from genbench.fmt import duration, ms
from genbench.think import NONE, describe


def check(
    url: str = common.URL,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds for the test request."),
    connect_timeout: float = typer.Option(
        3.0, "--connect-timeout", help="Seconds to wait for a connection."
    ),
    think_tags: str = common.THINK_TAGS,
    json: bool = common.JSON,
) -> None:
    """Check that a server is alive, serves the model and answers one tiny request."""
    if not url:
        raise UsageError("--url is required: the server to check, e.g. http://127.0.0.1:8000/v1")
    common.positive("--timeout", timeout)
    common.positive("--connect-timeout", connect_timeout)
    ep = common.endpoint(url, api_key_env, api_key_file)
    common.descriptors(1)
    tags = common.think_tags(think_tags)
    rep = common.run_async(
        preflight(ep, model, timeout=timeout, connect_timeout=connect_timeout, think_tags=tags)
    )
    if json:
        typer.echo(orjson.dumps(rep.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        render(rep)
    raise typer.Exit(rep.exit_code)


def render(rep: CheckReport) -> None:
    out.print(f"[bold]genbench check[/] {rep.url}")
    for note in rep.notes:
        out.print(f"  [dim]note:[/] {note}")
    if rep.health:
        health = "ok" if rep.health == "ok" else "no /health; /v1/models answers"
        out.print(f"  [green]✓[/] health   {health}")
    if rep.model:
        out.print(f"  [green]✓[/] model    {rep.model} ({len(rep.models)} served)")
    s = rep.server
    if s.kind:
        extra = f", context {s.max_model_len}" if s.max_model_len else ""
        out.print(f"  [green]✓[/] server   {s.kind} {s.version or '(version unknown)'}{extra}")
    if rep.ok and rep.finish_reason:
        tokens = "?" if rep.completion_tokens is None else str(rep.completion_tokens)
        think = f", {rep.reasoning_tokens or 0} thinking" if rep.thinking else ", no thinking"
        if rep.thinking and rep.reasoning_source == "estimate":
            think += " (estimated from the split text)"
        est = " (estimated)" if rep.tokens_estimated else ""
        out.print(
            f"  [green]✓[/] request  TTFT {ms(rep.ttft_s)}, {tokens} tokens{est}{think}, "
            f"finish {rep.finish_reason}, {ms(rep.e2e_s)} total"
        )
    if rep.ok and rep.thinking_dialect:
        mark = "[green]✓[/]" if rep.thinking_dialect != NONE else "[dim]-[/]"
        out.print(f"  {mark} thinking {describe(rep.think_mode())}")
    if rep.ok:
        out.print(f"[bold green]ready[/] ({duration(rep.elapsed_s)})")
    else:
        err.print(f"[bold red]✗[/] {rep.diagnosis}")
