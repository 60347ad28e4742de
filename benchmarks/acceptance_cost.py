"""What reading each request's speculative acceptance costs the client per chunk, against the
parser before it existed, in one run.

Issue #34's bar: client CPU per chunk with the acceptance fields on stays within 5% of
without. Acceptance rides on a stream's last chunks (vLLM: `metrics.speculative_decoding`
on the usage chunk; SGLang: `sglext.spec_tokens_details` in a `choices: []` chunk before
it), so the one stream parser reads it apart from the chunks that carry text. Four
parsers a round, the order reversed every other round, each in its own process
(`StreamParser` alone, one SSE message per `feed`, as a real server's reads come; CPU by
process_time):

  base        the parser at --baseline-rev (before acceptance), on a plain stream
  plain       this revision, a plain stream (what the reading costs a stream without it)
  vllm        this revision, vLLM's fields on the usage chunk (read and kept)
  sglang      this revision, SGLang's sglext chunk before the usage chunk (read and kept)

    .venv/bin/python benchmarks/acceptance_cost.py --baseline-rev 09afd0e
    .venv/bin/python benchmarks/acceptance_cost.py --baseline-rev 09afd0e --rounds 9 --tokens 64

Results: a table on stdout and JSON in benchmarks/results/ (benchmarks/README.md,
"Speculative acceptance").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from ceiling_report import loadavg  # noqa: E402

VLLM = {"speculative_decoding": {
    "mean_acceptance_length": 3.1, "draft_acceptance_rate": 0.7,
    "acceptance_histogram": [5, 9, 20, 30],
    "num_spec_steps": 64, "num_accepted_draft_tokens": 134, "num_draft_tokens": 192,
    "num_spec_tokens": 3}}  # fmt: skip
SGLANG = {"spec_tokens_details": {
    "spec_accept_rate": 0.7, "spec_accept_length": 4.0, "spec_cap_length": 3.0,
    "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 134,
    "spec_num_proposed_drafts": 192,
    "spec_verify_ct": 64, "spec_correct_drafts_histogram": [5, 9, 20, 30],
    "spec_cap_lens_histogram": []}}  # fmt: skip

# runs in a child process on the `src` given: µs a text chunk, over `n` streams
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import genbench
from genbench.records import RequestRecord
from genbench.transport.stream import StreamParser
assert genbench.__file__.startswith(sys.argv[1]), genbench.__file__  # the copy asked for
msgs = [m.encode() for m in json.loads(sys.stdin.read())]
n, text = int(sys.argv[2]), int(sys.argv[3])
for _ in range(max(1, n // 10)):  # warm
    p = StreamParser(RequestRecord(id="x"), 0.0, False)
    for m in msgs: p.feed(m, 0.1)
    p.finish()
t = time.process_time()
for _ in range(n):
    p = StreamParser(RequestRecord(id="x"), 0.0, False)
    for m in msgs: p.feed(m, 0.1)
    p.finish()
us = 1e6 * (time.process_time() - t) / (n * text)
print(json.dumps({"us_per_chunk": us, "spec": getattr(p.rec, "spec", None) is not None}))
"""


def messages(tokens: int, dialect: str | None) -> list[str]:
    """One stream as SSE messages: a role chunk, `tokens` text chunks, the finish chunk, the
    acceptance (by dialect) and usage chunks, [DONE]."""
    head = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk",
            "created": 1767225600, "model": "bench-model"}  # fmt: skip

    def sse(obj: dict[str, Any]) -> str:
        return "data: " + json.dumps({**head, **obj}, separators=(",", ":")) + "\n\n"

    out = [sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    out += [sse({"choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]})
            for i in range(tokens)]  # fmt: skip
    out.append(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    usage = {"prompt_tokens": 40, "completion_tokens": tokens, "total_tokens": 40 + tokens}
    if dialect == "sglang":
        out.append(sse({"choices": [], "sglext": SGLANG}))
    last: dict[str, Any] = {"choices": [], "usage": usage}
    if dialect == "vllm":
        last["metrics"] = VLLM
    out.append(sse(last))
    return [*out, "data: [DONE]\n\n"]


def measure(src: Path, dialect: str | None, a: argparse.Namespace) -> dict[str, Any]:
    msgs = json.dumps(messages(a.tokens, dialect))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-c", CHILD, str(src), str(a.streams), str(a.tokens)]
    res = subprocess.run(cmd, input=msgs, capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout)


def read_cost(tokens: int) -> list[str]:
    """The reading alone, in this process: µs a stream for what `StreamParser._event` does
    of acceptance on the chunks it sees (the finish, acceptance and usage chunks), with and
    without the fields."""
    import timeit

    import orjson

    from genbench.transport import acceptance

    def _event_part(obj: dict[str, Any]) -> Any:  # stream.py's guard, then the reading
        choice = (obj.get("choices") or [None])[0]
        if (
            "metrics" in obj
            or "sglext" in obj
            or "meta_info" in obj
            or (type(choice) is dict and "meta_info" in choice)
        ):
            return acceptance.read(obj, choice)
        return None

    def _choice_only(obj: dict[str, Any]) -> Any:  # what `_event` does anyway: the harness
        return (obj.get("choices") or [None])[0]

    out = []
    n = 20000
    for dialect in (None, "vllm", "sglang"):
        objs = [orjson.loads(m[6:]) for m in messages(tokens, dialect)[-4:-1]]
        us = 1e6 * timeit.timeit(lambda o=objs: [_event_part(x) for x in o], number=n) / n
        us -= 1e6 * timeit.timeit(lambda o=objs: [_choice_only(x) for x in o], number=n) / n
        out.append(f"read: {dialect or 'plain'}: {us:.2f} us a stream = {us / tokens:.4f} us a "
                   f"chunk at {tokens} chunks")  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline-rev", required=True, help="the revision before acceptance")
    p.add_argument("--tokens", type=int, default=256, help="text chunks per stream")
    p.add_argument("--streams", type=int, default=2000, help="streams per measurement")
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gb-accept-cost-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", a.baseline_rev, "src"],
                             capture_output=True, check=True)  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    here = REPO / "src"
    parsers = [("base", tmp / "src", None), ("plain", here, None), ("vllm", here, "vllm"),
               ("sglang", here, "sglang")]  # fmt: skip
    print(f"acceptance cost: {a.tokens} chunks a stream, {a.streams} streams a measurement; "
          f"load {loadavg()}")  # fmt: skip
    rows = []
    for k in range(a.rounds):
        for name, src, dialect in parsers if k % 2 == 0 else parsers[::-1]:
            r = measure(src, dialect, a)
            rows.append({"round": k, "parser": name, **r, "load": loadavg()})
            print(f"  round {k} {name:<7} {r['us_per_chunk']:.3f} us/chunk  acceptance kept "
                  f"{r['spec']}", flush=True)  # fmt: skip
    med = {n: statistics.median(r["us_per_chunk"] for r in rows if r["parser"] == n)
           for n, _, _ in parsers}  # fmt: skip
    table = ["| parser | µs/chunk (median) | × base | × plain |", "|---|---:|---:|---:|"]
    table += [f"| {n} | {v:.3f} | {v / med['base']:.3f} | {v / med['plain']:.3f} |"
              for n, v in med.items()]  # fmt: skip
    table += read_cost(a.tokens)
    print("\n".join(table) + f"\nload {loadavg()}")
    res = HERE / "results" / f"acceptance_cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    res.parent.mkdir(exist_ok=True)
    res.write_text(json.dumps({"args": vars(a), "rows": rows, "table": table}, indent=1))
    print(f"→ {res}")


if __name__ == "__main__":
    main()
