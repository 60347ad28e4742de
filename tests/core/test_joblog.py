"""The job report's streamed pass over a request log: fixed-size bins whose width doubles,
down intervals read from the records, and the runs of a resumed job, on records written
through the job's own compact RecordWriter."""

from __future__ import annotations

from pathlib import Path

import pytest

from genbench.records import RecordWriter, RequestRecord
from genbench.report.joblog import Bins, read_job_log

pytestmark = pytest.mark.core
CLOCK = 1_800_000_000.0
A, B = "http://a:8000/v1", "http://b:8000/v1"


def test_bins_double_in_width_and_keep_every_sum():
    b = Bins(width=1.0, max_bins=4)
    for t in (0.5, 1.5, 2.5, 3.5):
        b.add(b.index(t), "done", "a")
    assert (b.width, b.series("done", "a")) == (1.0, [1, 1, 1, 1])
    b.add(b.index(4.0), "done", "a", 2)  # past the last bin: pairs summed, width 2
    assert (b.width, b.n, b.series("done", "a")) == (2.0, 3, [2, 2, 2])
    b.add(b.index(17.0), "done", "a")  # twice more: width 8
    assert (b.width, b.series("done", "a")) == (8.0, [6, 0, 1])
    assert sum(b.series("done", "a")) == 7 and b.starts() == [0.0, 8.0, 16.0]
    b.add(b.index(-3.0), "done", "a")  # a moment before the first bin: the first
    assert b.series("done", "a")[0] == 7


def rec(i: int, server: str, t: float, e2e: float = 1.0, kind: str | None = None,
        outcome: str = "done", **kw) -> RequestRecord:  # fmt: skip
    tokens = None if kind else 10
    return RequestRecord(f"r{i}", phase="generate", server=server, model="m", t_send=t,
                         t_end=t + e2e, sent_at=t + CLOCK, error_kind=kind,
                         completion_tokens=tokens, extra={"outcome": outcome, "turn": 0},
                         **kw)  # fmt: skip


def write(path: Path, runs: list[list[RequestRecord]], clocks: list[float]) -> None:
    for recs, clock in zip(runs, clocks, strict=True):
        defaults = {"phase": "generate", "server": A, "model": "m", "clock": clock,
                    "extra": {"outcome": "done", "turn": 0}}  # fmt: skip
        with RecordWriter(path, compact=True, defaults=defaults) as w:
            for r in recs:
                w.write(r)


def test_a_server_is_down_from_the_failure_that_took_it_out_to_the_next_request_sent(tmp_path):
    recs = [rec(0, A, 0.0), rec(1, B, 0.0), rec(2, B, 0.5, 4.5, "disconnected", "requeued"),
            rec(3, B, 1.0, 4.2, "disconnected", "requeued"),  # in flight too: same interval
            rec(4, A, 5.0), rec(5, B, 2.0, 8.0, "disconnected", "retry"),  # alive: no down
            rec(6, A, 6.0, 1.0, "local_limit", "requeued"),  # our descriptors: A is fine
            rec(7, B, 20.0), rec(8, A, 21.0, 1.0, "upstream", "requeued",
                                 error_message="worker went away"),  # router: one worker
            rec(9, A, 23.0, 1.0, "upstream", "requeued",
                error_message="No available workers (all circuits open or unhealthy)")]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    write(path, [recs], [CLOCK])
    h = read_job_log(path)
    b = h.servers[B]
    assert b.downs == [[pytest.approx(CLOCK + 5.0), pytest.approx(CLOCK + 20.0), 2]]
    assert (b.requeued, b.retries, b.rows) == (2, 1, 2)
    a = h.servers[A]  # the router saying no worker is left: down until the log ends
    assert a.downs == [[pytest.approx(CLOCK + 24.0), pytest.approx(CLOCK + 24.0), 1]]
    assert a.requeued == 3 and h.records == 10
    assert h.kinds == {"disconnected": 3, "local_limit": 1, "upstream": 2}
    assert sum(h.bins.series("done", A)) == 2 and sum(h.bins.series("tokens", B)) == 20


def test_runs_of_a_resumed_job_line_up_on_the_wall_clock(tmp_path):
    """A reboot between runs resets the monotonic clock: each run's own `clock` puts its
    records back on the wall clock; a server down when a run ended is down until then."""
    path = tmp_path / "requests.jsonl"
    first = [rec(0, A, 100.0), rec(1, B, 100.0, 2.0, "connect_refused", "requeued")]
    second = [rec(2, A, 5.0), rec(3, B, 6.0)]  # 1000 s later, on a new monotonic clock
    for r in second:
        r.sent_at = r.t_send + CLOCK + 1095.0
    write(path, [first, second], [CLOCK, CLOCK + 1095.0])
    h = read_job_log(path)
    assert h.runs == [(CLOCK + 100, CLOCK + 102), (CLOCK + 1100, CLOCK + 1102)]
    assert h.servers[B].downs == [[CLOCK + 102, CLOCK + 102, 1]]  # ended with its run
    assert h.hist["latency_s"].sum() == 3 and h.hist["completion_tokens"].sum() == 3


TORN = b'{"defaults": {}}\n{"id": "r0", "t_send": 1.0, "t_e'


