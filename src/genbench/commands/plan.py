"""`genbench plan`: the forecast table, from arithmetic, a run result, or a pilot."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from genbench import plan as P
from genbench.check import preflight
from genbench.commands import common
from genbench.console import err, out
from genbench.errors import ExitCode, GenbenchError, ServerDown, UsageError
from genbench.generate.params import job_params
from genbench.records import RequestRecord
from genbench.result import load_result
from genbench.run import prepare_out_dir

DEFAULT_PILOT_C = 32


def plan(
    samples: str | None = typer.Option(
        None,
        "--samples",
        help="Samples to forecast, comma-separated, K/M suffixes [100K,200K,500K,900K].",
    ),
    servers: int = typer.Option(1, "--servers", help="Identical servers sharing the job."),
    from_: Path | None = typer.Option(
        None, "--from", help="A `genbench run` result: its directory or result.json."
    ),
    prompts: Path | None = typer.Option(
        None, "--prompts", help="Your prompts (JSONL or Parquet): run a pilot on them."
    ),
    rate: float | None = typer.Option(
        None, "--rate", help="Arithmetic only: output tokens/s of one server."
    ),
    tokens_per_sample: float | None = typer.Option(
        None, "--tokens-per-sample", help="Output tokens per sample (thinking included)."
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        help="--from: forecast also at this measured C. --prompts: the job's C [32].",
    ),
    url: str | None = common.URL,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    pilot: int | None = typer.Option(
        None,
        "--pilot",
        help="Pilot requests drawn from --prompts. Default: until the bar reaches "
        "--target-error (at least max(200, 8·C) requests, at most --pilot-max-time).",
    ),
    target_error: float = typer.Option(
        5.0,
        "--target-error",
        help="Pilot without --pilot: stop once the mean output length is known to ±0.8 × "
        "this percent (95%), leaving the rest of the bar to the server's speed.",
    ),
    pilot_min_time: float = typer.Option(
        0.0,
        "--pilot-min-time",
        help="Pilot without --pilot: run at least this many seconds (a server whose speed "
        "wanders needs minutes).",
    ),
    pilot_max_time: float = typer.Option(
        600.0, "--pilot-max-time", help="Pilot without --pilot: stop after this many seconds."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="The job's max_tokens (default: none, natural length)."
    ),
    temperature: float | None = typer.Option(None, "--temperature", help="The job's temperature."),
    top_p: float | None = typer.Option(None, "--top-p", help="The job's top_p."),
    top_k: int | None = typer.Option(None, "--top-k", help="The job's top_k."),
    thinking: bool | None = typer.Option(
        None,
        "--thinking/--no-thinking",
        help="The job's chat_template_kwargs.enable_thinking (default: the server's choice).",
    ),
    param: list[str] | None = typer.Option(
        None, "--param", help="Another request field of the job, KEY=JSON; repeatable."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The job's JSON or TOML file of request fields, as generate's."
    ),
    turns: str = typer.Option(
        "all",
        "--turns",
        help="As the job's generate --turns: all (every user turn of a conversation "
        "answered in order) or last.",
    ),
    warmup: float = typer.Option(
        20.0,
        "--warmup",
        help="Pilot: seconds of load at C before it, discarded (an idle server starts slow).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for the pilot's prompts and the bootstrap."),
    bootstrap: int = typer.Option(200, "--bootstrap", help="Bootstrap replicates for the bar."),
    hidden_size: int | None = typer.Option(
        None, "--hidden-size", help="Hidden-state storage: the target model's hidden size."
    ),
    layers_captured: int | None = typer.Option(
        None, "--layers-captured", help="Hidden-state storage: layers kept per token."
    ),
    dtype_bytes: int = typer.Option(2, "--dtype-bytes", help="Hidden-state storage: bytes/value."),
    bytes_per_token: float | None = typer.Option(
        None, "--bytes-per-token", help="Output text bytes per token when not measured [4]."
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Pilot: seconds of silence before a request is abandoned."
    ),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        help="Pilot: directory for its records and plan.json (default: genbench-runs/TIME-plan).",
    ),
    json: bool = common.JSON,
) -> None:
    """Forecast hours, tokens and bytes of a generation job, with an error bar."""
    modes = [m for m, v in (("--from", from_), ("--prompts", prompts), ("--rate", rate)) if v]
    if len(modes) != 1:
        raise UsageError(
            ("choose one of " if modes else "nothing to plan from: give one of ")
            + "--from RESULT, --prompts FILE (a pilot) or --rate TOK_S --tokens-per-sample T"
            + (f" (got {' and '.join(modes)})" if len(modes) > 1 else "")
        )
    counts = P.parse_counts("--samples", samples) if samples else list(P.DEFAULT_SAMPLES)
    for name, v in (
        ("--servers", servers),
        ("--rate", rate),
        ("--tokens-per-sample", tokens_per_sample),
        ("--concurrency", concurrency),
        ("--pilot", pilot),
        ("--max-tokens", max_tokens),
        ("--bootstrap", bootstrap),
        ("--hidden-size", hidden_size),
        ("--layers-captured", layers_captured),
        ("--dtype-bytes", dtype_bytes),
        ("--bytes-per-token", bytes_per_token),
        ("--timeout", timeout),
        ("--target-error", target_error),
        ("--pilot-max-time", pilot_max_time),
    ):
        common.positive(name, v)
    if turns not in ("all", "last"):
        raise UsageError(f"--turns must be all or last, got {turns!r}")
    if warmup < 0:
        raise UsageError(f"--warmup must be 0 or more seconds, got {warmup}")
    if pilot_min_time < 0 or pilot_min_time > pilot_max_time:
        raise UsageError(
            f"--pilot-min-time {pilot_min_time:g} must be between 0 and --pilot-max-time "
            f"{pilot_max_time:g}"
        )
    hidden = _hidden(hidden_size, layers_captured, dtype_bytes)
    console = err if json else out
    if rate is not None:
        if tokens_per_sample is None:
            raise UsageError("--rate needs --tokens-per-sample: the arithmetic is N × T / rate")
        storage = P.storage_from_tokens(tokens_per_sample, bytes_per_token, hidden)
        doc = P.plan_arithmetic(counts, rate, tokens_per_sample, servers, storage)
        saved = None
    elif from_ is not None:
        result = load_result(from_)
        doc = P.plan_from_result(
            result, counts, servers, concurrency, tokens_per_sample, hidden, bytes_per_token
        )
        saved = P.save_plan(doc, Path(result["_path"]).parent)
    else:
        assert prompts is not None
        if not url:
            raise UsageError("--prompts needs --url: the server to run the pilot on")
        if tokens_per_sample is not None:
            raise UsageError("--tokens-per-sample does not apply to a pilot: it measures them")
        doc, saved = _pilot(
            console,
            prompts,
            counts,
            servers,
            concurrency or DEFAULT_PILOT_C,
            pilot,
            url,
            model,
            api_key_env,
            api_key_file,
            job_params(
                config=config,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                max_tokens=max_tokens,
                thinking=thinking,
                extra=param or [],
            ),
            turns,
            seed,
            bootstrap,
            hidden,
            timeout,
            out_dir,
            warmup,
            None
            if pilot
            else P.PilotStop(target=target_error / 100, min_s=pilot_min_time, max_s=pilot_max_time),
        )
    render(doc, console)
    if saved is not None:
        console.print(f"plan: {saved}")
    if json:
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


def _hidden(size: int | None, layers: int | None, dtype_bytes: int) -> P.HiddenStates | None:
    if size is None and layers is None:
        return None
    if size is None or layers is None:
        raise UsageError("hidden-state storage needs both --hidden-size and --layers-captured")
    return P.HiddenStates(size, layers, dtype_bytes)


def _pilot(
    console: Console,
    prompts_path: Path,
    counts: list[int],
    servers: int,
    concurrency: int,
    pilot: int | None,
    url: str,
    model: str | None,
    api_key_env: str,
    api_key_file: Path | None,
    params: dict[str, Any],
    turns: str,
    seed: int,
    boot: int,
    hidden: P.HiddenStates | None,
    timeout: float,
    out_dir: Path | None,
    warmup_s: float,
    stop: P.PilotStop | None,
) -> tuple[dict[str, Any], Path]:
    ep = common.endpoint(url, api_key_env, api_key_file)
    # generate's reader: a file generate refuses fails here, with the same message, before
    # the server is touched
    source_rows = P.read_pilot_input(prompts_path, seed)
    rows = source_rows.rows
    all_turns = turns == "all"
    k = pilot or max(200, 8 * concurrency)
    if stop is not None:
        stop.min_requests = min(k, source_rows.total)
    out_path = out_dir or Path("genbench-runs") / f"{datetime.now():%Y%m%d-%H%M%S}-plan"
    check = common.run_async(preflight(ep, model, timeout=timeout))
    if not check.ok:
        raise GenbenchError(f"preflight failed: {check.diagnosis}", check.exit_code)
    prepare_out_dir(out_path)
    stream = P.pilot_stream(rows, seed)
    # open-ended: until the bar is reached, at most every row once; fixed: K draws
    items = itertools.islice(stream, len(rows) if stop is not None else k)
    rnd = random.Random(seed + 1)
    warm = P.first_turn_requests(
        [rows[rnd.randrange(len(rows))] for _ in range(4 * concurrency)], params, all_turns, "warm"
    )
    size = (
        f"until ±{stop.target:.0%} (≥ {stop.min_requests}"
        + (f", ≥ {stop.min_s:g} s" if stop.min_s else "")
        + f", ≤ {stop.max_s:g} s)"
        if stop is not None
        else str(k)
    )
    console.print(
        f"[bold]genbench plan[/] pilot: {size} of {source_rows.total:,} rows from {prompts_path} "
        f"at C={concurrency} on {ep.base_url} → {out_path}"
        + (f" (after {warmup_s:g} s of warm-up)" if warmup_s else "")
    )
    bar = _PilotProgress(console, k if stop is None else None, stop)
    try:
        run = common.run_async(
            P.run_pilot(
                ep,
                check.model or "",
                items,
                concurrency,
                out_path,
                bar.record,
                timeout=timeout,
                warmup=warm,
                warmup_s=warmup_s,
                stop=stop,
                params=params,
                turns=turns,
            )
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        bar.stop()
        err.print(f"[red]interrupted[/]: pilot records so far in {out_path}")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except ServerDown as e:
        bar.stop()
        raise GenbenchError(f"{e}; pilot records so far in {out_path}", e.exit_code) from None
    finally:
        bar.stop()
    if not any(r.ok for r in run.records):
        kinds = sorted({r.error_kind or "?" for r in run.records})
        raise GenbenchError(f"every pilot request failed ({', '.join(kinds)}); see {out_path}")
    why = {
        "target": "the mean length reached its target",
        "time": f"--pilot-max-time {stop.max_s:g} s reached" if stop else "",
        "prompts": "every prompt in the file was sent",
        "size": "",
    }[run.stopped]
    console.print(
        f"  pilot done: {len(run.records)} requests in {run.wall_s:.1f} s"
        + (f" ({why})" if why else "")
        + "; simulating the job …"
    )
    source = {
        "kind": "pilot",
        "prompts": str(prompts_path),
        "prompts_in_file": source_rows.total,
        "url": ep.base_url,
        "model": check.model,
        "server": check.server.kind,
        "records": str(out_path / P.REQUESTS_FILE),
    }
    inputs = {
        "samples": counts,
        "servers": servers,
        "concurrency": concurrency,
        "pilot": run.samples,
        "pilot_requests": len(run.records),
        "turns": turns,
        "pilot_fixed": pilot,
        "target_error": stop.target if stop is not None else None,
        "pilot_min_time_s": stop.min_s if stop is not None else None,
        "pilot_max_time_s": stop.max_s if stop is not None else None,
        "pilot_stopped": run.stopped,
        "pilot_stopped_at": run.stopped_at,
        "max_tokens": params.get("max_tokens"),
        "params": params,
        "seed": seed,
        "bootstrap": boot,
        "warmup_s": warmup_s,
    }
    doc = P.plan_from_pilot(run, concurrency, counts, servers, hidden, source, inputs, boot, seed)
    return doc, P.save_plan(doc, out_path)


class _PilotProgress:
    """K of total for a fixed pilot; for an open-ended one, the mean length's bar so far."""

    def __init__(self, console: Console, total: int | None, stop: P.PilotStop | None) -> None:
        self.tokens = self.failed = 0
        self.stop_rule = stop
        self.t0 = time.perf_counter()
        self.progress: Progress | None = None
        if console.is_terminal:
            self.progress = Progress(
                TextColumn("  pilot"),
                BarColumn(bar_width=24),
                TextColumn(
                    "{task.completed:>5.0f}/{task.total:<5.0f}"
                    if total is not None
                    else "{task.completed:>6.0f} requests"
                ),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task("pilot", total=total, rate="")

    def record(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.tokens += rec.completion_tokens or 0
        else:
            self.failed += 1
        if self.progress is not None:
            dt = time.perf_counter() - self.t0
            rate = f"{self.tokens / dt:,.0f} tok/s" if dt > 0 else ""
            if self.stop_rule is not None and self.stop_rule.count >= 2:
                hw = self.stop_rule.halfwidth
                goal = self.stop_rule.target * self.stop_rule.length_share
                rate += f"  mean length ±{hw:.1%} (→ ±{goal:.1%})"
            if self.failed:
                rate += f"  [red]{self.failed} failed[/]"
            self.progress.update(self.task, advance=1, rate=rate)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


# ------------------------------------------------------------------------------ rendering


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


def _days(seconds: float) -> str:
    return f"{seconds / 86400:,.2f}"


def render(doc: dict[str, Any], console: Console) -> None:
    {"arithmetic": _render_arithmetic, "result": _render_result, "pilot": _render_pilot}[
        doc["mode"]
    ](doc, console)
    rows = doc["rows"]
    if rows and rows[0]["storage"].get("hidden_state_bytes") is not None:
        console.print(
            "  hidden states = tokens × hidden size × layers captured × bytes per value "
            f"({rows[0]['storage']['hidden_state_tokens'] / rows[0]['samples']:,.0f} tokens "
            "per sample)"
        )
    console.print(f"  storage: {doc['model'].get('storage_basis', '')}")
    for note in doc.get("notes") or []:
        console.print(f"  [yellow]note:[/] {note}")


def _storage_cols(t: Table, doc: dict[str, Any], parquet: bool = False) -> None:
    t.add_column("JSONL", justify="right")
    if parquet:
        t.add_column("Parquet", justify="right")
    if doc["rows"] and doc["rows"][0]["storage"].get("hidden_state_bytes") is not None:
        t.add_column("hidden states", justify="right")


def _storage_cells(row: dict[str, Any], parquet: bool = False) -> list[str]:
    s = row["storage"]
    cells = [P.human_bytes(s["jsonl_bytes"])]
    if parquet:
        cells.append(P.human_bytes(s.get("parquet_bytes")))
    if s.get("hidden_state_bytes") is not None:
        cells.append(P.human_bytes(s["hidden_state_bytes"]))
    return cells


def _render_arithmetic(doc: dict[str, Any], console: Console) -> None:
    i = doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] arithmetic: samples × {i['tokens_per_sample']:,g} tokens / "
        f"{i['tok_per_s']:,g} tok/s"
    )
    t = Table(title="the field's arithmetic (no error bar)", title_justify="left")
    for col in ("samples", "tokens", "time", "days"):
        t.add_column(col, justify="right")
    servers = i["servers"]
    if servers > 1:
        t.add_column(f"time ×{servers} servers", justify="right")
        t.add_column("days", justify="right")
    _storage_cols(t, doc)
    for row in doc["rows"]:
        one = row["one_server"]
        cells = [
            f"{row['samples']:,}",
            P.human_tokens(row["tokens"]["output"]),
            fmt_time(one["seconds"]),
            _days(one["seconds"]),
        ]
        if servers > 1:
            m = row["at_servers"]["seconds"]
            cells += [fmt_time(m), _days(m)]
        t.add_row(*cells, *_storage_cells(row))
    console.print(t)


