"""`genbench inspect` on a real generate job against the sim, with defects on known rows.

The sims answer a row whose prompt carries a marker word with a fault (docs/sim.md: loop,
unclosed, empty-answer, inline-think, garble, ignore-prompt); short rows ask for it with
their own max_tokens. Three sims share the job and one of them thinks and answers longer.
Every detector must find exactly the rows made bad for it (precision and recall 1.0), and
the odd server must be the only one named. The clean copy, its manifest and the documented
regeneration commands are run for real too.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from conftest import genbench

from genbench.inspect.detect import DEFECTS, Thresholds, find_loop
from genbench.inspect.distribution import Ranks, duplicates, mann_whitney, odd_servers
from genbench.sim.process import SimProcess, start_all

N = 240
MAX_TOKENS = "300"
# marker word in the prompt -> the rows that carry it
MARKED: dict[str, range] = {
    "LOOPANSWER": range(10, 18),  # loops from token 120 on: in the answer on every server
    "LOOPTHINK": range(20, 24),  # loops from token 10 on: inside the thought, never closed
    "UNCLOSED": range(30, 38),
    "EMPTY": range(40, 48),
    "INLINE": range(50, 56),  # thinking in the answer between <think> tags
    "GARBLE": range(60, 66),
    "SAME": range(70, 76),  # the prompt ignored: the same answer for different prompts
}
SHORT = range(80, 86)  # max_tokens 8 and no thinking: 8 output tokens
FAULTS = (
    "--fault", "loop:at=120,period=7,match=LOOPANSWER", "--fault", "loop:at=10,match=LOOPTHINK",
    "--fault", "unclosed:match=UNCLOSED", "--fault", "empty-answer:match=EMPTY",
    "--fault", "inline-think:match=INLINE", "--fault", "garble:at=30,match=GARBLE",
    "--fault", "ignore-prompt:match=SAME",
)  # fmt: skip
FAST = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1")
NORMAL = (*FAST, "--thinking-tokens", "24", "--output-len", "uniform:60:200")
ODD = (*FAST, "--thinking-tokens", "96", "--output-len", "uniform:150:280")


def rid(i: int) -> str:
    return f"r{i:03d}"


def ids(rows: range) -> set[str]:
    return {rid(i) for i in rows}


def prompts() -> list[dict[str, Any]]:
    marker = {i: m for m, rows in MARKED.items() for i in rows}
    out = []
    for i in range(N):
        text = f"question {i}: explain topic {i * 7 % 31} in detail {marker.get(i, '')}".strip()
        row: dict[str, Any] = {"id": rid(i), "messages": [{"role": "user", "content": text}]}
        if i in SHORT:
            row["params"] = {"max_tokens": 8, "chat_template_kwargs": {"enable_thinking": False}}
        out.append(row)
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("inspect")
    src = base / "prompts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in prompts()))
    sims = [SimProcess(*NORMAL, *FAULTS), SimProcess(*NORMAL, *FAULTS), SimProcess(*ODD, *FAULTS)]
    start_all(sims)
    try:
        out = base / "out"
        args = ["generate", "-i", str(src), "-o", str(out), "--max-tokens", MAX_TOKENS]
        urls = [a for s in sims for a in ("--url", s.url)]
        p = genbench(*args, *urls, "--concurrency", "8", "--part-size", "40KB")
        assert p.returncode == 0, p.stderr + p.stdout
        yield {"base": base, "input": src, "out": out, "odd": sims[2].url}
    finally:
        for s in sims:
            s.close()


def data_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for p in sorted(out.glob("data-*.jsonl")):
        rows += [orjson.loads(line) for line in p.read_bytes().splitlines()]
    return rows


def expected(out: Path, odd: str) -> dict[str, set[str]]:
    """The rows made bad for each detector. Duplicates: the SAME rows answered by servers
    with one configuration are copies of each other; all but the first in reading order."""
    same: dict[bool, list[str]] = {True: [], False: []}
    for row in data_rows(out):
        if row["id"] in ids(MARKED["SAME"]):
            same[row["meta"]["server"] == odd].append(row["id"])
    return {
        "loops": ids(MARKED["LOOPANSWER"]) | ids(MARKED["LOOPTHINK"]),
        "unclosed": ids(MARKED["UNCLOSED"]) | ids(MARKED["LOOPTHINK"]),
        "empty": ids(MARKED["EMPTY"]),
        "tags": ids(MARKED["INLINE"]),
        "garbled": ids(MARKED["GARBLE"]),
        "short": ids(SHORT),
        "dup": set(same[True][1:] + same[False][1:]),
    }


def found(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {name: {e["id"] for e in d["examples"]} for name, d in doc["defects"].items()}


def assert_exact(found: dict[str, set[str]], want: dict[str, set[str]]) -> None:
    """Precision and recall 1.0 for every detector, with what went wrong when not."""
    for name in DEFECTS:
        got, exp = found[name], want[name]
        precision = len(got & exp) / len(got) if got else 1.0
        recall = len(got & exp) / len(exp) if exp else 1.0
        assert (precision, recall) == (1.0, 1.0), (
            f"{name}: precision {precision:.2f} recall {recall:.2f}; "
            f"false alarms {sorted(got - exp)}, missed {sorted(exp - got)}"
        )


def inspect(*args: str) -> dict[str, Any]:
    p = genbench("inspect", *args, "--json", "--examples", "1000")
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def inspected(job) -> dict[str, Any]:
    return inspect(str(job["out"]))


# -- the sim job: every detector exact -------------------------------------------------------


def test_each_detector_finds_exactly_the_injected_rows(job, inspected) -> None:
    doc = inspected
    want = expected(job["out"], job["odd"])
    assert len(want["dup"]) >= 3  # the job did make copies to find
    assert doc["rows"] == N and doc["schema"] == "genbench.inspect" and doc["schema_version"] == 1
    assert_exact(found(doc), want)
    assert doc["rows_with_defects"] == len(set().union(*want.values()))
    assert doc["duplicates"]["exact"] == len(want["dup"]) and doc["duplicates"]["near_only"] == 0
    for e in doc["defects"]["dup"]["examples"]:
        assert "same answer as r07" in e["detail"]
    loop = next(e for e in doc["defects"]["loops"]["examples"] if e["id"] == "r010")
    assert "answer ends in a loop" in loop["detail"] and loop["file"].startswith("data-")
    thought = next(e for e in doc["defects"]["loops"]["examples"] if e["id"] == "r020")
    assert "thinking ends in a loop" in thought["detail"]
    # the rules and thresholds that were applied are in the document
    assert doc["settings"]["min_tokens"] == 16 and doc["settings"]["loop_window"] == 2000
    assert all(d["rule"] for d in doc["defects"].values())
    assert (job["out"] / "inspect.json").exists()


def test_the_odd_server_is_named_and_only_it(job, inspected) -> None:
    servers = inspected["servers"]
    named = {(o["server"], o["metric"]) for o in servers["odd"]}
    assert named == {(job["odd"], "output_tokens"), (job["odd"], "thinking_share")}, servers
    for o in servers["odd"]:
        assert o["p"] < 1e-3 and o["effect"] > 0.3 and not o["pair"]
        assert o["median"] > o["median_others"]
    by_server = inspected["distributions"]["by_server"]
    assert set(by_server) == {o["server"] for o in servers["tests"]["output_tokens"]}
    assert sum(g["rows"] for g in by_server.values()) == N
    assert set(inspected["distributions"]["by_finish_reason"]) == {"stop", "length"}


def test_distributions_and_storage_come_from_the_rows(job, inspected) -> None:
    rows = data_rows(job["out"])
    comp = np.array([r["meta"]["completion_tokens"] for r in rows])
    prompt = sum(r["meta"]["prompt_tokens"] for r in rows)
    out = inspected["distributions"]["overall"]["output_tokens"]
    assert out["p50"] == np.percentile(comp, 50) and out["max"] == comp.max()
    assert out["mean"] == pytest.approx(comp.mean()) and len(out["cdf"]) == 51
    st = inspected["storage"]
    size = sum(p.stat().st_size for p in job["out"].glob("data-*.jsonl"))
    assert st["jsonl_bytes"] == pytest.approx(size)
    assert st["tokens"] == {"output": int(comp.sum()), "prompt": prompt,
                            "hidden_state": int(comp.sum()) + prompt}  # fmt: skip
    assert st["hidden_state_bytes"] is None and st["parquet_bytes"] > 0
    with_hidden = inspect(str(job["out"]), "--hidden-size", "4096", "--layers-captured", "3",
                          "--save", str(job["base"] / "h.json"))  # fmt: skip
    # plan's arithmetic: tokens x hidden size x layers x bytes per value
    assert with_hidden["storage"]["hidden_state_bytes"] == (comp.sum() + prompt) * 4096 * 3 * 2
    # and in FP8 (hs-connectors' files): a byte a value and a 4-byte scale a token
    fp8 = with_hidden["storage"]["hidden_state_bytes_fp8"]
    assert fp8 == (comp.sum() + prompt) * (4096 * 3 + 4)


def test_thresholds_are_flags(job) -> None:
    doc = inspect(str(job["out"]), "--min-tokens", "70", "--loop-cover", "0.95",
                  "--tags", "<nothing>", "--save", str(job["base"] / "t.json"))  # fmt: skip
    comp = {r["id"]: r["meta"]["completion_tokens"] for r in data_rows(job["out"])}
    assert found(doc)["short"] == {k for k, v in comp.items() if v < 70}
    assert found(doc)["tags"] == set()
    # the answer loops cover ~1,000 of ~1,500 chars: not 95%; the thought loops cover all
    assert found(doc)["loops"] == ids(MARKED["LOOPTHINK"])
    assert doc["settings"]["loop_cover"] == 0.95


# -- the clean copy and the follow-up --------------------------------------------------------


@pytest.fixture(scope="module")
def cleaned(job) -> dict[str, Any]:
    clean = job["base"] / "clean"
    before = {p: p.read_bytes() for p in job["out"].glob("data-*")}
    doc = inspect(str(job["out"]), "--drop", "all", "--out", str(clean),
                  "--save", str(job["base"] / "drop.json"))  # fmt: skip
    assert {p: p.read_bytes() for p in job["out"].glob("data-*")} == before  # never changed
    return {"clean": clean, "doc": doc}


def test_drop_writes_a_filtered_copy_and_why(job, cleaned) -> None:
    clean, doc = cleaned["clean"], cleaned["doc"]
    want = expected(job["out"], job["odd"])
    bad = set().union(*want.values())
    manifest = [orjson.loads(line) for line in (clean / "dropped.jsonl").read_bytes().splitlines()]
    assert {m["id"] for m in manifest} == bad
    by_reason = {d: {m["id"] for m in manifest if d in m["reasons"]} for d in DEFECTS}
    assert_exact(by_reason, want)
    for m in manifest:
        assert (m.get("dup_of") in ids(MARKED["SAME"])) == ("dup" in m["reasons"])
    kept = data_rows(clean)
    assert {r["id"] for r in kept} == {rid(i) for i in range(N)} - bad
    # kept rows are the original lines, byte for byte, in the same files
    original = {
        line for p in job["out"].glob("data-*.jsonl") for line in p.read_bytes().splitlines()
    }
    assert all(orjson.dumps(r) in original for r in kept)
    assert {p.name for p in clean.glob("data-*")} <= {p.name for p in job["out"].glob("data-*")}
    info = json.loads((clean / "manifest.json").read_text())
    assert info["schema"] == "genbench.clean" and info["dropped"] == len(bad)
    assert info["kept"] == len(kept) and info["drop"] == list(DEFECTS)
    assert doc["clean"]["kept"] == len(kept) and doc["clean"]["storage"]["rows"] == len(kept)
    regen = [orjson.loads(x) for x in (clean / "regenerate.jsonl").read_bytes().splitlines()]
    assert [r["id"] for r in regen] == [m["id"] for m in manifest]
    assert (clean / ".genbench" / "job.json").exists()


def test_follow_up_commands_regenerate_the_dropped_rows(job, cleaned) -> None:
    clean = cleaned["clean"]
    follow = cleaned["doc"]["clean"]["follow_up"]
    assert str(job["input"]) in follow["resume_into_copy"]
    dropped = {orjson.loads(x)["id"] for x in (clean / "dropped.jsonl").read_bytes().splitlines()}
    assert set(cleaned["doc"]["clean"]["follow_up_when"]) == set(follow)  # when each fits
    regen = job["base"] / "regen"

    def run(cmd: str, url: str) -> None:
        """A printed command, run as printed: the job's settings in it, URL filled in."""
        assert cmd.startswith("genbench generate ") and f"--max-tokens {MAX_TOKENS}" in cmd
        args = shlex.split(
            cmd.replace("REGEN_DIR", str(regen)).replace("--url URL", f"--url {url}")
        )
        p = genbench(*args[1:])
        assert p.returncode == 0, p.stderr + p.stdout

    with SimProcess(*NORMAL) as healthy:  # no faults: what a retry on a good server gives
        # 1. the dropped rows alone, from regenerate.jsonl, into a new directory
        run(follow["regenerate"], healthy.url)
        assert {r["id"] for r in data_rows(regen)} == dropped
        # 2. the original command, resumed into the copy: exactly the dropped rows are made
        run(follow["resume_into_copy"], healthy.url)
    rows = data_rows(clean)
    assert sorted(r["id"] for r in rows) == sorted(rid(i) for i in range(N))
    doc = inspect(str(clean))
    # the short rows asked for 8 tokens: they are short again; nothing else is wrong
    assert {k: v for k, v in found(doc).items() if v} == {"short": ids(SHORT)}


