"""`genbench plan` answers the decision: servers for a deadline, the samples that fit, the
job's cost, and which configuration generates the job fastest.

The arithmetic is checked exactly on hand-made run results (no server); the choice is
checked against two sims whose rates are known: one faster single-stream, slower at the
job's concurrency (as a speculative drafter can be), the other the reverse.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import genbench

from genbench.errors import UsageError
from genbench.plan import from_result
from genbench.plan.configurations import plan_from_results
from genbench.plan.decide import Candidate, Deadline, Pricing, decide, parse_deadline
from genbench.plan.from_result import plan_from_result
from genbench.settings import Setting

DAY, HOUR = 86_400, 3_600
NO_SETTINGS = {"GENBENCH_CONFIG": ""}


def result_doc(
    tmp: Path,
    name: str,
    sustained: dict[int, float],
    single: float = 100.0,
    model: str = "m",
    sweep_tokens: int = 2_000,
) -> dict[str, Any]:
    """A run result as `genbench run` writes it, with only what plan reads."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "genbench.result",
        "schema_version": 1,
        "target": {"model": model, "server": {"kind": "sim"}},
        "config": {"natural": False, "sweep_tokens": sweep_tokens},
        "single_stream": {"mean_decode_tps": single},
        "sweep": {"sustained": {"by_concurrency": {str(c): r for c, r in sustained.items()}}},
        "phases": [
            {
                "name": f"sustained-c{c}",
                "kind": "sustained",
                "concurrency": c,
                "summary": {"ok": 10, "output_tokens": 10 * sweep_tokens},
            }
            for c in sustained
        ],
    }
    (d / "result.json").write_text(json.dumps(doc))
    return {**doc, "_path": str(d / "result.json")}


def pricing(price: float, *gpus: int) -> Pricing:
    return Pricing(Setting(price, "--price"), Setting(list(gpus), "--gpus-per-server"))


def with_bar(monkeypatch: pytest.MonkeyPatch, bars: dict[int, float]) -> None:
    """The sustained rate's 95% half-width, as the run's requests.jsonl would give it."""
    monkeypatch.setattr(from_result, "_read_requests", lambda path, phases: (None, bars))


# ------------------------------------------------------------------------------ deadline


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5d", 5 * DAY), ("36h", 36 * HOUR), ("90m", 5_400), ("2d12h", 2.5 * DAY),
     ("1.5d", 1.5 * DAY), ("1h30m", 5_400), (" 2D ", 2 * DAY), ("45s", 45)],
)  # fmt: skip
def test_a_deadline_reads_as_a_person_writes_it(text, seconds):
    assert parse_deadline(text) == seconds


@pytest.mark.parametrize("text", ["5", "", "h5", "12h2d", "5d5d", "0h", "5 days", "-1d", "1e3h"])
def test_a_deadline_without_a_unit_or_out_of_order_is_refused(text):
    with pytest.raises(UsageError, match="--deadline"):
        parse_deadline(text)


# ------------------------------------------------------------------------------ arithmetic


def test_servers_samples_and_cost_exactly_without_a_range(tmp_path):
    """1,000 tok/s, 2,000 tokens per sample, 900K samples: 1.8e6 s = 500 h on one server."""
    doc = result_doc(tmp_path, "tp8", {1: 100.0, 32: 1_000.0})
    plan = plan_from_result(doc, [900_000], 4, 32, 2_000.0, None, None)
    dec = decide([Candidate("tp8", plan)], 4, Deadline("5d", 5 * DAY), pricing(2.5, 8))
    conf = dec["configurations"][0]
    row = conf["rows"][0]
    assert row["seconds"] == row["lo_s"] == row["hi_s"] == 1_800_000
    assert not conf["has_range"]
    assert row["at_servers"] == {"servers": 4, "seconds": 450_000, "lo_s": 450_000,
                                 "hi_s": 450_000}  # fmt: skip
    # 500 h / 120 h = 4.17: five servers, at the forecast and at the range's ends alike
    assert row["servers_needed"]["servers"] == row["servers_needed"]["at_forecast"] == 5
    # 5 days × 4 servers × 1,000 tok/s / 2,000 tokens
    assert conf["fit"] == {"servers": 4, "samples": 864_000, "at_forecast": 864_000,
                           "from_samples": 900_000}  # fmt: skip
    # 500 h × 8 GPUs × 2.5 per GPU-hour, on any number of servers
    assert row["gpu_hours"]["forecast"] == 4_000
    assert row["cost"] == {"forecast": 10_000, "lo": 10_000, "hi": 10_000}
    assert dec["price"] == {"per_gpu_hour": 2.5, "from": "--price",
                            "gpus_per_server_from": "--gpus-per-server"}  # fmt: skip
    assert "no range" in dec["basis"]["servers"]


