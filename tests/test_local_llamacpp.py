"""The local target against a real llama.cpp server (xllamacpp) and the generated model.

One small server (4 slots) serves the whole module; every request is short, so
the file stays well under a minute on two cores.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# part of the test extras: a missing one must fail the suite, not skip it
import gguf  # noqa: E402
import httpx  # noqa: E402
import pytest
import tokenizers  # noqa: F401, E402
import xllamacpp  # noqa: F401, E402

from genbench.errors import GenbenchError  # noqa: E402
from genbench.local import tinymodel  # noqa: E402
from genbench.local.llamacpp import MODEL_NAME, LocalLlamaServer  # noqa: E402

pytestmark = pytest.mark.llamacpp

PROMPTS = [
    "Hello there, how are you?",
    "Summarise the history of the printing press in three sentences.",
    "héllo wörld, 世界, emoji 🚀 and a tab\tinside",
    "def f(x):\n    return x * 2\n",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("genbench-cache")


@pytest.fixture(scope="module")
def model(cache_dir: Path) -> Path:
    return tinymodel.ensure_model("tiny", cache_dir)


@pytest.fixture(scope="module")
def server(model: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with LocalLlamaServer(model, n_parallel=4, ctx_per_slot=2048, log_path=log) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: LocalLlamaServer):
    with httpx.Client(base_url=server.root, timeout=60) as c:
        yield c


def stream_chat(server: LocalLlamaServer, body: dict) -> dict:
    """POST a streaming chat request; decode every byte strictly as UTF-8."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    out: dict = {"content": "", "reasoning": "", "kinds": "", "usage": None, "finish": None}
    # a fresh connection per stream: llama.cpp closes the socket after an SSE reply
    with (
        httpx.Client(base_url=server.root, timeout=60) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200, r.read()
        raw = b"".join(r.iter_raw())
    for line in raw.decode("utf-8", errors="strict").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            out["usage"] = d["usage"]
        for ch in d.get("choices", []):
            delta = ch.get("delta") or {}
            out["finish"] = ch.get("finish_reason") or out["finish"]
            if delta.get("reasoning_content"):
                out["reasoning"] += delta["reasoning_content"]
                out["kinds"] += "r"
            if delta.get("content"):
                out["content"] += delta["content"]
                out["kinds"] += "a"
    return out


def metrics(client: httpx.Client) -> dict[str, float]:
    text = client.get("/metrics").text
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(llamacpp:\w+) ([0-9.eE+-]+)$", text, re.MULTILINE)
    }


def chat(client: httpx.Client, **body) -> dict:
    body.setdefault("messages", [{"role": "user", "content": "Hello"}])
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------------- the model


def test_model_is_built_once_and_cached(cache_dir: Path, model: Path) -> None:
    assert model.is_file() and model.parent == cache_dir / "models"
    assert re.fullmatch(r"genbench-tiny-[0-9a-f]{12}\.gguf", model.name)
    assert model.read_bytes()[:4] == b"GGUF"
    before = model.stat()
    again = tinymodel.ensure_model("tiny", cache_dir)
    assert again == model
    after = model.stat()  # cached: the same file, not built again (not "fast": a busy host)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not list(model.parent.glob("*.tmp")), "temporary files left behind"


def test_model_metadata(model: Path) -> None:

    r = gguf.GGUFReader(model)

    def field(name: str):
        f = r.fields[name]
        return f.contents()

    assert field("general.architecture") == "llama"
    assert field("llama.embedding_length") == 512
    assert field("llama.block_count") == 4
    assert 2000 <= len(field("tokenizer.ggml.tokens")) <= 4096
    assert "<think>" in field("tokenizer.chat_template")


def test_concurrent_first_builds_agree(tmp_path: Path) -> None:
    paths: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            paths.append(tinymodel.ensure_model("tiny", tmp_path))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(paths)) == 1
    assert [p.name for p in (tmp_path / "models").iterdir()] == [paths[0].name]


def test_unknown_kind_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(GenbenchError, match="unknown local model kind"):
        tinymodel.ensure_model("huge", tmp_path)


def test_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GENBENCH_CACHE", str(tmp_path))
    assert tinymodel.model_path().parent == tmp_path / "models"


# ---------------------------------------------------------------------- the server


def test_health_and_models(server: LocalLlamaServer, client: httpx.Client) -> None:
    assert server.base_url == server.root + "/v1"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.root)
    assert client.get("/health").status_code == 200
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert ids == [MODEL_NAME]
    assert "demo" in server.description


