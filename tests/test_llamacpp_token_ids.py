"""llama.cpp gives no token ids on its chat endpoint: `generate --token-ids auto` still
completes the job there, every row saying it is not token-exact, and `on` refuses it."""

from __future__ import annotations

import json

import orjson
import pytest
from conftest import genbench

from genbench.rows import turn_ids

pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def llama():
    from genbench.local.llamacpp import LocalLlamaServer

    with LocalLlamaServer(n_parallel=4) as srv:
        yield srv


def test_its_chat_endpoint_sends_no_ids_even_when_asked(llama):
    import httpx

    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": False,
            "return_tokens": True, "return_token_ids": True}  # fmt: skip
    r = httpx.post(llama.base_url + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200
    doc = r.json()
    assert "prompt_token_ids" not in doc and "token_ids" not in doc["choices"][0]


def test_auto_completes_the_job_and_marks_every_row(llama, tmp_path):
    inp = tmp_path / "in.jsonl"
    rows = [{"id": f"q{i}", "prompt": f"Name a colour ({i})."} for i in range(4)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", llama.base_url,
                 "--max-tokens", "8", "-c", "2", timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert "llama.cpp's chat endpoint returns no token ids" in p.stdout + p.stderr
    data = [orjson.loads(x) for f in out.glob("data-*.jsonl") for x in f.read_bytes().splitlines()]
    assert len(data) == 4
    for r in data:
        assert r["meta"]["token_ids"] == "none"
        (t,) = turn_ids(r)
        assert t.prompt is None and t.generated is None and not t.exact
    p = genbench("generate", "-i", str(inp), "-o", str(tmp_path / "on"), "--url",
                 llama.base_url, "--token-ids", "on", timeout=600)  # fmt: skip
    assert p.returncode == 10 and "gives no token ids" in p.stderr