def test_a_deadline_is_planned_on_the_slow_end_of_the_range(tmp_path, monkeypatch):
    """The rate known to ±20%: the time runs from 1.8e6/1.2 to 1.8e6/0.8 s (417 to 625 h)."""
    with_bar(monkeypatch, {32: 0.2})
    doc = result_doc(tmp_path, "tp8", {1: 100.0, 32: 1_000.0})
    plan = plan_from_result(doc, [900_000], 4, 32, 2_000.0, None, None)
    dec = decide([Candidate("tp8", plan)], 4, Deadline("5d", 5 * DAY), pricing(2.5, 8))
    conf = dec["configurations"][0]
    row = conf["rows"][0]
    assert conf["has_range"]
    assert row["hi_s"] == pytest.approx(1_800_000 / 0.8, rel=1e-12)
    assert row["lo_s"] == pytest.approx(1_800_000 / 1.2, rel=1e-12)
    # 625 h / 120 h = 5.2 → 6; at the forecast 4.17 → 5; at the lower end 3.47 → 4
    assert row["servers_needed"] == {
        "servers": 6, "at_forecast": 5, "at_lower_end": 4,
        "hi_s_on_them": pytest.approx(1_800_000 / 0.8 / 6),
    }  # fmt: skip
    # samples that fit: 5 days × 4 servers × (1,000 × 0.8) tok/s / 2,000 tokens = 691,200 on
    # paper; float division leaves 691,199.9999…, which must not lose a sample
    assert conf["fit"]["samples"] == 691_200
    assert conf["fit"]["at_forecast"] == 864_000
    cost = row["cost"]
    assert cost["forecast"] == pytest.approx(10_000, rel=1e-12)
    assert cost["lo"] == pytest.approx(10_000 / 1.2, rel=1e-12)
    assert cost["hi"] == pytest.approx(10_000 / 0.8, rel=1e-12)
    # a deadline the slow end meets exactly needs exactly that many servers, not one more
    exact = decide([Candidate("tp8", plan)], 4, Deadline("5d5h", 125 * HOUR), None)
    assert exact["configurations"][0]["rows"][0]["servers_needed"]["servers"] == 5


def test_a_pilots_time_on_m_servers_is_its_own_simulation():
    """A plan from a pilot simulated M servers itself: that, not one server's time / M."""
    plan = {
        "mode": "pilot",
        "source": {"model": "m"},
        "model": {"concurrency": 32, "job_tps": 900.0},
        "rows": [
            {
                "samples": 1_000,
                "ours": {"seconds": 100.0, "lo_s": 90.0, "hi_s": 120.0},
                "at_servers": {"servers": 2, "seconds": 52.0, "lo_s": 47.0, "hi_s": 63.0},
            }
        ],
    }
    dec = decide([Candidate("pilot", plan)], 2, Deadline("1m", 60), pricing(1.0, 1))
    row = dec["configurations"][0]["rows"][0]
    assert row["at_servers"] == {"servers": 2, "seconds": 52.0, "lo_s": 47.0, "hi_s": 63.0}
    assert row["servers_needed"]["servers"] == 2  # 120 s / 60 s
    assert dec["configurations"][0]["fit"]["samples"] == 1_000  # 60 s × 2 × 1,000 / 120 s
    assert row["cost"]["forecast"] == pytest.approx(100 / 3600)


# ------------------------------------------------------------------------------ comparison


def test_the_fastest_for_the_job_is_marked_and_the_cheapest_when_it_differs(tmp_path):
    """EP8 is faster at the job's C; TP4 has half the GPUs and is cheaper per sample."""
    tp4 = result_doc(tmp_path, "tp4", {1: 80.0, 32: 900.0}, single=80.0)
    ep8 = result_doc(tmp_path, "ep8", {1: 60.0, 32: 1_000.0}, single=60.0)
    doc = plan_from_results(
        [tp4, ep8], [900_000], 1, 32, 2_000.0, None, None, Deadline("5d", 5 * DAY),
        pricing(2.0, 4, 8),
    )  # fmt: skip
    dec = doc["decision"]
    by = {c["name"]: c for c in dec["configurations"]}
    assert by["tp4"]["gpus_per_server"] == 4 and by["ep8"]["gpus_per_server"] == 8
    assert by["ep8"]["rows"][0]["seconds"] == 1_800_000  # 1.8e9 tokens / 1,000 tok/s
    assert by["tp4"]["rows"][0]["seconds"] == 2_000_000
    assert by["ep8"]["rows"][0]["cost"]["forecast"] == 500 * 8 * 2.0
    assert by["tp4"]["rows"][0]["cost"]["forecast"] == pytest.approx(2_000_000 / 3600 * 4 * 2.0)
    assert dec["best"] == [{"samples": 900_000, "fastest": "ep8", "cheapest": "tp4", "overlap": []}]
    assert by["ep8"]["rows"][0]["servers_needed"]["servers"] == 5  # 500 h / 120 h
    assert by["tp4"]["rows"][0]["servers_needed"]["servers"] == 5  # 555.6 h / 120 h
    # the plan's own rows (what generate --plan reads) are the fastest's
    assert doc["source"]["path"] == ep8["_path"]
    assert doc["rows"][0]["ours_chosen"]["seconds"] == 1_800_000
    assert doc["source"]["compared"] == [tp4["_path"], ep8["_path"]]