def test_parquet_output_gives_the_same_findings_and_clean_copy(job, inspected) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from genbench.rows import convert_to_parquet

    pdir = job["base"] / "parquet"
    pdir.mkdir()
    for p in sorted(job["out"].glob("data-*.jsonl")):  # generate's own conversion
        convert_to_parquet(str(p), str(pdir / (p.stem + ".parquet")))
    doc = inspect(str(pdir))
    assert found(doc) == found(inspected)
    assert doc["distributions"]["overall"] == inspected["distributions"]["overall"]
    assert {o["server"] for o in doc["servers"]["odd"]} == {job["odd"]}
    size = sum(p.stat().st_size for p in pdir.glob("*.parquet"))
    assert doc["storage"]["parquet_bytes"] == pytest.approx(size)
    # the rows' JSONL bytes as their lines weigh, not with the nulls Parquet's schema adds
    assert doc["storage"]["jsonl_bytes"] == pytest.approx(inspected["storage"]["jsonl_bytes"],
                                                          rel=0.01)  # fmt: skip

    clean = job["base"] / "parquet-clean"
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    doc = inspect(str(pdir), "--drop", "loops,dup", "--out", str(clean))
    # a copy writes only under the copy: the original's files, its inspect.json too, as
    # they were
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before
    assert doc["saved"] == str(clean / "inspect.json") and (clean / "inspect.json").exists()
    gone = found(doc)["loops"] | found(doc)["dup"]
    tables = [pq.read_table(p) for p in sorted(clean.glob("*.parquet"))]
    assert all(t.schema == pq.read_schema(next(pdir.glob("*.parquet"))) for t in tables)
    kept = {i for t in tables for i in t.column("id").to_pylist()}
    assert kept == {rid(i) for i in range(N)} - gone
    manifest = [orjson.loads(x) for x in (clean / "dropped.jsonl").read_bytes().splitlines()]
    assert {m["id"] for m in manifest} == gone and all("row" in m for m in manifest)


