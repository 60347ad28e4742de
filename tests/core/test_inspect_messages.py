"""What inspect and export say about a file they cannot read, and how inspect's console
counts: a Batch-shape output named as one, a garbled shard line with the way to repair
it, unchecked ids apart from token-exact ones, one turn numbering with export's."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from rich.console import Console
from test_export_rows import IDS, gen, row, user

from genbench.errors import UsageError
from genbench.export import Rules, export_data
from genbench.inspect import Settings, inspect_data
from genbench.inspect.clean import parse_drop
from genbench.inspect.detect import Thresholds, examine
from genbench.inspect.fidelity import Fidelity
from genbench.inspect.render import print_inspection
from genbench.rows import parse_row

pytestmark = pytest.mark.core

BATCH_LINE = {
    "id": "batch_req_1",
    "custom_id": "b0",
    "response": {"status_code": 200, "request_id": "genbench-b0", "body": {"choices": []}},
    "error": None,
}


def job_dir(tmp_path: Path, lines: list[bytes], state: bool = True) -> Path:
    d = tmp_path / "out"
    d.mkdir(parents=True)
    if state:
        (d / ".genbench").mkdir()  # what generate leaves in every output directory
    (d / "data-00000.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    return d


def good(rid: str) -> bytes:
    return orjson.dumps(row(rid, [user("a"), gen("A", [1, 2], IDS)]))


def test_a_batch_output_is_named_with_the_way_on(tmp_path) -> None:
    d = job_dir(tmp_path, [orjson.dumps(BATCH_LINE)])
    for read in (
        lambda: inspect_data(d, Settings()),
        lambda: export_data(d, "specforge", tmp_path / "t.jsonl", Rules()),
    ):
        with pytest.raises(UsageError) as e:
            read()
        msg = str(e.value)
        assert "a Batch output (genbench generate --answers batch)" in msg
        assert "--answers both" in msg and "conversations" not in msg.split(":")[0]
        assert "field 'conversations'" not in msg and "\n" not in msg


@pytest.mark.parametrize(
    "bad", [b'{"id": "x", "conversations": [', b"\xff\xfe not text", b'{"no": "id"}']
)
def test_a_garbled_shard_line_says_generate_repairs_it(tmp_path, bad: bytes) -> None:
    d = job_dir(tmp_path, [good("a"), bad, good("b")])
    with pytest.raises(UsageError) as e:
        inspect_data(d, Settings())
    msg = str(e.value)
    assert "data-00000.jsonl, line 2" in msg
    assert f"genbench generate with --out {d} repairs it" in msg
    assert "quarantine.jsonl" in msg and "generated again" in msg
    with pytest.raises(UsageError, match="repairs it"):
        export_data(d, "specforge", tmp_path / "t.jsonl", Rules())


def test_no_repair_hint_where_generate_cannot_repair(tmp_path) -> None:
    d = job_dir(tmp_path, [good("a"), b"{not json", good("b")], state=False)
    with pytest.raises(UsageError) as e:
        inspect_data(d, Settings())
    assert "not valid JSON" in str(e.value) and "repairs" not in str(e.value)
    bad_field = orjson.dumps({"id": "x", "conversations": "no", "meta": {}})
    d2 = job_dir(tmp_path / "2", [bad_field])
    with pytest.raises(UsageError) as e:
        inspect_data(d2, Settings())
    assert "field 'conversations'" in str(e.value) and "repairs" not in str(e.value)


def test_unchecked_ids_are_their_own_count_never_token_exact() -> None:
    f = Fidelity(16)
    f.add(row("e", [user("a"), gen("A", [1, 2], IDS)], token_ids="exact"))
    f.add(row("u", [user("b"), gen("B", [1, 2], IDS)], token_ids="unchecked"))
    d = f.describe()
    assert (d["rows_token_exact"], d["rows_unchecked"], d["rows_not_token_exact"]) == (1, 1, 1)
    assert (d["turns_token_exact"], d["turns_unchecked"]) == (1, 1)
    assert f.with_ids == 2  # an unchecked turn's ids can still be round-tripped (--url)
    con = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    from genbench.inspect.fidelity import fidelity_lines

    fidelity_lines(d, con)
    line = con.export_text()
    assert "1 of 2 rows token-exact, 1 unchecked (ids kept, but the server sent no usage" in line
    assert "1 exact, 1 unchecked," in line


def test_an_http_status_is_said_once() -> None:
    from genbench.inspect.fidelity import _status_line

    assert _status_line(404, b"404: Not Found") == "HTTP 404: Not Found"
    assert _status_line(404, b'{"detail": "Not Found"}') == "HTTP 404: Not Found"
    assert _status_line(500, b"") == "HTTP 500"


def test_a_turn_is_numbered_as_export_numbers_its_sample() -> None:
    obj = row(
        "m0",
        [user("q1"), gen("", [1], IDS, finish="length", thinking="hm"), user("q2"),
         gen("\ufffd", [1], IDS)],
    )  # fmt: skip
    _, details = examine(parse_row(obj, 10), Thresholds())
    got = dict(details)
    assert got["unclosed"].startswith("turn #1: ") and got["garbled"].startswith("turn #3: ")
    assert got["garbled"].endswith("1 U+FFFD replacement char")
    export_ids = {"m0#1", "m0#3"}  # export's ROW#TURN for the same two turns
    assert {f"m0#{v.split('#')[1].split(':')[0]}" for v in got.values()} == export_ids


def test_the_console_says_how_many_more_tool_examples_and_labels_once(tmp_path) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    rows = []
    for i in range(3):
        turn = {**gen("", [1], IDS), "tool_calls": [call]}
        r = row(f"t{i}", [user("u"), turn], tool_calls=1, tool_results_ran_out=True)
        rows.append(orjson.dumps(r))
    rows.append(orjson.dumps(row("g", [user("u"), gen("bad \ufffd", [1], IDS)])))
    d = job_dir(tmp_path, rows)
    doc = inspect_data(d, Settings())
    con = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_inspection(doc, con)
    text = con.export_text()
    assert "results_ran_out: +1 more" in text
    assert "the results ran out after 1 call" in text and "after 1 calls" not in text
    assert "U+FFFD replacement characters (garbled)" in text and "(garbled text)" not in text


def test_one_row_is_said_in_the_singular(tmp_path) -> None:
    d = job_dir(tmp_path, [good("a")])
    doc = inspect_data(d, Settings())
    con = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_inspection(doc, con)
    text = con.export_text()
    assert ": 1 row in 1 file" in text and "of 1 row have" in text
    assert "storage: 1 row," in text and "token ids: 1 of 1 row token-exact" in text
    assert "1 rows" not in text


def test_a_drop_name_given_twice_is_one_rule():
    """The kept rows' mask sums the names' bits: a name twice would be another bit."""
    assert parse_drop("loops, loops,dup,loops") == ["loops", "dup"]


def test_an_engine_started_on_a_new_port_each_run_is_one_server(tmp_path) -> None:
    # a --serve job run twice: its one engine listened on another port the second time
    urls = [f"http://127.0.0.1:{8001 + i % 2}/v1" for i in range(6)]
    lines = [orjson.dumps(row(f"r{i}", [user("a"), gen("A", [1], IDS)], server=u))
             for i, u in enumerate(urls)]  # fmt: skip
    d = job_dir(tmp_path, lines)
    events = [{"engine": "engine 1", "url": f"http://127.0.0.1:{p}/v1", "event": "start"}
              for p in (8001, 8002)]  # fmt: skip
    (d / ".genbench" / "engines.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n"
                                                             for e in events))  # fmt: skip
    doc = inspect_data(d, Settings(), save=tmp_path / "i.json")
    assert doc["servers"]["count"] == 1, doc["servers"]


def test_the_storage_line_names_the_states_found_and_asks_only_where_there_are_none() -> None:
    """With states on disk the storage line gives their bytes; it asks for --hidden-size
    and --layers-captured only where there is nothing to count."""
    from io import StringIO

    from genbench.inspect.render import _storage_lines

    st = {"rows": 2, "tokens": {"output": 10, "prompt": 20}, "jsonl_bytes": 1000,
          "parquet_bytes": 500}  # fmt: skip
    said = []
    for doc in ({"storage": st, "hidden_states": {"bytes": 4_104_000}}, {"storage": st}):
        buf = StringIO()
        _storage_lines(doc, Console(file=buf, width=200))
        said.append(buf.getvalue())
    assert "hidden states 4.10 MB on disk" in said[0] and "give --hidden-size" not in said[0]
    assert "hidden states: give --hidden-size and --layers-captured" in said[1]


def test_a_clean_copy_that_dropped_nothing_names_no_regenerate_command(tmp_path) -> None:
    """Nothing dropped: regenerate.jsonl is empty, and generate refuses an empty input, so
    inspect must not print the commands (it printed two, one failing with exit 2)."""
    d = job_dir(tmp_path, [good("a"), good("b")])
    doc = inspect_data(d, Settings(), drop=["loops"], out=tmp_path / "clean")
    assert doc["clean"]["dropped"] == 0
    con = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_inspection(doc, con)
    text = con.export_text()
    assert "clean copy: 2 rows kept, none dropped" in text
    assert "regenerate" not in text and "()" not in text


def test_a_stopped_parquet_jobs_open_part_is_named_with_how_to_finish_it(tmp_path) -> None:
    """A --format parquet job stopped mid-way keeps the part it was writing as JSONL (its
    resume appends to it): inspect and the stop message say so, and how to finish it."""
    from genbench.generate.outcome import JobResult
    from genbench.generate.render import print_result
    from genbench.generate.store.jobfile import unconverted

    d = job_dir(tmp_path, [good("a"), good("b")])
    (d / ".genbench" / "job.json").write_bytes(orjson.dumps({"format": "jsonl"}))
    assert unconverted(d) == []  # a JSONL job's parts are what it makes
    assert "stays JSONL" not in " ".join(inspect_data(d, Settings()).get("notes", []))
    (d / ".genbench" / "job.json").write_bytes(orjson.dumps({"format": "parquet"}))
    (d / ".genbench" / "job-1of2.json").write_bytes(orjson.dumps({"format": "parquet"}))
    (d / "data-1of2-00000.jsonl").write_bytes(good("c") + b"\n")
    assert unconverted(d) == [d / "data-00000.jsonl", d / "data-1of2-00000.jsonl"]
    said = (
        "data-00000.jsonl, data-1of2-00000.jsonl stay JSONL until the --format parquet job "
        "resumes or finishes (a stop converts nothing, so the resume appends to them): rerun "
        "the same genbench generate command to finish the job; with every row done, that run "
        "only converts them to Parquet"
    )
    assert said in inspect_data(d, Settings())["notes"]
    console = Console(record=True, width=1000, file=io.StringIO())
    print_result(JobResult("interrupted", files=[str(d / "data-00000.jsonl")],
                           unconverted=[str(d / "data-00000.jsonl")]), console)  # fmt: skip
    text = console.export_text()
    assert "rerun the same command to resume" in text
    assert "data-00000.jsonl stays JSONL until the --format parquet job resumes" in text
