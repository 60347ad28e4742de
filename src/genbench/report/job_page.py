"""The job's section of the report page: its cards, figures and per-server table."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path
from typing import Any

from genbench import fmt
from genbench.generate.store.layout import engine_tags, shard_tags
from genbench.report.concurrency import changes_html
from genbench.report.engines import engines_figure, events_table, read_events
from genbench.report.figures import FAIL_COLOR, Figure
from genbench.report.job import _short, figures, label, load_job
from genbench.report.joblog import JobHistory
from genbench.report.parts import table_of, tiles_html
from genbench.transport.acceptance import left_out_words


def _tiles(h: JobHistory, notes: list[dict[str, Any]]) -> str:
    s = h.servers.values()
    rows, failed = sum(x.rows for x in s), sum(x.failed for x in s)
    span = max(h.end - h.start, 1e-9)
    sending = sum(z - a for a, z in h.runs)
    downs = sum(len(x.downs) for x in s)
    ends = [n for n in notes if n.get("event") == "end"]
    status = ends[-1]["status"].replace("_", " ") if ends else "—"
    tokens = h.row_tokens  # the written rows' output tokens: inspect's count
    partial = (f"; {h.partial_tokens:,} more in interrupted requests' partial outputs"
               if h.partial_tokens else "")  # fmt: skip
    requeued = sum(x.requeued for x in s)
    tiles = [
        ("rows done", f"{rows:,}", f"{failed:,} failed, in {fmt.counted(len(h.runs), 'run')}"),
        ("rows/s", fmt.number(rows / max(sending, 1e-9), 2), "over the time the job ran"),
        (
            "tokens/s",
            fmt.rate(tokens / max(sending, 1e-9)),
            f"{tokens:,} output tokens of the rows written{partial}",
        ),
        ("ran", fmt.duration(sending), f"over {fmt.duration(span)}; last: {status}"),
        (
            "requests",
            f"{h.records:,}",
            f"{sum(h.kinds.values()):,} failed"
            + (
                f", {h.interrupted:,} interrupted (Ctrl-C, SIGTERM: not failures)"
                if h.interrupted
                else ""
            ),
        ),
        ("server downs", f"{downs:,}", f"{fmt.counted(requeued, 'row')} requeued"),
    ]
    return tiles_html(tiles)


def _server_table(h: JobHistory) -> str:
    head = ["server", "requests", "rows", "failed", "requeued", "retries", "downs", "down for",
            "tokens answered", "down intervals"]  # fmt: skip
    body = []
    for s in h.servers.values():
        down_s = sum(z - a for a, z, _ in s.downs)
        spans = "; ".join(
            f"{time.strftime('%m-%d %H:%M:%S', time.localtime(a))} for {fmt.duration(z - a)} "
            f"({n} requeued)"
            for a, z, n in s.downs[:8]
        ) + ("; …" if len(s.downs) > 8 else "")
        body.append([escape(_short(s.name)), f"{s.requests:,}", f"{s.rows:,}", f"{s.failed:,}",
                     f"{s.requeued:,}", f"{s.retries:,}", f"{len(s.downs):,}",
                     fmt.duration(down_s) if s.downs else "—", f"{s.tokens:,}",
                     escape(spans) or "—"])  # fmt: skip
    return table_of(head, body, {0, 9})


def section(path: Path, h: JobHistory, notes: list[dict[str, Any]], figs: list[Figure],
            figure_html: Any, tag: str | None = None) -> str:  # fmt: skip
    """The HTML of one job; `figure_html` draws a figure as the page does."""
    by_id = {f.id.removesuffix(f"_{tag}") if tag else f.id: f for f in figs}
    name = label(path, tag)
    kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(h.kinds.items(), key=lambda kv: -kv[1]))
    colour = FAIL_COLOR if kinds else "#2ca02c"
    return "".join([
        f"<h2>Generate job: {escape(name)}</h2><p class='lead'>The job's history from "
        f"its request log ({escape(str(h.path))}, {fmt.counted(h.records, 'request')}): how "
        "fast it went on each server, when a server was down and what became of its rows, "
        "which failures came when, and where the job was headed against its plan.</p>",
        f"<section class='cards'><div class='card' style='--run:{colour}'>"
        f"<h3>{escape(name)}</h3><div class='meta'>{escape(h.model)} · "
        f"{fmt.counted(len(h.servers), 'server')} · {escape(str(path))}</div>"
        f"<div class='tiles'>{_tiles(h, notes)}</div></div></section>",
        "<div class='grid'>" + "".join(figure_html(by_id[k]) for k in
                                       ("job_rows", "job_tokens", "job_servers")) + "</div>",
        "<h3>Servers</h3>" + _server_table(h),
        figure_html(by_id["job_concurrency"]) if "job_concurrency" in by_id else "",
        changes_html(notes),
        *_engines_html(path, by_id, figure_html, tag),
        f"<p class='note'>failed requests by kind: {escape(kinds or 'none')}"
        + (f"; interrupted by the operator (Ctrl-C, SIGTERM), not failures: {h.interrupted:,}"
           if h.interrupted else "") + "</p>",
        "<div class='grid'>" + "".join(figure_html(by_id[k]) for k in
                                       ("job_failures", "job_eta")) + "</div>",
        "<h3>Latency and length</h3><div class='grid'>" + "".join(
            figure_html(by_id[k]) for k in ("job_latency", "job_lengths")) + "</div>",
        _accept_table(h),
    ])  # fmt: skip


def _engines_html(path: Path, by_id: dict[str, Figure], figure_html: Any,
                  tag: str | None) -> list[str]:  # fmt: skip
    """--serve: the engines' timeline and every death with its cause; nothing otherwise."""
    if "job_engines" not in by_id:
        return []
    table = events_table(read_events(path, tag))
    return [f"<h3>Engines</h3>{figure_html(by_id['job_engines'])}{table}"]