# -- bad input: one line, exit code 2 --------------------------------------------------------


def row(i: int, **meta: Any) -> dict[str, Any]:
    return {
        "id": f"x{i}",
        "conversations": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": f"answer number {i} " * 5, "reasoning_content": ""},
        ],
        "meta": {"server": "s", "completion_tokens": 40, "reasoning_tokens": 0,
                 "prompt_tokens": 5, "finish_reason": "stop", "truncated": False, **meta},
    }  # fmt: skip


def lines(*rows: Any) -> bytes:
    return b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (lines(row(1), b'{"id": "x2", "conv', row(3)),
         "bad.jsonl, line 2: not valid JSON (unexpected end of data at column 19)"),
        (lines(row(1), row(2), {**row(3), "meta": {"finish_reason": "stop"}}),
         "bad.jsonl, line 3: field 'meta.completion_tokens': missing: generate writes it for "
         "every row"),
        (lines({k: v for k, v in row(1).items() if k != "meta"}),
         "bad.jsonl, line 1: field 'meta': missing or not an object (generate's per-row "
         "metadata)"),
        (lines(row(1, completion_tokens="many")),
         "bad.jsonl, line 1: field 'meta.completion_tokens': expected a count (an integer >= "
         "0), got 'many'"),
        (lines({"id": "x", "conversations": [{"role": "user", "content": "q"}], "meta": {}}),
         "bad.jsonl, line 1: field 'conversations': no assistant turn: not a generated row"),
        (lines(row(1)) + b"\xff\xfe\n",
         "bad.jsonl, line 2: not UTF-8 text (byte 0xff at column 1)"),
    ],
)  # fmt: skip
def test_bad_rows_are_one_line_errors(tmp_path, capsys, content: bytes, message: str) -> None:
    (tmp_path / "bad.jsonl").write_bytes(content)
    code, out, err = cli(capsys, "inspect", str(tmp_path / "bad.jsonl"))
    assert code == 2 and err == f"genbench: error: {tmp_path}/{message}\n", err
    assert "Traceback" not in err