@pytest.mark.parametrize("content", [b"", b'{"defaults": {"server": "http://a/v1"}}\n', TORN])
def test_a_log_with_no_finished_request_draws_figures_that_say_so(tmp_path, content):
    from genbench.report.job import figures

    path = tmp_path / "requests.jsonl"
    path.write_bytes(content)  # a job that sent nothing yet, or whose first line is torn
    h = read_job_log(path)
    assert h.records == 0 and h.runs == []
    figs = figures(h, [])
    assert len(figs) == 7 and all(f.empty and not f.has_data for f in figs)


def test_a_request_that_said_nothing_is_unknown_and_one_that_drafted_nothing_one_a_step(
    tmp_path,
):
    """vLLM says zero steps for a request that never drafted: the job report counts it at
    one token a step (inspect's rule). A request that said nothing (its usage chunk lost) is
    unknown, and one whose figures cannot be is dropped: both counted, neither pooled."""
    spec = {"steps": 4, "drafted": 12, "accepted": 6}
    none = {"steps": 0, "drafted": 0, "accepted": 0}
    recs = [rec(0, A, 0.0, spec=spec), rec(1, A, 1.0, spec=none), rec(2, B, 0.0),
            rec(3, B, 1.0, spec_dropped="accepted > drafted"),
            rec(4, B, 2.0, spec={"steps": 4, "drafted": 3, "accepted": 6})]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    write(path, [recs], [CLOCK])
    acc = read_job_log(path).accept.to_dict()
    # A: 4 steps with 6 accepted, and 9 steps drafting nothing for the other's 10 tokens
    assert acc is not None and (acc["requests"], acc["steps"], acc["accepted"]) == (2, 13, 6)
    assert acc["length"] == pytest.approx(1 + 6 / 13)
    assert (acc["unknown"], acc["dropped"]) == (1, {"accepted > drafted": 2})


def test_requests_the_operator_ended_are_interrupted_never_failures(tmp_path):
    """A Ctrl-C mid-job ends the requests in flight as `cancelled`: the report counts them
    apart, as interrupted, and neither as failures nor as rows (#46)."""
    recs = [rec(0, A, 0.0), rec(1, A, 0.5, 1.0, "read_timeout", "retry"),
            rec(2, A, 1.0, 0.5, "cancelled"), rec(3, B, 1.0, 0.5, "cancelled", "done")]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    write(path, [recs], [CLOCK])
    h = read_job_log(path)
    assert (h.records, h.interrupted, h.kinds) == (4, 2, {"read_timeout": 1})
    assert h.servers[A].rows == 1 and h.servers[B].rows == 0  # its 'done' tag: not a row
    assert "cancelled" not in h.bins.keys("failures")
    assert sum(h.bins.series("interrupted", A)) == 1


def test_rates_over_time_are_a_stated_trailing_mean_and_the_eta_axis_is_the_plans(tmp_path):
    """A 3-minute job in 1-s bins drew spikes; its rates are means over a window the
    subtitle states. One wild early projection no longer sets the ETA axis (#46)."""
    from genbench.report.figures import Series
    from genbench.report.job import Figure, _Axis, _clip_to_plan, rate_figure, smoothing_bins

    recs = [rec(i, A, float(i), 1.0) for i in range(180)]  # a row a second for 3 minutes
    path = tmp_path / "requests.jsonl"
    write(path, [recs], [CLOCK])
    h = read_job_log(path)
    w = smoothing_bins(h)
    assert w * h.bins.width == pytest.approx(10.0)  # 1/40 of 3 min is under the 10-s floor
    fig = rate_figure(h, _Axis(h), "done")
    assert f"the mean over the last {10.0:.1f} s" in fig.subtitle
    steady = fig.series[0].ys[w:-1]
    assert steady and max(steady) == pytest.approx(min(steady))  # one row a second, flat
    eta = Figure("job_eta", "ETA", "sub", "x", "y")
    eta.series = [Series("run 1", "#000", [0, 1, 2], [40.0, 3.2, 3.1]),
                  Series("plan", "#888", [0, 2], [3.0, 3.0]),
                  Series("plan's bar", "#888", [0, 2], [3.5, 3.5])]  # fmt: skip
    _clip_to_plan(eta, _Axis(h))
    assert eta.y_max == 7.0 and eta.series[0].ys == [7.0, 3.2, 3.1]
    assert "twice the plan's slow end" in eta.subtitle


def test_tokens_are_the_written_rows_and_partial_outputs_are_apart(tmp_path):
    """One definition, inspect's: the output tokens of the rows written, every turn of
    each; an interrupted request's partial output is counted apart, a failed row's turns
    not at all (#46)."""
    cut = RequestRecord("r2", phase="generate", server=A, model="m", t_send=3.0, t_end=3.5,
                        sent_at=3.0 + CLOCK, error_kind="cancelled", completion_tokens=5,
                        extra={"outcome": "requeued", "turn": 1})  # fmt: skip
    recs = [rec(0, A, 0.0, outcome="next"), rec(0, A, 1.0), rec(1, B, 0.0),
            rec(2, A, 2.0, outcome="next"), cut,
            rec(3, B, 1.0, outcome="next"),
            rec(3, B, 2.0, 1.0, "http_status", "failed")]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    write(path, [recs], [CLOCK])
    h = read_job_log(path)
    assert (h.row_tokens, h.partial_tokens) == (30, 5)  # r0's two turns and r1; r2's cut
    assert sum(s.tokens for s in h.servers.values()) == 50  # what the servers answered