@pytest.mark.parametrize("prompt", PROMPTS)
def test_streaming_text_is_valid_utf8_with_usage(server: LocalLlamaServer, prompt: str) -> None:
    # a hot, unfiltered sampler: suppressed tokens must stay out even so
    out = stream_chat(
        server,
        {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 48,
            "temperature": 3.0,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
        },
    )
    assert out["usage"]["completion_tokens"] == 48
    assert out["usage"]["prompt_tokens"] > 5
    assert out["finish"] == "length"
    assert out["content"].strip() and not out["reasoning"]
    assert "<|im_end|>" not in out["content"] and "</think>" not in out["content"]
    assert all(c == "\n" or c.isprintable() for c in out["content"])


def test_metrics_deltas_equal_usage(client: httpx.Client) -> None:
    before = metrics(client)
    prompt = completion = 0
    for i, n in enumerate((17, 29, 5)):
        messages = [{"role": "user", "content": f"count {i}"}]
        u = chat(client, messages=messages, max_tokens=n)["usage"]
        prompt += u["prompt_tokens"]
        completion += u["completion_tokens"]
    assert completion == 17 + 29 + 5
    deadline = time.monotonic() + 5
    while True:  # counters are bumped as a slot is released, just after the reply
        after = metrics(client)
        got_c = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
        got_p = sum(
            after[k] - before[k]
            for k in ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")
        )
        if (got_c, got_p) == (completion, prompt) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got_c == completion
    assert got_p == prompt


def test_forced_length_fields(client: httpx.Client) -> None:
    eos = "2"  # <|im_end|>: off by default, switched on by logit_bias
    for field in ("max_tokens", "max_completion_tokens", "n_predict"):
        d = chat(client, **{field: 23})
        assert d["usage"]["completion_tokens"] == 23, field
        assert d["choices"][0]["finish_reason"] == "length"
    # n_predict wins over max_tokens
    assert chat(client, max_tokens=40, n_predict=11)["usage"]["completion_tokens"] == 11
    # a likely end of reply stops early unless ignore_eos is set
    early = chat(client, max_tokens=200, logit_bias={eos: 40})
    assert early["choices"][0]["finish_reason"] == "stop"
    assert early["usage"]["completion_tokens"] < 200
    forced = chat(client, max_tokens=200, logit_bias={eos: 40}, ignore_eos=True)
    assert forced["usage"]["completion_tokens"] == 200
    assert forced["choices"][0]["finish_reason"] == "length"


def test_reasoning_split(server: LocalLlamaServer) -> None:
    think = {"chat_template_kwargs": {"enable_thinking": True}}
    base = {"messages": [{"role": "user", "content": "Think first."}], "max_tokens": 60}
    # thinking on, never closed: everything is reasoning
    out = stream_chat(server, {**base, **think})
    assert out["reasoning"] and not out["content"]
    assert out["usage"]["completion_tokens"] == 60
    # a thinking budget closes the thought: reasoning first, then the answer
    out = stream_chat(server, {**base, **think, "thinking_budget_tokens": 20})
    assert out["reasoning"] and out["content"]
    assert re.fullmatch(r"r+a+", out["kinds"])
    assert 15 <= out["kinds"].count("r") <= 20
    assert out["usage"]["completion_tokens"] == 60
    assert "<think>" not in out["content"] and "</think>" not in out["content"]
    # default: plain
    out = stream_chat(server, base)
    assert out["content"] and not out["reasoning"]


# ---------------------------------------------------------------------- lifecycle


def test_stop_ends_the_child(model: Path) -> None:
    s = LocalLlamaServer(model, n_parallel=1, ctx_per_slot=512).start()
    pid, root = s.pid, s.root
    assert pid is not None
    s.stop()
    s.stop()  # idempotent
    assert not s.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(httpx.TransportError):
        httpx.get(root + "/health", timeout=2)
    with pytest.raises(GenbenchError, match="not running"):
        _ = s.base_url


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie awaiting its reaper."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_child_exits_when_parent_dies(model: Path) -> None:
    code = (
        "import sys; from genbench.local.llamacpp import LocalLlamaServer as S;"
        f"s = S({str(model)!r}, n_parallel=1, ctx_per_slot=512).start();"
        "print(s.pid, flush=True); sys.stdin.read()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not _alive(child):
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the server outlived its parent")


def test_bad_model_fails_with_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"nope")
    with pytest.raises(GenbenchError, match="llama.cpp server exited"):
        LocalLlamaServer(bogus, n_parallel=1, ctx_per_slot=512, startup_timeout=30).start()