def _tokens_table(doc: dict[str, Any], console: Console, parquet: bool = False) -> None:
    rows = doc["rows"]
    thinking = any(r["tokens"].get("thinking") for r in rows)
    prompt = any(r["tokens"].get("prompt") for r in rows)
    interval = any("output_lo" in r["tokens"] for r in rows)
    t = Table(title="tokens and storage", title_justify="left")
    t.add_column("samples", justify="right")
    t.add_column("output tokens", justify="right")
    if interval:
        t.add_column("95% range", justify="right")
    if thinking:
        t.add_column("thinking", justify="right")
        t.add_column("answer", justify="right")
    if prompt:
        t.add_column("prompt tokens", justify="right")
    _storage_cols(t, doc, parquet)
    for row in rows:
        tok = row["tokens"]
        cells = [f"{row['samples']:,}", P.human_tokens(tok["output"])]
        if interval:
            cells.append(f"{P.human_tokens(tok['output_lo'])} – {P.human_tokens(tok['output_hi'])}")
        if thinking:
            cells += [P.human_tokens(tok["thinking"]), P.human_tokens(tok["answer"])]
        if prompt:
            cells.append(P.human_tokens(tok["prompt"]))
        t.add_row(*cells, *_storage_cells(row, parquet))
    console.print(t)


