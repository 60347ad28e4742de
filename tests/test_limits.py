"""Open-file limits: a command raises its soft limit to what its streams need, and refuses
in one line, before sending anything, when the hard limit is too low
(genbench.transport.open_files)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from genbench.sim.process import SimProcess
from genbench.transport.open_files import descriptors_needed, refusal, suggested_limit

resource = pytest.importorskip("resource")
pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")

HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def limited(soft: int, hard: int | None = None) -> Callable[[], None]:
    """A preexec_fn: the child starts as under `ulimit -Sn soft` (and `-Hn hard`)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, HARD if hard is None else hard))

    return apply


def genbench_limited(
    soft: int, hard: int | None, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "genbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=limited(soft, hard),
    )


def requests_seen(root: str) -> dict[str, float]:
    """The sim's count of HTTP requests it received, by endpoint."""
    with urllib.request.urlopen(root + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        m[1]: float(m[2])
        for m in re.finditer(r'^sim:requests_total\{endpoint="(\w+)"\} (\S+)', text, re.M)
    }


def write_prompts(path: Path, n: int) -> list[str]:
    ids = [f"row-{i}" for i in range(n)]
    with open(path, "wb") as f:
        for i in ids:
            f.write(orjson.dumps({"id": i, "messages": [{"role": "user", "content": i}]}) + b"\n")
    return ids


def test_need_is_open_files_plus_streams_plus_a_few_per_server_plus_margin() -> None:
    one = descriptors_needed(1400, 1, open_now=20)
    assert one == 20 + 1400 + 4 + 32 + 32 + 140
    # 16 servers cost 4 more each, not another set of streams
    assert descriptors_needed(1400, 16, open_now=20) == one + 15 * 4
    assert suggested_limit(one) == 2048 and suggested_limit(2048) == 2048


def test_refusal_is_one_line_with_need_allowance_and_the_fix() -> None:
    line = refusal(1614, 1400, 1, 1024, "-c/--concurrency")
    assert "\n" not in line
    assert "needs ~1,614 file descriptors for 1,400 streams to 1 server" in line
    assert "allows at most 1,024 (hard limit)" in line
    assert "`ulimit -Hn 2048`" in line and line.endswith("or lower -c/--concurrency")


def test_soft_limit_is_raised_to_the_need_and_the_hard_limit_kept() -> None:
    if HARD != resource.RLIM_INFINITY and HARD < 4096:
        pytest.skip(f"the hard limit here is {HARD}: nothing to raise the soft limit to")
    code = (
        "import resource; from genbench.transport.open_files import fit_descriptors as f;"
        " d = f(3000, 2);"
        "print(d.need, d.raised_from, *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limited(1024)
    )
    need, before, soft, hard = map(int, p.stdout.split())
    assert before == 1024 and soft == need > 3000 and hard == HARD


def test_sim_takes_all_the_descriptors_it_may_have() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip("needs a finite hard limit above 1,024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # inherited by the sim
    try:
        sim = SimProcess().start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert sim.proc is not None
        limits = Path(f"/proc/{sim.proc.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert row.split()[3:5] == [str(hard), str(hard)]
    finally:
        sim.close()


def test_generate_1400_streams_under_a_soft_limit_of_1024(sim_factory, tmp_path: Path) -> None:
    """The issue's case: `ulimit -Sn 1024`, one sim, -c 1400 over 1,500 rows."""
    if HARD != resource.RLIM_INFINITY and HARD < 2048:
        pytest.skip(f"the hard limit here is {HARD}: 1,400 streams cannot fit")
    sim = sim_factory("--tps", "50", "--per-seq-ms", "0", "--ttft-ms", "10", "--max-batch", "2048")
    ids = write_prompts(tmp_path / "in.jsonl", 1500)
    out = tmp_path / "out"
    p = genbench_limited(
        1024, None, "generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out),
        "--url", sim.url, "-c", "1400", "--max-tokens", "8", "--param", "ignore_eos=true",
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [line for f in out.glob("data-*.jsonl") for line in f.read_bytes().splitlines()]
    written = [orjson.loads(line)["id"] for line in lines]
    assert sorted(written) == sorted(ids)  # every id exactly once
    errors = out / "errors.jsonl"
    assert not errors.exists() or errors.stat().st_size == 0
    assert requests_seen(sim.root)["chat"] >= 1500


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "-i", "{inp}", "-o", "{out}", "--url", "{url}", "-c", "1400"],
        ["run", "--url", "{url}", "--concurrency", "1,64,1400", "--out", "{out}"],
        ["plan", "--prompts", "{inp}", "--url", "{url}", "--concurrency", "1400"],
    ],
    ids=["generate", "run", "plan"],
)
def test_hard_limit_too_low_refuses_before_any_request(
    command: list[str], sim_factory, tmp_path: Path
) -> None:
    sim = sim_factory()
    write_prompts(tmp_path / "in.jsonl", 10)
    fill = {"inp": str(tmp_path / "in.jsonl"), "out": str(tmp_path / "out"), "url": sim.url}
    p = genbench_limited(1024, 1024, *(a.format(**fill) for a in command), timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert re.fullmatch(
        r"genbench: error: genbench needs ~1,\d{3} file descriptors for 1,400 streams to 1 "
        r"server, but this shell allows at most 1,024 \(hard limit\): raise it with "
        r"`ulimit -Hn 2048` as root .*, or lower -(c/-)?-concurrency",
        lines[0],
    ), lines[0]
    assert requests_seen(sim.root) == {"chat": 0, "models": 0, "health": 0}
    assert not (tmp_path / "out").exists()


def test_check_needs_few_and_passes_under_a_low_hard_limit(sim_factory) -> None:
    sim = sim_factory("--ttft-ms", "1")
    p = genbench_limited(128, 128, "check", "--url", sim.url)
    assert p.returncode == 0, p.stderr