def test_a_sweep_that_fell_short_of_the_job_says_so_in_its_row(tmp_path):
    short = result_doc(tmp_path, "short", {1: 100.0, 16: 600.0}, sweep_tokens=256)
    full = result_doc(tmp_path, "full", {1: 90.0, 16: 500.0, 64: 1_200.0})
    doc = plan_from_results([short, full], [1_000], 1, 64, 2_000.0, None, None, None, None)
    by = {c["name"]: c for c in doc["decision"]["configurations"]}
    assert by["short"]["concurrency"] == 16
    assert any("reached C=16 only, not the job's C=64" in n for n in by["short"]["notes"])
    assert any("averaged 256 output tokens, the job's 2,000" in n for n in by["short"]["notes"])
    assert by["full"]["notes"] == []
    # a job's C between two measured ones is rated at the one below (never made faster)
    doc = plan_from_results([short, full], [1_000], 1, 32, 2_000.0, None, None, None, None)
    by = {c["name"]: c for c in doc["decision"]["configurations"]}
    assert by["full"]["concurrency"] == 16
    assert any("C=32 not measured: rated at C=16" in n for n in by["full"]["notes"])


def test_runs_of_different_models_are_refused_in_one_line(tmp_path):
    a = result_doc(tmp_path, "a", {32: 100.0}, model="kimi-k2")
    b = result_doc(tmp_path, "b", {32: 100.0}, model="deepseek-v3")
    p = genbench(
        "plan", "--from", str(tmp_path / "a"), "--from", str(tmp_path / "b"),
        "--tokens-per-sample", "100", env=NO_SETTINGS,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "'deepseek-v3'" in line and "'kimi-k2'" in line and "one model" in line
    assert a["_path"] in line or b["_path"] in line


# ------------------------------------------------------------------------------ the price


def test_the_price_comes_from_the_settings_file_and_a_flag_overrides_it(tmp_path):
    result_doc(tmp_path, "tp8", {32: 1_000.0})
    cfg = tmp_path / "config.toml"
    cfg.write_text("[plan]\nprice_per_gpu_hour = 2.5\ngpus_per_server = 8\n")
    args = ("plan", "--from", str(tmp_path / "tp8"), "--tokens-per-sample", "2000",
            "--samples", "900K", "--json")  # fmt: skip
    p = genbench(*args, env={"GENBENCH_CONFIG": str(cfg)})
    dec = json.loads(p.stdout)["decision"]
    assert dec["price"]["per_gpu_hour"] == 2.5
    assert dec["price"]["from"] == f"{cfg} [plan] price_per_gpu_hour"
    assert dec["price"]["gpus_per_server_from"] == f"{cfg} [plan] gpus_per_server"
    assert dec["configurations"][0]["rows"][0]["cost"]["forecast"] == 10_000
    assert dec["deadline"] is None and "servers_needed" not in dec["configurations"][0]["rows"][0]
    assert "10,000" in p.stderr and "[plan] price_per_gpu_hour" in p.stderr  # not markup

    p = genbench(*args, "--price", "3", env={"GENBENCH_CONFIG": str(cfg)})
    dec = json.loads(p.stdout)["decision"]
    assert dec["price"]["from"] == "--price" and str(cfg) in dec["price"]["gpus_per_server_from"]
    assert dec["configurations"][0]["rows"][0]["cost"]["forecast"] == 12_000

    # no settings, no price: no decision at all
    p = genbench(*args, env=NO_SETTINGS)
    assert "decision" not in json.loads(p.stdout)


@pytest.mark.parametrize(
    ("flags", "toml", "needle"),
    [
        (["--price", "2"], None, "--price is per GPU-hour: give --gpus-per-server"),
        (["--gpus-per-server", "8"], None, "--gpus-per-server is for the cost"),
        (["--price", "2", "--gpus-per-server", "8,4"], None, "2 values for 1 configurations"),
        (["--price", "0", "--gpus-per-server", "8"], None, "--price must be a positive"),
        (["--deadline", "5"], None, "--deadline '5'"),
        ([], "[plan]\nprice_per_gpu_hr = 2\n", "unknown key 'price_per_gpu_hr'"),
        ([], "[plan]\nprice_per_gpu_hour = -2\n", "price_per_gpu_hour must be a number above 0"),
        ([], "[plan\n", "not a TOML settings file"),
    ],
)
def test_bad_prices_and_deadlines_are_one_line_errors(tmp_path, flags, toml, needle):
    result_doc(tmp_path, "tp8", {32: 1_000.0})
    env = NO_SETTINGS
    if toml is not None:
        (tmp_path / "config.toml").write_text(toml)
        env = {"GENBENCH_CONFIG": str(tmp_path / "config.toml")}
    p = genbench(
        "plan", "--from", str(tmp_path / "tp8"), "--tokens-per-sample", "10", *flags, env=env
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_missing_settings_file_named_by_the_environment_is_an_error(tmp_path):
    p = genbench(
        "plan", "--rate", "100", "--tokens-per-sample", "10",
        env={"GENBENCH_CONFIG": str(tmp_path / "nope.toml")},
    )  # fmt: skip
    assert p.returncode == 2 and "no such settings file" in p.stderr, p.stderr


# ------------------------------------------------------------------------------ two sims

# A: fast alone, slow in a batch (its per-sequence cost dominates, as a drafter's extra
# work can): 150 tok/s single-stream, 32 / (a + 32·b) = 466 tok/s at C=32.
# B: 100 tok/s single-stream, 1,255 tok/s at C=32 (docs/sim.md, "Timing model").
SIM_A = ("--tps", "150", "--per-seq-ms", "2", "--ttft-ms", "5")
SIM_B = ("--tps", "100", "--per-seq-ms", "0.5", "--ttft-ms", "5")


def short_run(url: str, out: Path) -> None:
    """Single-stream, then 4 s of sustained load at C=1 and C=32: long enough that a stall
    of this host during one run cannot reverse a 2.7× difference."""
    p = genbench(
        "run", "--url", url, "--skip", "warmup", "--lengths", "32", "--prompts-per-length", "2",
        "--concurrency", "1,32", "--shape", "sustained", "--sweep-tokens", "64",
        "--duration", "4", "--out", str(out), timeout=180,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout


def test_the_table_picks_the_configuration_faster_for_the_job(sim_factory, tmp_path):
    short_run(sim_factory(*SIM_A).url, tmp_path / "spec")
    short_run(sim_factory(*SIM_B).url, tmp_path / "plain")
    single = {
        n: json.loads((tmp_path / n / "result.json").read_text())["single_stream"][
            "mean_decode_tps"
        ]
        for n in ("spec", "plain")
    }
    assert single["spec"] > 1.2 * single["plain"], single  # the field would pick spec

    out = tmp_path / "decision"
    p = genbench(
        "plan", "--from", str(tmp_path / "spec"), "--from", str(tmp_path / "plain"),
        "--samples", "10K", "--tokens-per-sample", "32", "--concurrency", "32",
        "--deadline", "2h", "--price", "2", "--gpus-per-server", "8", "--out", str(out),
        env=NO_SETTINGS,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads((out / "plan.json").read_text())
    dec = doc["decision"]
    assert dec["best"][0]["fastest"] == "plain" and dec["best"][0]["cheapest"] == "plain"
    by = {c["name"]: c for c in dec["configurations"]}
    assert by["plain"]["tok_per_s"] > 1.5 * by["spec"]["tok_per_s"], by
    # the arithmetic on what the runs measured: 10K × 32 tokens at the sustained rate
    for conf in by.values():
        row = conf["rows"][0]
        assert row["seconds"] == pytest.approx(320_000 / conf["tok_per_s"], rel=1e-12)
        assert row["cost"]["forecast"] == pytest.approx(row["seconds"] / 3600 * 8 * 2)
        assert row["servers_needed"]["servers"] == math.ceil(row["hi_s"] / 7200)
    # the table: fastest first and marked; single-stream's wrong pick said in words
    lines = p.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "plain" in line or "spec" in line)
    assert "plain" in lines[first] and "fastest" in lines[first], p.stdout
    assert "single-stream speed would pick spec" in p.stdout
    assert "samples that fit in 2h on 1 server: plain" in p.stdout

    # the report, given the plan, shows the same table
    html = tmp_path / "report.html"
    p = genbench("report", str(out), str(tmp_path / "spec"), "-o", str(html))
    assert p.returncode == 0, p.stderr
    page = html.read_text()
    assert f"<h2>Forecast: {out} (2 configurations compared)</h2>" in page
    assert "which configuration: 10,000 samples" in page and "fastest<br>cheapest" in page