def test_an_incomplete_last_line_is_skipped_and_said(tmp_path, capsys) -> None:
    d = tmp_path / "out"
    d.mkdir()
    (d / "data-00000.jsonl").write_bytes(lines(row(1), row(2)) + orjson.dumps(row(3))[:50])
    code, out, err = cli(capsys, "inspect", str(d), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["rows"] == 2
    assert "line 3: incomplete last line" in doc["source"]["notes"][0]


def test_bad_paths_and_flags(tmp_path, capsys) -> None:
    d = tmp_path / "out"
    d.mkdir()
    (d / "data-00000.jsonl").write_bytes(lines(row(1), row(2)))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    cases = [
        (["inspect", str(tmp_path / "nope")], "no such file or directory"),
        (["inspect", str(tmp_path / "full")], "no data files"),
        (["inspect", str(d), "--drop", "loops"], "--drop needs --out"),
        (["inspect", str(d), "--drop", "loops", "--out", str(d / "c")], "inside the set"),
        (["inspect", str(d), "--drop", "loops", "--out", str(tmp_path / "full")], "not an empty"),
        (["inspect", str(d), "--drop", "loop"], "expected a comma-separated list of loops"),
        (["inspect", str(d), "--loop-cover", "2"], "--loop-cover must be in (0, 1]"),
        (["inspect", str(d), "--hidden-size", "8"], "needs both --hidden-size and --layers"),
    ]
    for args, text in cases:
        code, _, err = cli(capsys, *args)
        assert code == 2 and text in err and err.count("\n") == 1, (args, err)
    assert sorted(p.name for p in d.iterdir()) == ["data-00000.jsonl"]  # nothing written


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from genbench.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    cap = capsys.readouterr()
    return int(e.value.code or 0), cap.out, cap.err


# -- the rules, on their own -----------------------------------------------------------------

WORDS = ["the", "of", "and", "to", "in", "is", "that", "it", "for", "on", "with", "as", "was",
         "by", "at", "be", "this", "from", "or", "an"]  # fmt: skip


def natural(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


UNITS = ["\n", "ab", " and so on,", " I think the answer is 42. " * 3,
         " Wait, let me reconsider the problem from the start." * 8]  # fmt: skip


@pytest.mark.parametrize("unit", UNITS)
def test_a_text_ending_in_a_loop_is_found_with_its_period(unit: str) -> None:
    text = natural(300) + unit * (3000 // len(unit) + 3)
    loop = find_loop(text, Thresholds())
    assert loop is not None and loop.window == 2000
    assert len(unit) % loop.period == 0
    assert loop.covered == 2000


def test_natural_text_and_short_or_weak_repetition_are_not_loops() -> None:
    th = Thresholds()
    for seed in range(20):
        assert find_loop(natural(3000, seed), th) is None
    assert find_loop("ha " * 15, th) is None  # 45 chars: under the 64-char floor
    # covers 40% of the window: not enough by default, enough with --loop-cover 0.3
    text = natural(600) + " and again" * 80
    assert find_loop(text, th) is None
    assert find_loop(text, Thresholds(loop_cover=0.3)) is not None
    # two repeats of a long unit are a quotation, not a loop (--loop-repeats 3)
    unit = natural(150, 7)
    assert find_loop(natural(100) + unit + unit, Thresholds(loop_cover=0.2)) is None


def test_mann_whitney_matches_a_brute_force_count() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 30, 60).astype(float)  # ties on purpose
    b = rng.integers(5, 40, 80).astype(float)
    pooled = np.r_[a, b]
    mask = np.r_[np.ones(60, bool), np.zeros(80, bool)]
    t = mann_whitney(Ranks.of(pooled), mask)
    assert t is not None
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    assert t["u"] == pytest.approx(u) and t["effect"] == pytest.approx(2 * u / (60 * 80) - 1)
    # the tie-corrected variance, by the textbook formula
    _, counts = np.unique(pooled, return_counts=True)
    n = 140
    var = 60 * 80 / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1)))
    z = (u - 2400 + 0.5) / np.sqrt(var)
    assert t["z"] == pytest.approx(z) and t["p"] < 1e-3
    same = mann_whitney(Ranks.of(rng.normal(size=400)), np.arange(400) < 200)
    assert same is not None and same["p"] > 0.001


