"""README.md's command lines work as written, in order, against the reference server the
README names (its flags as written; the GPU hosts replaced by the sim's URL)."""

from __future__ import annotations

import re
import shlex

import orjson
import pytest
from conftest import REPO, genbench
from tests_helpers import sim_metric

from genbench.fmt import program
from genbench.sim.process import SimProcess

README = (REPO / "README.md").read_text()


def readme_lines(command: str) -> list[list[str]]:
    """The README's `.venv/bin/genbench COMMAND ...` lines, as argument lists (comments cut)."""
    out = []
    for line in README.splitlines():
        line = line.strip().strip("`")
        if line.startswith(f".venv/bin/genbench {command} "):
            out.append(shlex.split(line.split("  #")[0], comments=True)[1:])
    return out


def sim_flags() -> list[str]:
    """The flags of the README's sim line, less its --port (the test picks a free one)."""
    m = re.search(r"`\.venv/bin/genbench sim ([^`]+)`", README)
    assert m, "README names no sim line"
    args = shlex.split(m.group(1))
    i = args.index("--port")
    return args[:i] + args[i + 2 :]


def on_sim(args: list[str], url: str) -> list[str]:
    return [url if re.match(r"http://[\w.]+:\d+/v1$", a) else a for a in args]


# the sizes a test can afford, added after the README's own flags (the last of a flag wins):
# a sim fast enough for seconds, lengths that spread (the bar has a width to land in)
SIM_FAST = ("--tps", "200", "--output-len", "lognormal:40:0.5", "--thinking-tokens", "10")
RUN_SMALL = ("--skip", "warmup,single", "--shape", "sustained", "-c", "2",
             "--sweep-tokens", "64", "--requests-per-slot", "2")  # fmt: skip
N = 96
PILOT_SMALL = ("--samples", str(N), "--pilot", "48", "--warmup-time", "1", "-c", "8")


def readme_line(command: str, *having: str) -> list[str]:
    [line] = [a for a in readme_lines(command) if all(h in " ".join(a) for h in having)]
    return line


def test_readme_walk_from_check_to_report_ends_inside_the_plans_bar(tmp_path):
    """README's walk as written (check, run, plan from the run, a pilot, a re-plan,
    generate --plan, inspect, export, report) on two sims standing for its servers, at a
    size a test affords: each command succeeds, each ending's next command is the README's,
    the job runs the plan's configuration and ends inside the plan's bar."""
    (tmp_path / "prompts.jsonl").write_bytes(b"".join(
        orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"story {i}"}]})
        + b"\n" for i in range(N)
    ))  # fmt: skip

    def walk(line: list[str], *small: str, timeout: float = 120) -> str:
        args = [hosts.get(a, a) for a in line] + list(small)
        p = genbench(*args, cwd=tmp_path, timeout=timeout)
        assert p.returncode == 0, (args, p.stdout[-3000:], p.stderr[-3000:])
        return p.stdout

    with SimProcess(*sim_flags(), *SIM_FAST) as a, SimProcess(*sim_flags(), *SIM_FAST) as b:
        hosts = {"http://127.0.0.1:8000/v1": a.url, "http://gpu1:8000/v1": a.url,
                 "http://gpu2:8000/v1": b.url}  # fmt: skip
        walk(readme_line("check"))
        said = walk(readme_line("run", "--out runs/base"), *RUN_SMALL)
        # genbench as run here (`python -m genbench`: test_replan checks how it is named)
        g = program(str(REPO / "src/genbench/__main__.py"))
        assert f"next: {g} plan --from runs/base --samples N --tokens-per-sample T" in said
        said = walk(readme_line("plan", "--from runs/base"))
        assert "900,000" in said and (tmp_path / "runs/base/plan.json").exists()
        said = walk(readme_line("plan", "--prompts"), *PILOT_SMALL)
        nxt = f"next: {g} generate -i prompts.jsonl -o out/job --url {a.url} --plan plans/job"
        assert nxt in said, said
        said = walk(readme_line("plan", "--from plans/job"))  # nothing sent: a's count holds
        # the figure asked for, in days only from a day on (a fast sim's job is hours)
        assert re.search(r"the job: 900,000 samples on 4 servers: [\d.,]+ (s|min|h) \(95%: "
                         r"|the job: 900,000 samples on 4 servers: [\d.,]+ h = [\d.,]+ days",
                         said), said  # fmt: skip
        behind = sim_behind_s(a) + sim_behind_s(b)
        said = walk(readme_line("generate"))
        behind = sim_behind_s(a) + sim_behind_s(b) - behind
    # the plan's configuration, none departed from; the job ends inside the plan's bar
    assert "plan's configuration: C=8 per server; 2 servers; " in said and "departs" not in said
    assert "; this job runs it as planned" in said
    took = float(re.search(r"the job took ([\d.]+) s", said)[1])
    if behind > 0.15 * took:  # a starved host, not the server: the sims said so
        pytest.skip(f"host too loaded: the sims fell {behind:.1f} s behind in a {took:.1f} s job")
    assert "inside its bar" in said, said[-1500:]
    # one count, one meaning: generate's ending, inspect and merge on one output directory
    assert f"rows: {N} done, 0 failed of {N}" in said
    tokens = int(re.search(r"tokens: ([\d,]+) \(", said)[1].replace(",", ""))
    assert f"every input id exactly once: {N} of {N}" in walk(["merge", "out/"])
    walk(readme_line("inspect"))  # out/'s inspection, written into the copy (out/ only read)
    seen = orjson.loads((tmp_path / "out-clean/inspect.json").read_bytes())
    overall = seen["distributions"]["overall"]
    assert overall["rows"] == N and round(overall["output_tokens"]["mean"] * N) == tokens
    assert not (tmp_path / "out/inspect.json").exists()
    walk(readme_line("export"))
    kept = sum(1 for f in (tmp_path / "out-clean").glob("data-*.jsonl")
               for _ in f.read_bytes().splitlines())  # fmt: skip
    assert kept and len((tmp_path / "train.jsonl").read_bytes().splitlines()) >= kept
    walk(readme_line("report", "walk.html"))
    page = (tmp_path / "walk.html").read_text()
    assert f"{tokens:,} output tokens of the rows written" in page  # the report's count too


def sim_behind_s(sim: SimProcess) -> float:
    """Seconds the sim has shifted its decode schedule because the host starved it."""
    return sim_metric(sim.root, "decode_resync_seconds_total")
