"""What a later turn is sent under `--turns all` (docs/generate.md, "What a later turn is
sent"), read back from what the server saw: the sim, asked for token ids as vLLM gives
them, returns each request's prompt as its ids (one per word of each message's content,
between role and end marks), so the second turn's `prompt_token_ids` show the history as
sent, word for word.
"""

from __future__ import annotations

import json

from conftest import genbench
from sim_truth import FAST

from genbench.sim.ids import prompt_ids


def test_a_later_turn_is_sent_the_earlier_answers_without_their_thinking(sim_factory, tmp_path):
    # thinking inline in content (a server without a reasoning parser); a row that says
    # NEVER thinks past max_tokens: its thinking never closes
    sim = sim_factory(*FAST, "--thinking-tokens", "6", "--output-len", "fixed:20",
                      "--token-ids", "vllm", "--fault", "inline-think:count=0",
                      "--fault", "unclosed:match=NEVER")  # fmt: skip
    rows = [
        {"id": "a", "messages": [{"role": "user", "content": "first question"},
                                 {"role": "assistant", "content": "an old answer"},
                                 {"role": "user", "content": "second question"}]},
        {"id": "b", "messages": [{"role": "user", "content": "NEVER stop thinking"},
                                 {"role": "assistant", "content": "old"},
                                 {"role": "user", "content": "and then"}]},
    ]  # fmt: skip
    src, out = tmp_path / "in.jsonl", tmp_path / "out"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = genbench("generate", "-i", str(src), "-o", str(out), "--url", sim.url, "--turns", "all",
                 "--max-tokens", "30", "--keep-raw")  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    got = {r["id"]: r for f in out.glob("data*.jsonl") for r in map(json.loads, f.open())}
    for rid, row in rows_by_id(rows).items():
        u1, _, u2 = row["messages"]
        first, second = (t for t in got[rid]["conversations"] if t["role"] == "assistant")
        # the history as sent: the earlier answer's text after </think>, its thinking out
        sent = [u1, {"role": "assistant", "content": first["content"]}, u2]
        assert second["prompt_token_ids"] == prompt_ids(sent), rid
        assert first["reasoning_content"]  # it thought, and that stayed out of the history
    a = [t for t in got["a"]["conversations"] if t["role"] == "assistant"][0]
    assert a["raw"] == "<think>" + a["reasoning_content"] + "</think>" + a["content"]  # inline
    assert a["content"].strip()
    # thinking that never closed: no answer, so an empty assistant message goes back
    b, b2 = (t for t in got["b"]["conversations"] if t["role"] == "assistant")
    assert b["content"] == "" and b["finish_reason"] == "length"
    n = len(prompt_ids(rows[1]["messages"][:1]))
    assert b2["prompt_token_ids"][n : n + 4] == [1, 7, 2, 3]  # start, assistant, end: no words


def rows_by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}
