"""The words under a run's sweep: each said only when the run shows what it explains."""

from __future__ import annotations

import pytest

from genbench.run.readings import sweep_readings, unstable_note

pytestmark = pytest.mark.core


def phase(kind: str, c: int | None, tokens: int, **summary: object) -> dict[str, object]:
    return {"kind": kind, "concurrency": c, "max_tokens": tokens, "summary": summary,
            "client": summary.pop("client", {})}  # fmt: skip


def run_doc(*phases: dict[str, object], local: bool = False) -> dict[str, object]:
    return {"target": {"local_demo": local}, "phases": list(phases)}


STEADY = {"steady_stable": True, "steady_halves_tps": (600.0, 610.0)}


def test_a_steady_run_whose_numbers_agree_needs_no_words():
    doc = run_doc(
        phase("single", None, 128, decode_tps={"mean": 300.0}),
        phase("burst", 1, 128, output_tps=290.0, decode_tps={"p50": 305.0}),
        phase("sustained", 1, 128, steady_tps=295.0, decode_tps={"p50": 306.0}, **STEADY),
    )
    assert sweep_readings(doc) == []


def test_burst_below_sustained_is_explained_and_above_is_named():
    doc = run_doc(
        phase("burst", 16, 128, output_tps=527.9), phase("sustained", 16, 128, steady_tps=635.1,
                                                          **STEADY),
        phase("burst", 32, 128, output_tps=700.0), phase("sustained", 32, 128, steady_tps=600.0,
                                                          **STEADY),
    )  # fmt: skip
    below, above = sweep_readings(doc)
    assert below.startswith("burst more than 5% below sustained (C=16): a burst's rate is its")
    assert "steady window, C requests in flight throughout" in below
    assert above.startswith("burst more than 5% above sustained (C=32): the two phases ran")


def test_single_stream_against_c1_names_length_mean_median_and_the_move():
    # the numbers: single stream 270.8–293.2, the sweep's C=1 315.3 per request
    doc = run_doc(
        phase("single", None, 128, decode_tps={"mean": 293.2}),
        phase("single", None, 256, decode_tps={"mean": 280.0}),
        phase("single", None, 512, decode_tps={"mean": 270.8}),
        phase("sustained", 1, 128, steady_tps=300.0, decode_tps={"p50": 315.3}, **STEADY),
    )
    (line,) = sweep_readings(doc)
    assert line.startswith("single stream (270.8–293.2 tok/s) against C=1's 315.3 tok/s")
    assert "a longer output decodes over a longer context" in line
    assert "the median of its requests at 128 tokens" in line
    assert line.endswith("at 128 tokens the two read 293.2 and 315.3 (+7.5%): the server's "
                         "speed moved between them")  # fmt: skip


def test_an_unstable_window_on_a_busy_machine_says_so_in_words():
    shaky = {"steady_stable": False, "steady_halves_tps": (581.8, 826.3),
             "client": {"host_load": 9.2, "host_cpus": 2}}  # fmt: skip
    doc = run_doc(phase("sustained", 4, 128, steady_tps=704.0, **shaky), local=True)
    star, why = sweep_readings(doc)
    assert star == ("* unstable (C=4): the steady window's first and second halves ran more "
                    "than 5% apart (C=4: 581.8 and 826.3 tok/s), so no one rate describes it: "
                    "the server's speed moved while it was measured")  # fmt: skip
    assert why.startswith("this machine was busy (load 9.2 on 2 cores): other programs took")
    # a quiet machine: the demo shares its cores; a remote server: a longer window, repeats
    shaky["client"] = {"host_load": 1.1, "host_cpus": 2}
    doc = run_doc(phase("sustained", 4, 128, steady_tps=704.0, **dict(shaky)), local=True)
    assert sweep_readings(doc)[1].startswith("the demo server shares this machine's cores")
    doc = run_doc(phase("sustained", 4, 128, steady_tps=704.0, **dict(shaky)))
    assert "--repeat 3" in sweep_readings(doc)[1]
    # genbench's own client is about one core of the load: busy means above cores + 1
    for load, busy in ((3.0, False), (3.2, True)):
        shaky["client"] = {"host_load": load, "host_cpus": 2}
        doc = run_doc(phase("sustained", 4, 128, steady_tps=704.0, **dict(shaky)), local=True)
        assert sweep_readings(doc)[1].startswith("this machine was busy") is busy, load


def test_the_phase_note_gives_both_halves():
    assert unstable_note((581.8, 826.3)) == (
        "steady window not stable: its first half ran at 581.8 tok/s, its second at "
        "826.3 tok/s (more than 5% apart)"
    )


def test_a_list_a_note_gives_is_the_table_rows_with_its_threshold_said():
    """The demo's C=4 read burst 464.4 < sustained 486.6 (4.6%): within the threshold, and
    said so beside the levels that are past it (#46)."""
    doc = run_doc(
        phase("burst", 1, 128, output_tps=40.0), phase("sustained", 1, 128, steady_tps=50.0,
                                                        **STEADY),
        phase("burst", 4, 128, output_tps=464.4), phase("sustained", 4, 128, steady_tps=486.6,
                                                         **STEADY),
    )  # fmt: skip
    (below,) = sweep_readings(doc)
    assert below.startswith("burst more than 5% below sustained (C=1; within 5%, read as one "
                            "rate: C=4): ")  # fmt: skip


def test_no_general_claim_the_table_contradicts():
    # longer outputs read faster here: the note does not say they decode slower
    doc = run_doc(
        phase("single", None, 256, decode_tps={"mean": 338.4}),
        phase("single", None, 512, decode_tps={"mean": 429.5}),
        phase("sustained", 1, 128, steady_tps=300.0, decode_tps={"p50": 250.0}, **STEADY),
    )
    (line,) = sweep_readings(doc)
    assert "slower per token" not in line and line.startswith("single stream (338.4–429.5")


def test_a_window_of_fewer_than_two_waves_is_not_called_sustained():
    doc = run_doc(phase("sustained", 8, 128, steady_tps=300.0, requests=8, **STEADY),
                  phase("sustained", 2, 128, steady_tps=100.0, requests=6, **STEADY))  # fmt: skip
    (line,) = sweep_readings(doc)
    assert line.startswith("not sustained (C=8: 8 requests, 1.0 waves): fewer than two waves")
