"""What `--serve CMD` reads from a command line, and how an engine's death is put in words,
pinned on plain values (no process started)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from genbench.engines.command import parse_command
from genbench.engines.death import error_lines, status_text, why_died
from genbench.engines.supervisor import Engine, EngineOptions, Supervisor
from genbench.errors import ExitCode, UsageError
from genbench.report.engines import intervals

pytestmark = pytest.mark.core


def test_port_placeholder_is_a_free_loopback_port_kept_in_the_url():
    c = parse_command("vllm serve /m --port {port} --max-model-len 2048")
    assert c.argv[:3] == ["vllm", "serve", "/m"] and c.argv[4] == str(c.port)
    assert c.url == f"http://127.0.0.1:{c.port}/v1" and 0 < c.port < 65536


def test_the_commands_own_port_and_host_are_read():
    assert parse_command("llama-server -m x.gguf --port 8081").url == "http://127.0.0.1:8081/v1"
    c = parse_command("python -m sglang.launch_server --host 0.0.0.0 --port=30000")
    assert c.url == "http://127.0.0.1:30000/v1"  # 0.0.0.0 is reached on loopback


def test_leading_assignments_are_the_engines_environment():
    c = parse_command("CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve m --port {port}")
    assert c.env == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_USE_V1": "1"}
    assert c.argv[0] == "vllm"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("vllm serve m", "put {port} where the port goes"),
        ("vllm serve m --port eighty", "is not a port number"),
        ("vllm serve 'm --port {port}", "No closing quotation"),
        ("A=1", "no command to run"),
    ],
)
def test_a_command_genbench_cannot_use_is_one_line_naming_the_flag(text, says):
    with pytest.raises(UsageError) as e:
        parse_command(text)
    assert str(e.value).startswith("--serve ") and says in str(e.value)
    assert "\n" not in str(e.value) and e.value.exit_code == ExitCode.USAGE


def test_the_engines_own_last_error_is_chosen_over_its_other_lines():
    log = ["INFO loading weights", "torch.OutOfMemoryError: CUDA out of memory. Tried to "
           "allocate 2.00 GiB", "INFO shutting down"]  # fmt: skip
    assert error_lines(log).startswith("torch.OutOfMemoryError: CUDA out of memory")
    bind = ["INFO starting", "OSError: [Errno 98] Address already in use", "bye"]
    assert error_lines(bind) == "OSError: [Errno 98] Address already in use"
    path = ["ValueError: /models/x does not exist", "Traceback (most recent call last):"]
    assert "does not exist" in error_lines(path)
    assert error_lines(["a", "RuntimeError: boom", "b"]) == "RuntimeError: boom"
    assert error_lines(["just a line"]) == "just a line"
    assert error_lines(["just a line"], last=False) == ""


def test_a_death_names_a_plain_last_line_as_that_not_as_its_cause():
    """The sim's start banner is no reason it died: an exit of its own shows its last line
    as its last line; a signal shows none; an error line is the cause."""
    banner = ["genbench sim listening on http://127.0.0.1:9/v1"]
    killed = why_died("engine 1", 7, -signal.SIGKILL, set(), time.monotonic(), banner)
    assert killed.line == "engine 1 (pid 7) was killed by SIGKILL", killed
    shot = why_died("engine 1", 7, 137, set(), time.monotonic(), banner)
    assert shot.line == "engine 1 (pid 7) exited with status 137 (128 + SIGKILL)", shot
    ended = why_died("engine 1", 7, 0, set(), time.monotonic(), banner)
    assert ended.line == ("engine 1 (pid 7) exited with status 0; its last line: genbench sim "
                          "listening on http://127.0.0.1:9/v1")  # fmt: skip
    failed = why_died("engine 1", 7, 1, set(), time.monotonic(), [*banner, "RuntimeError: x"])
    assert failed.line == "engine 1 (pid 7) exited with status 1: RuntimeError: x", failed


def test_exit_status_and_signal_in_words():
    assert status_text(-signal.SIGKILL) == "was killed by SIGKILL"
    assert status_text(2) == "exited with status 2"
    assert status_text(137) == "exited with status 137 (128 + SIGKILL)"


def _engine(name: str, first_up: float, downs: list[list[object]]) -> Engine:
    e = Engine(name, parse_command("x --port 1"), proc=None)  # type: ignore[arg-type]
    e.first_up, e.downs = first_up, downs
    return e


def test_availability_is_up_time_over_engine_time_recent_and_overall():
    now = time.monotonic()
    sup = Supervisor([], EngineOptions(), Path("unused.jsonl"), Path("unused"))
    # one engine up 100 s, down 20 s of them (40..20 s ago); another never down
    sup.engines = [_engine("a", now - 100, [[now - 40, now - 20, "oom"]]),
                   _engine("b", now - 100, [])]  # fmt: skip
    recent, overall = sup.availability(window=10)
    assert recent == pytest.approx(1.0)
    assert overall == pytest.approx(1 - 20 / 200, abs=1e-3)
    recent, _ = sup.availability(window=50)  # 20 s lost of 2 × 50
    assert recent == pytest.approx(1 - 20 / 100, abs=1e-3)
    assert "OOM-killed by the kernel 1 time" in (sup.summary() or "")


def test_report_reads_a_death_as_a_down_span_until_healthy_again():
    events = [
        {"at": 10.0, "engine": "engine 1", "event": "up"},
        {"at": 20.0, "engine": "engine 1", "event": "down", "cause": "oom"},
        {"at": 21.0, "engine": "engine 1", "event": "start"},
        {"at": 30.0, "engine": "engine 1", "event": "up"},
        {"at": 40.0, "engine": "engine 1", "event": "stop", "cause": "end"},
    ]
    spans = intervals(events, end=50.0)["engine 1"]
    assert [(a, z, k) for a, z, k, _ in spans] == [(10, 20, "up"), (20, 30, "down"),
                                                   (30, 40, "up")]  # fmt: skip
    assert spans[1][3]["cause"] == "oom"


def test_report_draws_a_hang_down_from_when_it_last_answered():
    events = [
        {"at": 10.0, "engine": "engine 1", "event": "up"},
        {"at": 150.0, "engine": "engine 1", "event": "down", "cause": "hang", "since": 28.0},
        {"at": 155.0, "engine": "engine 1", "event": "up"},
    ]
    spans = intervals(events, end=160.0)["engine 1"]
    assert [(a, z, k) for a, z, k, _ in spans] == [(10, 28, "up"), (28, 155, "down"),
                                                   (155, 160, "up")]  # fmt: skip


class _Availability:
    """The engines' availability as the Supervisor reports it: (last window, so far)."""

    def __init__(self, recent: float, overall: float) -> None:
        self.got = (recent, overall)

    def availability(self, window: float) -> tuple[float, float]:
        return self.got

    def states(self) -> list[dict[str, object]]:
        return []


