"""`genbench check` on the console: a line per check that passed, then `ready` or the
diagnosis."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from genbench.check.metric_names import DIALECTS
from genbench.check.preflight import CheckReport, MetricsProbe
from genbench.check.router import ROUTER_KINDS, workers_line
from genbench.fmt import count, duration, ms, number
from genbench.transport.acceptance import describe as describe_acceptance
from genbench.transport.thinking import NONE, describe
from genbench.transport.token_ids import describe as describe_ids

# who counted the thinking tokens the server's usage left out (CheckReport.reasoning_source)
CHECK_THINKING_FROM = {
    "estimate": "estimated from the text: the server did not count them",
    "tokenizer": "counted by the server's /tokenize: its usage did not",
}


def print_check(
    rep: CheckReport, out: Console, err: Console, started_s: float | None = None
) -> None:
    """The checks that passed, one line each, their notes after them (a note reads the
    lines above it), then ready or the diagnosis (on `err`); `started_s`: how long a
    --serve engine took to start, before the checks."""
    out.print(f"[bold]genbench check[/] {rep.url}")
    _print_lines(rep, out)
    for note in rep.notes:
        out.print(f"  [dim]note:[/] {note}")
    if rep.ok:
        took = f"checks {duration(rep.elapsed_s)}"
        if started_s is not None:
            took += f", after the engine's start of {duration(started_s)}"
        out.print(f"[bold green]ready[/] ({took})")
    else:
        err.print(f"[bold red]✗[/] {rep.diagnosis}")


def _print_lines(rep: CheckReport, out: Console) -> None:
    if rep.health:
        health = "ok" if rep.health == "ok" else "no /health; /v1/models answers"
        if rep.deep_health == "ok":
            health += "; /health_generate ok (a one-token generation)"
        out.print(f"  [green]✓[/] health   {health}")
    if rep.model and rep.model in rep.models:
        out.print(f"  [green]✓[/] model    {rep.model} ({len(rep.models)} served)")
    elif rep.model:  # --model, not listed (a router lists 'unknown'): the request decides
        listed = ", ".join(rep.models[:3]) + (", …" if len(rep.models) > 3 else "")
        out.print(f"  [yellow]![/] model    {rep.model}: not listed by /v1/models ({listed})")
    s = rep.server
    if s.kind:
        extra = f", context {s.max_model_len}" if s.max_model_len else ""
        version = s.version or "(version unknown)"
        if s.kind in ROUTER_KINDS:
            version = f"({workers_line(s.details)})"
        out.print(f"  [green]✓[/] server   {s.kind} {version}{extra}")
        if details := server_details(s.details):
            out.print(f"             {details}")
    if rep.metrics:
        _print_metrics(rep.metrics, out)
    if rep.ok and rep.finish_reason:
        tokens = "?" if rep.completion_tokens is None else str(rep.completion_tokens)
        think = f", {rep.reasoning_tokens or 0} thinking" if rep.thinking else ", no thinking"
        if rep.thinking and rep.reasoning_source in CHECK_THINKING_FROM:
            think += f" ({CHECK_THINKING_FROM[rep.reasoning_source]})"
        est = " (estimated)" if rep.tokens_estimated else ""
        out.print(
            f"  [green]✓[/] request  TTFT {ms(rep.ttft_s)}, {tokens} tokens{est}{think}, "
            f"finish {rep.finish_reason}, {ms(rep.e2e_s)} total"
        )
    if rep.ok and rep.thinking_dialect:
        mark = "[green]✓[/]" if rep.thinking_dialect != NONE else "[dim]-[/]"
        how = " (set by --think-dialect)" if rep.think_dialect_set else ""
        if not how and rep.thinking_dialect == NONE:
            how = (
                f" in this short reply: run, plan and generate watch theirs for a "
                f"{rep.think_tags[1]} (or say it: --think-dialect)"
            )
        out.print(f"  {mark} thinking {describe(rep.think_mode())}{how}")
    if rep.ok and (rep.acceptance or rep.acceptance_note):
        mark = "[green]✓[/]" if rep.acceptance else "[dim]-[/]"
        out.print(f"  {mark} {describe_acceptance(rep.acceptance, rep.acceptance_note)}")
    if rep.ok and (rep.token_ids or rep.token_ids_note):
        mark = "[green]✓[/]" if rep.token_ids else "[dim]-[/]"
        out.print(f"  {mark} token ids {describe_ids(rep.token_ids, rep.token_ids_note)}")


def server_details(d: dict[str, Any]) -> str:
    """What SGLang's /server_info says of its setup, in one line."""
    parts = []
    if d.get("model_path"):
        parts.append(f"model {d['model_path']}")
    if d.get("speculative_algorithm"):
        n = d.get("speculative_num_draft_tokens")
        drafts = f" ({count(n)} draft tokens)" if n else ""
        parts.append(f"speculative {d['speculative_algorithm']}{drafts}")
        if d.get("avg_spec_accept_length"):
            parts.append(f"accept length {number(d['avg_spec_accept_length'], 2)} so far")
    if d.get("reasoning_parser"):
        parts.append(f"reasoning parser {d['reasoning_parser']}")
    if d.get("max_running_requests"):
        parts.append(f"max running requests {count(d['max_running_requests'])}")
    return ", ".join(parts)


def _print_metrics(m: MetricsProbe, out: Console) -> None:
    if m.status == "ok" and m.dialect:
        prefix = next(p for p, kind in DIALECTS if kind == m.dialect)
        out.print(f"  [green]✓[/] metrics  /metrics in {m.dialect}'s names ({prefix}*)")
    elif m.status == "ok":
        out.print(f"  [yellow]![/] metrics  /metrics answers, but {m.hint}")
    elif m.status == "absent":
        out.print(f"  [yellow]![/] metrics  no /metrics (HTTP {m.http_status}): {m.hint}")
    else:
        out.print(f"  [yellow]![/] metrics  /metrics could not be read ({m.hint})")