def test_odd_servers_are_named_in_rounds() -> None:
    rng = np.random.default_rng(2)
    values = np.r_[rng.lognormal(5, 0.5, 300), rng.lognormal(5, 0.5, 300),
                   rng.lognormal(5.6, 0.5, 300)]  # fmt: skip
    server = np.repeat(np.arange(3), 300)
    first, named = odd_servers(values, server, ["a", "b", "c"], 1e-3, 0.1)
    assert [t["server"] for t in named] == ["c"]
    # in the first round the normal ones differ from "the rest" too: it holds c
    assert all(t["differs"] for t in first)
    _, pair = odd_servers(values[300:], server[300:] - 1, ["b", "c"], 1e-3, 0.1)
    assert {t["server"] for t in pair} == {"b", "c"} and all(t["pair"] for t in pair)
    # a tiny effect on many rows is significant, and still not named
    big = np.r_[rng.normal(0, 1, 500_000), rng.normal(0.02, 1, 500_000)]
    first, none = odd_servers(big, np.repeat([0, 1], 500_000), ["x", "y"], 1e-3, 0.1)
    assert first[0]["p"] < 1e-6 and abs(first[0]["effect"]) < 0.02 and none == []


def test_duplicates_keep_the_first_row() -> None:
    keys = np.array([5, 7, 5, 9, 7, 5, 1], dtype=np.int64)
    present = np.array([1, 1, 1, 1, 1, 1, 0], dtype=bool)
    dup, first = duplicates(keys, present)
    assert dup.tolist() == [False, False, True, False, True, True, False]
    assert first.tolist() == [-1, -1, 0, -1, 1, 0, -1]


