"""The terminal summary of an inspection: what a person reads before training on the set."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from genbench.fmt import counted as _n  # `1 row`, `2 rows`
from genbench.fmt import nbytes
from genbench.inspect.detect import DEFECTS
from genbench.inspect.fidelity import fidelity_lines
from genbench.transport.acceptance import lines as accept_lines


def _tokens(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return "—" if v is None else f"{v:,.0f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _dist_table(doc: dict[str, Any]) -> Table:
    t = Table(title="output tokens and thinking share", title_justify="left")
    for col, just in (("group", "left"), ("rows", "right"), ("p5", "right"), ("p50", "right"),
                      ("p95", "right"), ("p99", "right"), ("max", "right"),
                      ("thinking p50", "right"), ("thinking share p5–p95", "right")):  # fmt: skip
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    d = doc["distributions"]
    groups = [("all rows", d["overall"])]
    if len(d["by_server"]) > 1:
        groups += [(f"server {k}", v) for k, v in d["by_server"].items()]
    groups += [(f"finish {k}", v) for k, v in d["by_finish_reason"].items()]
    for name, g in groups:
        o, s = g["output_tokens"], g["thinking_share"]
        est = " (est.)" if g.get("estimated_rows") and s.get("count") else ""
        t.add_row(
            name,
            f"{g['rows']:,}",
            *(_tokens(o, k) for k in ("p5", "p50", "p95", "p99", "max")),
            _pct(s.get("p50")) + est,
            f"{_pct(s.get('p5'))}–{_pct(s.get('p95'))}{est}" if s.get("count") else "—",
        )
    return t


def _defect_table(doc: dict[str, Any]) -> Table:
    n = doc["rows"]
    t = Table(title=f"defects ({doc['rows_with_defects']:,} of {_n(n, 'row')} have at least one)",
              title_justify="left")  # fmt: skip
    t.add_column("defect (--drop name)")
    t.add_column("rows", justify="right")
    t.add_column("share", justify="right")
    t.add_column("examples")
    for name in DEFECTS:
        d = doc["defects"][name]
        ex = d["examples"]
        shown = "; ".join(f"{e['id']} ({e['detail']})" for e in ex[:2])
        more = d["rows"] - min(len(ex), 2)
        if more > 0 and shown:
            shown += f"; +{more:,} more"
        style = "red" if d["rows"] else "dim"
        t.add_row(
            f"{DEFECTS[name].label} ({name})",
            f"[{style}]{d['rows']:,}[/]",
            f"{d['share']:.2%}",
            shown or "—",
        )
    return t


def _server_lines(doc: dict[str, Any], console: Console) -> None:
    s = doc["servers"]
    if s["count"] < 2:
        return
    if not s["odd"]:
        console.print(
            f"servers: none of {s['count']} differs from the others beyond noise "
            f"(Mann-Whitney p < {s['alpha']:g} and |effect| >= {s['min_effect']:g}, on output "
            "tokens and thinking share)"
        )
    for o in s["odd"]:
        what = "output tokens" if o["metric"] == "output_tokens" else "thinking share"
        fmt = (lambda v: f"{v:,.0f}") if o["metric"] == "output_tokens" else _pct
        others = "—" if o["median_others"] is None else fmt(o["median_others"])
        console.print(
            f"[yellow]server differs:[/] {o['server']}: {what} median {fmt(o['median'])} vs "
            f"{others} on the others (p={o['p']:.1e}, effect {o['effect']:+.2f}, "
            f"{_n(o['rows'], 'row')})" + (" — one of a pair" if o["pair"] else "")
        )
    for note in s["notes"]:
        console.print(f"[dim]servers: {note}[/]")


def _storage_lines(doc: dict[str, Any], console: Console) -> None:
    st = doc["storage"]
    tok = st["tokens"]
    line = (
        f"storage: {_n(st['rows'], 'row')}, {tok['output']:,} output + {tok['prompt']:,} prompt "
        f"tokens; JSONL {nbytes(st['jsonl_bytes'])}, Parquet {nbytes(st['parquet_bytes'])}"
    )
    if st.get("hidden_state_bytes") is not None:
        line += f"; hidden states {nbytes(st['hidden_state_bytes'])}"
        if st.get("hidden_state_bytes_fp8") is not None:
            line += f" (FP8 {nbytes(st['hidden_state_bytes_fp8'])})"
    elif isinstance(found := (doc.get("hidden_states") or {}).get("bytes"), int):
        line += f"; hidden states {nbytes(found)} on disk (checked below)"
    else:
        line += "; hidden states: give --hidden-size and --layers-captured"
    console.print(line)
    clean = doc.get("clean")
    if clean:
        cs = clean["storage"]
        hidden = cs.get("hidden_state_bytes")
        why = ", ".join(f"{k} {v:,}" for k, v in clean["dropped_by_reason"].items() if v)
        console.print(
            f"clean copy: {_n(clean['kept'], 'row')} kept, "
            + (f"{clean['dropped']:,} dropped ({why})" if clean["dropped"] else "none dropped")
            + f" → {clean['out']}; JSONL {nbytes(cs.get('jsonl_bytes'))}"
            + (f", hidden states {nbytes(hidden)}" if hidden is not None else "")
        )
        follow, when = clean["follow_up"], clean.get("follow_up_when") or {}
        if not follow:  # nothing dropped: nothing to regenerate
            return
        head = "regenerate the dropped rows (URL: your server)"
        console.print(head + (", either:" if len(follow) > 1 else ":"))
        for n, (key, cmd) in enumerate(sorted(follow.items(), reverse=True)):
            lead = "or, " if n else ""
            if key in when:
                console.print(f"  {lead}{when[key]}:", markup=False, highlight=False)
            console.print(f"    {cmd}", soft_wrap=True, markup=False, highlight=False)


def _tool_lines(doc: dict[str, Any], console: Console) -> None:
    """Agentic rows: calls per row, and the rows whose calls need a look."""
    t = doc.get("tools")
    if not t:
        return
    per = ", ".join(f"{k}: {v:,}" for k, v in t["calls_per_row"].items())
    console.print(
        f"tool calls: {t['calls']:,} generated in {t['rows']:,} agentic rows "
        f"(rows by calls made: {per})"
    )
    console.print(
        f"  arguments not JSON: {t['bad_arguments']:,} rows; results ran out: "
        f"{t['results_ran_out']:,}; calls cut by max_tokens: {t.get('call_cut', 0):,}; "
        f"undeclared tools called: {t['undeclared']:,}; "
        f"other functions than the original: {t['names_differ']:,}"
    )
    for kind, examples in t["examples"].items():
        for ex in examples[:2]:
            console.print(f"  {kind}: {ex['id']} ({ex['file']}:{ex['line']}): {ex['detail']}")
        more = t.get(kind, len(examples)) - min(len(examples), 2)
        if more > 0:  # every one is counted above; inspect.json keeps a few more examples
            console.print(f"  {kind}: +{more:,} more (examples: tools.examples in inspect.json)")


def print_inspection(doc: dict[str, Any], console: Console) -> None:
    files = doc["source"]["files"]
    console.print(
        f"[bold]genbench inspect[/] {doc['source']['path']}: {_n(doc['rows'], 'row')} in "
        f"{_n(len(files), 'file')}"
    )
    for note in doc["source"]["notes"] + doc.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    rep = doc.get("repeated_ids") or {}
    if rep.get("rows"):  # one id in two shards: never trained on twice
        shown = ", ".join(map(str, rep["examples"][:3])) + (", ..." if rep["rows"] > 3 else "")
        console.print(
            f"[yellow]ids:[/] {_n(rep['rows'], 'row')} repeat an id read before ({shown}): "
            f"export writes the first of each; genbench merge {doc['source']['path']} "
            "names them, and with --out NEW writes a copy with every id once"
        )
    console.print(_dist_table(doc))
    if est := doc["distributions"]["overall"].get("estimated_rows"):
        console.print(
            f"  token counts estimated on {_n(est, 'row')} of {doc['rows']:,} "
            "(meta.tokens_estimated): the server sent thinking without counting it, or no "
            "usage; generate shared the tokens out by chunks, one chunk a token"
        )
    console.print(_defect_table(doc))
    dups = doc["duplicates"]
    console.print(
        f"duplicates: {dups['exact']:,} exact, {dups['near_only']:,} more up to case and "
        f"whitespace, among {dups['rows_checked']:,} answers of at least "
        f"{doc['settings']['dup_min_chars']} chars"
    )
    _server_lines(doc, console)
    fidelity_lines(doc.get("fidelity"), console)
    _tool_lines(doc, console)
    if acc := doc.get("acceptance"):
        for line in accept_lines(acc, " (each row over its turns)", "row"):
            console.print(escape(line))
    _storage_lines(doc, console)
    if integrity := doc.get("integrity"):
        console.print(escape(integrity["summary"]))
    if hs := doc.get("hidden_states"):
        off = "" if hs["off_by"] is None else f", {hs['off_by']:+.2%} from the forecast"
        console.print(escape(
            f"hidden states (layers {hs['layers']}, {hs['dtype']}, hidden {hs['hidden_size']}): "
            f"{hs['ok']:,} of {hs['turns']:,} turns fit, {hs['missing']:,} missing, "
            f"{hs['bad']:,} not fit; {nbytes(hs['bytes'])}{off}"
        ))  # fmt: skip
        for line in hs["examples"]:
            console.print(escape(f"  {line}"), style="yellow")
    if doc.get("saved"):
        console.print(f"inspect: {doc['saved']}")
