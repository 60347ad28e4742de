"""Speculative acceptance per request, end to end against the sim, in both dialects: the
values are exact (--spec-k 4, acceptance 1 for one prompt group and 0 for the other), and
pool to the server's own /metrics counters exactly (docs/acceptance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from conftest import genbench

from genbench.records import read_records

# --spec-k 4: a request of 33 tokens is its first token and 8 verify steps
# accepting 3 drafts each (length 4) or none (32 steps, length 1)
SIM = ("--tps", "2000", "--ttft-ms", "2", "--per-seq-ms", "0.01", "--spec-k", "4",
       "--spec-accept-match", "translate:0")  # fmt: skip
CODE = {"requests": 2, "length": 4.0, "p10": 4.0, "p50": 4.0, "p90": 4.0}
TRANSLATE = {"requests": 2, "length": 1.0, "p10": 1.0, "p50": 1.0, "p90": 1.0}


def workload(tmp_path: Path) -> Path:
    def row(i: str, field: str, group: str, text: str) -> dict:
        return {"id": i, field: group, "messages": [{"role": "user", "content": text}]}

    rows = [row("c1", "group", "code", "code a sort"),
            row("t1", "category", "translate", "translate cat"),
            row("c2", "group", "code", "code a map"),
            row("t2", "category", "translate", "translate dog")]  # fmt: skip
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def run(sim_url: str, tmp_path: Path, *extra: str, name: str = "run") -> dict:
    out = tmp_path / name
    wl = tmp_path / "prompts.jsonl"
    wl = wl if wl.exists() else workload(tmp_path)
    res = genbench("run", "--url", sim_url, "--workload", str(wl), "--lengths",
                   "33", "--prompts-per-length", "4", "--skip", "warmup,sweep", "-o", str(out),
                   *extra)  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    doc = json.loads((out / "result.json").read_text())
    doc["_stdout"] = res.stdout
    doc["_records"] = read_records(out / "requests.jsonl")
    return doc


@pytest.mark.parametrize(
    ("flags", "src"),
    [(("--dialect", "sglang"), "sglang"),
     (("--per-request-spec-decode-metrics", "summary"), "vllm")],
    ids=["sglang", "vllm"],
)  # fmt: skip
def test_run_shows_each_groups_distribution_exactly(sim_factory, tmp_path, flags, src):
    sim = sim_factory(*SIM, *flags)
    doc = run(sim.url, tmp_path)
    (phase,) = doc["phases"]
    acc = phase["summary"]["acceptance"]
    # 2 x 8 steps accepting 3 drafts, 2 x 32 accepting none: 48 accepted in 80 steps
    assert (acc["src"], acc["steps"], acc["accepted"], acc["drafted"]) == (src, 80, 48, 240)
    assert acc["length"] == pytest.approx(1.6) and acc["rate"] == pytest.approx(0.2)
    groups = [{k: g[k] for k in CODE} | {"group": g["group"]} for g in acc["by_group"]]
    assert groups == [{**TRANSLATE, "group": "translate"}, {**CODE, "group": "code"}]  # worst first
    by_rec = {r.extra["group"]: r.spec for r in doc["_records"]}
    assert by_rec["code"]["hist"] == [0, 0, 0, 8] and by_rec["translate"]["hist"] == [32, 0, 0, 0]
    assert "by group, worst first: translate 1.00 (2 requests" in doc["_stdout"]
    # the report's card: the requests' pooled length, not a mean of phases' server figures
    res = genbench("report", str(tmp_path / "run"), "-o", str(tmp_path / "run.html"))
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "run.html").read_text()
    card = page[page.index("acceptance length"):][:300]
    assert "1.60" in card and "pooled over 4 requests" in card
    if src == "vllm":  # the sim's dialect counts as vLLM's counters do: the same pooled length
        m = phase["server_metrics"]
        assert m["spec_acceptance_source"] == "counters"
        assert m["spec_mean_acceptance_length"] == pytest.approx(acc["length"], rel=1e-9)


def test_a_server_that_does_not_say_it_leaves_the_result_as_it_was(sim_factory, tmp_path):
    sim = sim_factory(*SIM)  # vLLM's dialect without the flag
    doc = run(sim.url, tmp_path)
    assert doc["phases"][0]["summary"]["acceptance"] is None
    assert all(r.spec is None for r in doc["_records"])
    assert "acceptance per request" not in doc["_stdout"]


def test_check_says_how_to_have_it(sim_factory):
    on = sim_factory(*SIM, "--dialect", "sglang")
    res = genbench("check", "--url", on.url)
    assert "speculative acceptance per request: yes (SGLang's sglext.spec_tokens_details)" in (
        res.stdout
    )
    off = sim_factory(*SIM)
    res = genbench("check", "--url", off.url, "--json")
    rep = json.loads(res.stdout)
    assert rep["acceptance"] is None


def test_compare_says_which_group_differs(sim_factory, tmp_path):
    """Two drafters: the same on code, one accepting every translation draft, the other none."""
    sides = []
    for p in ("0", "1"):
        sim = sim_factory(*SIM[:-1], f"translate:{p}", "--dialect", "sglang")
        sides.append(run(sim.url, tmp_path, name=p))
    res = genbench("compare", str(tmp_path / "0"), str(tmp_path / "1"), "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["key"]: r for r in json.loads(res.stdout)["rows"]}
    tr = rows["spec.single-33.group.translate.acceptance_length"]
    code = rows["spec.single-33.group.code.acceptance_length"]
    assert tr["values"] == [1.0, 4.0] and tr["verdicts"] == [None, "better"]
    assert code["values"] == [4.0, 4.0] and code["verdicts"] == [None, "same"]
    # the phase's row is the requests' pooled length (every step), not SGLang's gauge (a
    # window of its last decode steps, which said the worse drafter was better in a trial)
    phase = rows["spec.single-33.acceptance_length"]
    assert phase["values"] == [pytest.approx(1.6), 4.0] and phase["verdicts"] == [None, "better"]


def test_generate_keeps_it_per_row_and_inspect_ranks_the_groups(sim_factory, tmp_path):
    sim = sim_factory(*SIM, "--dialect", "sglang", "--output-len", "fixed:33")
    out = tmp_path / "gen"
    res = genbench("generate", "-i", str(workload(tmp_path)), "--url", sim.url, "-o", str(out))
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [orjson.loads(x) for x in (out / "data-00000.jsonl").read_bytes().splitlines()]
    meta = {r["id"]: r["meta"] for r in rows}
    assert {k: meta["c1"][k] for k in ("group", "spec_steps", "spec_accepted", "spec_drafted",
                                       "spec_length")} == {  # fmt: skip
        "group": "code", "spec_steps": 8, "spec_accepted": 24, "spec_drafted": 24,
        "spec_length": 4.0}  # fmt: skip
    assert (meta["t1"]["group"], meta["t1"]["spec_length"]) == ("translate", 1.0)
    res = genbench("inspect", str(out))
    assert res.returncode == 0, res.stderr
    assert "by group, worst first: translate 1.00 (2 rows" in res.stdout
    assert res.stdout.index("translate 1.00") < res.stdout.index("code 4.00")
    doc = json.loads((out / "inspect.json").read_text())
    assert [g["group"] for g in doc["acceptance"]["by_group"]] == ["translate", "code"]
    assert doc["acceptance"]["length"] == pytest.approx(1.6)
    html = tmp_path / "report.html"
    res = genbench("report", str(out), "-o", str(html))
    assert res.returncode == 0, res.stderr
    page = html.read_text()
    assert "<h3>Speculative acceptance</h3>" in page
    assert "<th class='t'>group or output length</th><th>answers</th>" in page
    assert page.index("group translate") < page.index("group code")


def test_plan_forecasts_from_the_acceptance_on_your_prompts(sim_factory, tmp_path):
    """The pilot runs on the user's prompts: its plan keeps their acceptance, by group; a
    plan from a run of the built-in prompts says its rate carries theirs."""
    sim = sim_factory(*SIM, "--dialect", "sglang", "--output-len", "fixed:33")
    rows = [{"id": f"r{i}", "group": g, "messages": [{"role": "user", "content": f"{g} {i}"}]}
            for i, g in enumerate(["code", "translate"] * 10)]  # fmt: skip
    wl = tmp_path / "rows.jsonl"
    wl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "plan"
    res = genbench("plan", "--prompts", str(wl), "--url", sim.url, "--pilot", "20",
                   "--concurrency", "2", "--warmup", "0", "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    acc = json.loads((out / "plan.json").read_text())["acceptance"]
    assert [(g["group"], g["requests"], g["length"]) for g in acc["by_group"]] == [
        ("translate", 10, 1.0), ("code", 10, 4.0)]  # fmt: skip
    assert "speculative acceptance on your prompts (the pilot's requests): length 1.60" in (
        res.stdout
    )
    run_out = tmp_path / "builtin"
    res = genbench("run", "--url", sim.url, "--lengths", "33", "--concurrency", "2",
                   "--skip", "warmup,single", "-o", str(run_out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = genbench("plan", "--from", str(run_out), "--concurrency", "2",
                   "--tokens-per-sample", "33")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "carries the acceptance of genbench's built-in prompts (4.00" in res.stdout


def test_plan_from_a_run_rescales_its_rate_to_your_prompts_acceptance(sim_factory, tmp_path):
    """`plan --from RUN --prompts FILE --url URL`: the run (built-in prompts, 4 tokens a
    decode step) is rescaled by the pilot's tokens per step on prompts whose groups accept
    apart (10 code at 4, 10 translate at 1: 640 tokens in 400 steps, 1.6): × 0.40, and the
    time at the run's own rate is kept beside it. A run that says no acceptance is refused
    before any pilot request."""
    sim = sim_factory(*SIM, "--dialect", "sglang", "--output-len", "fixed:33")
    rows = [{"id": f"r{i}", "group": g, "messages": [{"role": "user", "content": f"{g} {i}"}]}
            for i, g in enumerate(["code", "translate"] * 10)]  # fmt: skip
    wl = tmp_path / "rows.jsonl"
    wl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    run_out = tmp_path / "builtin"
    res = genbench("run", "--url", sim.url, "--lengths", "33", "--concurrency", "1,2",
                   "--skip", "warmup,single", "-o", str(run_out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = tmp_path / "plan"
    res = genbench("plan", "--from", str(run_out), "--prompts", str(wl), "--url", sim.url,
                   "--pilot", "20", "--concurrency", "2", "--warmup-time", "0", "--samples", "1K",
                   "--tokens-per-sample", "33", "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    plan = json.loads((out / "plan.json").read_text())
    a = plan["acceptance_rescale"]
    assert a["pilot"] == {"tokens_per_step": 1.6, "requests": 20, "said": 20, "tokens": 640,
                          "steps": 400, "drafting_share": 1.0, "concurrency": 2}  # fmt: skip
    # the sweep's requests: 1024 tokens, 1023 after the first in 256 steps of 1 + 3 drafts
    assert a["run_by_concurrency"]["2"]["tokens_per_step"] == 1023 / 256
    f = 1.6 / (1023 / 256)
    assert a["factor_by_concurrency"] == {"1": pytest.approx(f), "2": pytest.approx(f)}
    run_rate = a["run_tps_by_concurrency"]["2"]
    assert plan["model"]["sustained_tps_by_concurrency"]["2"] == pytest.approx(f * run_rate)
    (row,) = plan["rows"]
    assert row["ours_best"]["seconds"] == pytest.approx(row["ours_best"]["unscaled"]["seconds"]
                                                        / f)  # fmt: skip
    assert "1.60 tokens per decode step on your prompts (pilot at C=2: 20 requests" in res.stdout
    assert "the run's prompts 4.00 tokens per step" in res.stdout and "rate × 0.400" in res.stdout
    assert "built-in prompts (4.00" not in res.stdout  # the rescale answers that note
    assert "the pilot ran at C=2, and rescales the run's C=1: acceptance can move" in res.stdout
    # an autoregressive run has nothing to rescale: one line, no pilot sent
    ar = sim_factory("--tps", "2000", "--ttft-ms", "2", "--per-seq-ms", "0.01")
    ar_out = tmp_path / "ar"
    res = genbench("run", "--url", ar.url, "--lengths", "33", "--concurrency", "2",
                   "--skip", "warmup,single", "-o", str(ar_out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = genbench("plan", "--from", str(ar_out), "--prompts", str(wl), "--url", sim.url,
                   "--tokens-per-sample", "33", "-o", str(tmp_path / "p2"))  # fmt: skip
    assert res.returncode == 2, res.stderr + res.stdout
    assert "said its speculative acceptance" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p2").exists()


def test_rows_unknown_or_impossible_are_left_out_of_every_pool(sim_factory, tmp_path):
    """#45: a reply that lost its usage chunk says nothing of what was drafted (unknown),
    one that says 10 x its drafts + 7 accepted cannot be (dropped): inspect, the job report
    and run pool the three sound rows (code 4.00, 4.00, translate 1.00) and count the two."""
    sim = sim_factory(*SIM, "--output-len", "fixed:33", "--per-request-spec-decode-metrics",
                      "summary", "--fault", "no-usage:match=silent",
                      "--fault", "bad-acceptance:match=liar")  # fmt: skip
    said = [("c1", "code", "code a sort"), ("c2", "code", "code a map"),
            ("t1", "translate", "translate cat"), ("s1", "code", "code silent"),
            ("l1", "code", "code liar")]  # fmt: skip
    rows = [{"id": i, "group": g, "messages": [{"role": "user", "content": text}]}
            for i, g, text in said]  # fmt: skip
    wl = tmp_path / "prompts.jsonl"
    wl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "gen"
    res = genbench("generate", "-i", str(wl), "--url", sim.url, "-o", str(out))
    assert res.returncode == 0, res.stderr + res.stdout
    meta = {r["id"]: r["meta"] for r in map(orjson.loads, (out / "data-00000.jsonl").open("rb"))}
    assert "spec_steps" not in meta["s1"] and meta["l1"]["spec_dropped"] == "accepted > drafted"
    res = genbench("inspect", str(out))
    assert res.returncode == 0, res.stderr
    acc = json.loads((out / "inspect.json").read_text())["acceptance"]
    # each row: 32 decode tokens; code 8 steps of 3 accepted, translate 32 steps of none
    assert (acc["requests"], acc["of"], acc["length"]) == (3, 5, pytest.approx(1 + 48 / 48))
    assert (acc["unknown"], acc["dropped"]) == (1, {"accepted > drafted": 1})
    assert "left out: 1 row that said none (unknown) · 1 dropped, their figures cannot be " \
        "(accepted > drafted: 1)" in res.stdout  # fmt: skip
    html = tmp_path / "report.html"
    res = genbench("report", str(out), "-o", str(html))
    assert res.returncode == 0, res.stderr
    assert "pooled over 3 answers; left out: 1 answer that said none (unknown)" in (
        html.read_text()
    )
    doc = run(sim.url, tmp_path, "--prompts-per-length", "5")
    single = doc["phases"][0]["summary"]["acceptance"]
    assert (single["requests"], single["of"], single["dropped"]) == (
        3, 5, {"accepted > drafted": 1})  # fmt: skip
    assert single["unknown"] == 1 and single["length"] == pytest.approx(2.0)