def test_the_eta_is_carried_at_the_availability_measured_so_far():
    """A window with every engine up, after a job that had them up 80% of the time: the
    time left is the window's rate at 80%, 1/0.8 the plain ETA; a window with more down
    time than the job's share is scaled the other way."""
    from genbench.generate.progress import Progress
    from genbench.records import RequestRecord

    now = [0.0]
    prog = Progress(1000, 0, 0, ["s"], clock=lambda: now[0])
    for t in range(1, 61):  # 5 rows/s, steady
        now[0] = float(t)
        for k in range(5):
            end = {"outcome": "done"}
            prog.on_record(RequestRecord(f"x{t}-{k}", server="s", t_end=t - 0.1 * k,
                                         completion_tokens=10, extra=end))  # fmt: skip
        prog.on_durable("row", [(f"x{t}{k}", None) for k in range(5)])
    plain = prog.eta_range()
    assert plain is not None and plain.seconds == pytest.approx(700 / 5.0, rel=0.02)
    prog.engines = _Availability(1.0, 0.8)
    assert prog.eta_range().seconds == pytest.approx(plain.seconds / 0.8, rel=1e-9)
    prog.engines = _Availability(0.5, 0.8)
    assert prog.eta_range().seconds == pytest.approx(plain.seconds * 0.5 / 0.8, rel=1e-9)
    assert prog.snapshot([]).engines_availability == 0.8