def fmt_range(lo: float, hi: float) -> str:
    """Both ends in the unit of the upper one: '61.9 – 74.7 min'."""
    text = fmt_time(hi)
    unit = text.split()[-1]
    div = {"s": 1, "min": 60, "h": 3600}[unit]
    return f"{lo / div:,.1f} – {text}"


def _render_result(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] from {src['path']} ({src.get('model')} on "
        f"{src.get('server') or 'unknown server'})"
    )
    console.print(
        f"  tokens per sample: {m['tokens_per_sample']:,.1f} ({m['tokens_per_sample_basis']}); "
        f"thinking share {m['thinking_share']:.1%}"
    )
    best = m["best_concurrency"]
    rates = ", ".join(f"C={c}: {r:,.1f}" for c, r in m["sustained_tps_by_concurrency"].items())
    console.print(f"  sustained tok/s by concurrency: {rates}")
    f = m["field"]
    if f["concurrency"]:
        console.print(
            f"  field's method: burst {f['tok_per_s']:,.1f} tok/s at C={f['concurrency']} × "
            f"{f['tokens_per_sample']:,.1f} tokens/sample"
        )
    t = Table(title="time: sustained rate (ours) beside the field's burst", title_justify="left")
    has_bar = any("lo_s" in row["ours_best"] for row in doc["rows"])
    for col in ("samples", f"ours C={best}") + (("95% range",) if has_bar else ()) + ("days",):
        t.add_column(col, justify="right")
    chosen = i.get("concurrency")
    if chosen is not None:
        t.add_column(f"ours C={chosen}", justify="right")
    servers = i["servers"]
    if servers > 1:
        t.add_column(f"×{servers} servers", justify="right")
    if f["concurrency"]:
        t.add_column(f"field: burst C={f['concurrency']}", justify="right")
        t.add_column("days", justify="right")
        t.add_column("field vs ours", justify="right")
    for row in doc["rows"]:
        ob = row["ours_best"]
        ours = ob["seconds"]
        cells = [f"{row['samples']:,}", fmt_time(ours)]
        if has_bar:
            cells.append(fmt_range(ob["lo_s"], ob["hi_s"]) if "lo_s" in ob else "—")
        cells.append(_days(ours))
        if chosen is not None:
            cells.append(fmt_time(row["ours_chosen"]["seconds"]))
        if servers > 1:
            cells.append(fmt_time(row["at_servers"]["seconds"]))
        if f["concurrency"]:
            fs = row["field"]["seconds"]
            cells += [fmt_time(fs), _days(fs), f"{fs / ours - 1:+.0%}"]
        t.add_row(*cells)
    console.print(t)
    if has_bar:
        console.print(f"  range: {m['bar_basis']}")
    _tokens_table(doc, console)


