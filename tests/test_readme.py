"""README.md's command lines work as written, in order, against the reference server the
README names (its flags as written; the GPU hosts replaced by the sim's URL)."""

from __future__ import annotations

import re
import shlex

import orjson
from conftest import REPO, genbench

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


def test_readme_generate_inspect_and_export_write_training_rows(tmp_path):
    (tmp_path / "prompts.jsonl").write_bytes(b"".join(
        orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"story {i}"}]})
        + b"\n" for i in range(4)
    ))  # fmt: skip
    [gen] = readme_lines("generate")
    i = gen.index("--plan")  # the plan is the pilot's (a minute of its own): checked apart
    gen = gen[:i] + gen[i + 2 :]
    with SimProcess(*sim_flags()) as sim:
        p = genbench(*on_sim(gen, sim.url), cwd=tmp_path, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    for cmd in ("inspect", "export"):
        [line] = readme_lines(cmd)
        p = genbench(*line, cwd=tmp_path, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    rows = (tmp_path / "train.jsonl").read_bytes().splitlines()
    assert len(rows) == 4, p.stdout[-3000:]


def test_readme_plan_from_a_run_works_after_the_run(tmp_path):
    with SimProcess("--tps", "1000", "--thinking-tokens", "20") as sim:
        p = genbench("run", "--url", sim.url, "--out", "runs/base", "--warmup", "0",
                     "--lengths", "32", "--prompts-per-length", "1", "--concurrency", "1,2",
                     "--sweep-tokens", "64", "--requests-per-slot", "2",
                     cwd=tmp_path, timeout=300)  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
    [line] = [a for a in readme_lines("plan") if "--from" in a]
    p = genbench(*line, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "900,000" in p.stdout and (tmp_path / "runs/base/plan.json").exists()