def _accept_table(h: JobHistory) -> str:
    """Speculative acceptance of the job's answers, by prompt group worst first and by
    output length: the kinds of prompt the drafter serves worst (docs/acceptance.md)."""
    acc = h.accept.to_dict() if h.accept.rows else None
    if acc is None:
        return ""
    rows = [(f"group {g['group']}", g) for g in acc["by_group"]]
    rows += [(f"{b['lo']:,}–{b['hi']:,} tokens" if b["hi"] else f"over {b['lo'] - 1:,} tokens",
              b) for b in acc["by_length"]]  # fmt: skip
    body = "".join(
        f"<tr><td class='t'>{escape(name)}</td><td>{r['requests']:,}</td>"
        f"<td>{r['length']:.2f}</td><td>{r['p10']:.2f}</td><td>{r['p50']:.2f}</td>"
        f"<td>{r['p90']:.2f}</td></tr>"
        for name, r in rows
    )
    head = ("<tr><th class='t'>group or output length</th><th>answers</th><th>length (pooled)</th>"
            "<th>p10</th><th>p50</th><th>p90</th></tr>")  # fmt: skip
    gone = left_out_words(acc, "answer")
    gone = f"; left out: {escape(gone)}" if gone else ""
    return (f"<h3>Speculative acceptance</h3><p class='note'>tokens per verify step, "
            f"{acc['length']:.2f} pooled over {acc['requests']:,} answers{gone}; groups worst "
            f"first, then by output length</p><div class='tablewrap'><table>{head}{body}"
            "</table></div>")  # fmt: skip


def job_sections(path: Path, figure_html: Any) -> list[tuple[str, str, list[Figure]]]:
    """Read the job at `path` and draw its sections, one per request log (a --shard's
    each): (label, HTML, figures)."""
    out = []
    for tag in shard_tags(path):  # each --shard drawn as a job of its own
        h, notes = load_job(path, tag)
        figs = figures(h, notes, tag)
        events = read_events(path, tag)
        if (eng := engines_figure(h, events, tag)) is not None:
            figs.append(eng)
        out.append((label(path, tag), section(path, h, notes, figs, figure_html, tag), figs))
    sent = set(shard_tags(path))
    for tag in engine_tags(path):  # its engines never came up: their events, nothing sent
        if tag not in sent:
            out.append((label(path, tag), _engines_only(path, tag), []))
    return out


def _engines_only(path: Path, tag: str | None) -> str:
    """A job that sent nothing (its engines' first start failed): every start and why it
    failed, from its engines' events."""
    events = read_events(path, tag)
    rows = []
    for ev in events:
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(ev["at"]))
        what = ev["event"].replace("_", " ")
        rows.append([when, escape(ev["engine"]), escape(what),
                     escape(str(ev.get("line") or ev.get("command") or ""))])  # fmt: skip
    return (
        f"<h2>Generate job: {escape(label(path, tag))}</h2><p class='lead'>Nothing was "
        "sent: the engines genbench started (--serve) never became healthy. Their events, "
        "from the engines' log:</p><h3>Engines</h3>"
        + table_of(["when", "engine", "event", "line"], rows, range(4))
    )