def _render_pilot(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    out_d = m["output_tokens"]
    console.print(
        f"[bold]genbench plan[/] pilot of {m['pilot_requests']} requests at C={m['concurrency']} "
        f"on {src.get('model')} ({src.get('server') or 'unknown server'}): "
        f"{m['pilot_wall_s']:.1f} s, {m['fail_rate']:.1%} failed"
    )
    think = m["thinking_tokens"]["mean"] or 0
    console.print(
        f"  output tokens per sample: mean {out_d['mean']:,.0f}, p50 {out_d['p50']:,.0f}, "
        f"p90 {out_d['p90']:,.0f}, max {out_d['max']:,.0f} (thinking {think:,.0f} of it)"
    )
    steady = m.get("pilot_steady_tps")
    console.print(
        f"  server: {m['job_tps']:,.0f} tok/s over the simulated job at C={m['concurrency']}"
        + (f" (the pilot's steady window: {steady:,.0f} tok/s)" if steady else "")
    )
    rep = m.get("replay")
    if rep:
        console.print(
            f"  model check: replaying the pilot gives {rep['simulated_s']:.1f} s against "
            f"{rep['actual_s']:.1f} s measured ({rep['error']:+.1%}; in the bar)"
        )
    servers = i["servers"]
    conf = doc["rows"][0]["ours"]["confidence"]
    t = Table(title="time: the job simulated from the pilot", title_justify="left")
    for col in ("samples", "ours", f"{conf:.0%} range", "±", "days"):
        t.add_column(col, justify="right")
    if servers > 1:
        t.add_column(f"×{servers} servers", justify="right")
        t.add_column(f"{conf:.0%} range", justify="right")
    t.add_column("naive: pilot × N/K", justify="right")
    for row in doc["rows"]:
        ours = row["ours"]
        cells = [
            f"{row['samples']:,}",
            fmt_time(ours["seconds"]),
            fmt_range(ours["lo_s"], ours["hi_s"]),
            f"{ours['rel_halfwidth']:.1%}",
            _days(ours["seconds"]),
        ]
        if servers > 1:
            m_s = row["at_servers"]
            cells += [fmt_time(m_s["seconds"]), fmt_range(m_s["lo_s"], m_s["hi_s"])]
        cells.append(fmt_time(row["naive_pilot"]["seconds"]))
        t.add_row(*cells)
    console.print(t)
    _tokens_table(doc, console, parquet=True)
    tgt = doc.get("pilot_size_for_target") or {}
    need, goal = tgt.get("requests", doc.get("pilot_size_for_5pct")), tgt.get("target", 0.05)
    if need:
        worst = max(r["ours"]["rel_halfwidth"] for r in doc["rows"])
        length = max(r["ours"].get("length_halfwidth", 0.0) for r in doc["rows"])
        console.print(
            f"  the bar is ±{worst:.1%}, ±{length:.1%} of it from the mean output length; "
            f"±{goal:.0%} needs a pilot of about {need:,} requests (--pilot {need})"
        )
