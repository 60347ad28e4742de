"""What keeping token ids costs the client per chunk, against today's client, in one run.

Issue #26's bar: keeping the ids (vLLM's `return_token_ids`: the prompt's in the first
chunk, each chunk's in its choice) costs at most 15% more client CPU per chunk at 1,024
streams than the client before ids existed. Three clients, alternating within each round
against the same stamp server (benchmarks/stamp_server.py: never the bottleneck, sends
ids only to a request that asks):

  genbench@BASE   the client at --baseline-rev (before ids; its own worker, from a copy)
                  on today's stream, without ids
  genbench        this revision, no ids asked (what ids cost a job that keeps none)
  genbench+ids    this revision asking for ids and keeping them, on a stream that has them

CPU is each worker process's user+sys time over the measured phase (getrusage), so the
ratio does not depend on what else the machine runs; the load average is printed beside.
Two servers: `bulk` (a whole response per write: many SSE messages per read, the
client's per-message cost) and `tokens` (a decode loop, one message per write and read,
as a real server streams).

    .venv/bin/python benchmarks/token_ids_cost.py --baseline-rev 21b7e51
    .venv/bin/python benchmarks/token_ids_cost.py --baseline-rev 21b7e51 --rounds 5 \
        --only tokens --tps 10
    .venv/bin/python benchmarks/token_ids_cost.py --only parser --rounds 7   # in process

Results: a table on stdout and JSON in benchmarks/results/ (benchmarks/README.md,
"Token ids").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling_report import loadavg  # noqa: E402
from ceiling_servers import StampServer  # noqa: E402
from client_ceiling import extract_baseline, measure_again  # noqa: E402


def point(
    mode: str, clients: list[str], a: argparse.Namespace, rounds: int
) -> list[dict[str, Any]]:
    """Every client once per round, in an order that alternates, on one server."""
    args = ["--mode", mode, "--tps", str(a.tps)] if mode == "tokens" else ["--mode", "bulk"]
    rows = []
    with StampServer(*args) as srv:
        for k in range(rounds):
            order = clients if k % 2 == 0 else clients[::-1]
            for client in order:
                n = a.requests if mode == "bulk" else a.concurrency
                r = measure_again(client, srv.url, a.concurrency, n, a.tokens)
                chunks = max(1, r.get("chunks", 0))
                row = {
                    "mode": mode, "round": k, "client": client.split("@")[0] + (
                        "@base" if "@" in client else ""),
                    "rev": client, "concurrency": a.concurrency, "requests": r.get("ok"),
                    "failed": r.get("failed"), "chunks": chunks,
                    "ids_kept": r.get("ids_kept"), "cpu_s": r["cpu_s"],
                    "us_per_chunk": 1e6 * r["cpu_s"] / chunks,
                    "chunks_per_s": chunks / r["wall_s"], "load": r.get("loadavg"),
                }  # fmt: skip
                rows.append(row)
                print(
                    f"  {mode} round {k} {row['client']:<14} {row['us_per_chunk']:6.2f} us/chunk "
                    f"{row['chunks_per_s']:9,.0f} chunks/s  ids kept {row['ids_kept']}  "
                    f"failed {row['failed']}  load {row['load']}",
                    flush=True,
                )
    return rows


def parser(rounds: int, n: int = 300) -> list[str]:
    """`StreamParser` alone, in this process, one SSE message per `feed` (as a real
    server's reads come): µs a chunk without ids, with ids in the bytes but not kept,
    and kept; the modes alternating round by round."""
    from stamp_server import Render

    from genbench.records import RequestRecord
    from genbench.transport.stream import StreamParser
    from genbench.transport.token_ids import Ids

    render = Render("stamp", 0)
    plain, with_ids = render.messages(256, True), render.messages(256, True, ids=True)
    modes = {"plain": (plain, False), "ids in the bytes": (with_ids, False),
             "ids kept": (with_ids, True)}  # fmt: skip
    got: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode, (msgs, keep) in modes.items():
            t = time.process_time()
            for _ in range(n):
                p = StreamParser(RequestRecord(id="x"), 0.0, False, ids=Ids() if keep else None)
                for m in msgs:
                    p.feed(m, 0.1)
                p.finish()
            got[mode].append(1e6 * (time.process_time() - t) / (n * len(msgs)))
    return [f"parser: {m}: {statistics.median(v):.3f} us/chunk" for m, v in got.items()]


def summary(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| server | client | CPU us/chunk (median) | rounds | × base | load |",
           "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for mode in dict.fromkeys(r["mode"] for r in rows):
        here = [r for r in rows if r["mode"] == mode]
        med = {c: statistics.median(r["us_per_chunk"] for r in here if r["client"] == c)
               for c in dict.fromkeys(r["client"] for r in here)}  # fmt: skip
        base = med.get("genbench@base")
        loads = [float(r["load"][0]) for r in here if r.get("load")]
        span = f"{min(loads):.1f}–{max(loads):.1f}" if loads else ""
        for c, v in med.items():
            n = sum(r["client"] == c for r in here)
            ratio = f"{v / base:.3f}" if base else ""
            out.append(f"| {mode} | {c} | {v:.2f} | {n} | {ratio} | {span} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline-rev", help="the revision before token ids (bulk, tokens)")
    p.add_argument("--concurrency", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=256, help="tokens (chunks) per response")
    p.add_argument("--requests", type=int, default=2048, help="requests per bulk measurement")
    p.add_argument("--tps", type=float, default=10.0, help="stamp server chunks/s per stream")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="bulk,tokens")
    a = p.parse_args()
    if a.only == "parser":
        print("\n".join(parser(a.rounds)) + f"\nload {loadavg()}")
        return
    if not a.baseline_rev:
        p.error("--baseline-rev is required for bulk and tokens")
    tmp = Path(tempfile.mkdtemp(prefix="gb-ids-cost-"))
    base = extract_baseline(a.baseline_rev, tmp)
    clients = [base, "genbench", "genbench+ids"]
    print(f"token ids cost at C={a.concurrency}, {a.tokens} tokens a response; load {loadavg()}")
    rows = []
    for mode in a.only.split(","):
        rows += point(mode, clients, a, a.rounds)
    table = summary(rows)
    print("\n".join(table))
    res = HERE / "results" / f"token_ids_cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    res.parent.mkdir(exist_ok=True)
    res.write_text(json.dumps({"args": vars(a), "rows": rows, "table": table}, indent=1))
    print(f"→ {res}")


if __name__ == "__main__":
    main()