# -- the report --------------------------------------------------------------------------------


def test_report_has_the_inspection_and_renders_in_a_browser(job, inspected, tmp_path) -> None:
    from test_report import browse, chromium, plot_ids

    page = tmp_path / "page.html"
    p = genbench("report", str(job["out"]), "-o", str(page))
    assert p.returncode == 0, p.stderr + p.stdout
    html = page.read_text()
    figs = {f for f in plot_ids(html) if f.startswith("inspect_")}
    kinds = sorted(f.split("_0_")[0] for f in figs)
    assert kinds == ["inspect_defects", "inspect_output_tokens", "inspect_thinking_share"]
    assert job["odd"] in html and "differs" in html
    # the report lists each defect's first examples, in the order the job wrote the rows
    doc = orjson.loads((job["out"] / "inspect.json").read_bytes())
    first = doc["defects"]["loops"]["examples"][0]["id"]
    assert first in html and "Clean copy" not in html
    if chromium() is None:
        if os.environ.get("GENBENCH_SKIP_BROWSER") == "1":
            pytest.skip("GENBENCH_SKIP_BROWSER=1 and no chromium")
        pytest.fail("no chromium on PATH: apt-get install chromium (or GENBENCH_SKIP_BROWSER=1)")
    shot = tmp_path / "inspect.png"
    seen = asyncio.run(browse(page, shot, tmp_path / "chromium-profile"))
    urls = [e["params"]["request"]["url"] for e in seen["events"]
            if e["method"] == "Network.requestWillBeSent"]  # fmt: skip
    assert urls == [page.as_uri()]
    problems = [e for e in seen["events"] if e["method"] in ("Runtime.exceptionThrown",
                "Network.loadingFailed")]  # fmt: skip
    assert not problems, problems
    # the directory is a generate output too: its job is drawn beside (tests/test_job_report.py)
    plots = {p["id"]: p for p in seen["plots"] if not p["id"].startswith("job_")}
    assert set(plots) == figs
    for fig, p in plots.items():
        assert p["w"] > 300 and p["h"] > 100, (fig, p)
        assert p["marks"] > 0 and p["drawn"] == p["marks"] and not p["empty"], (fig, p)
    assert seen["height"] > 1200 and shot.stat().st_size > 60_000
    shutil.copy(shot, job["base"] / "inspect-report.png")
    print(f"screenshot: {shot}")
