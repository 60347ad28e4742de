"""Hidden states from vLLM (CPU) with genbench's connector, held against Hugging Face.

One server with capture for the session (`vllm_hs_server`, tests/fixtures_hs.py); every
test here shares it. What is held: vLLM's file for a request is its prompt and completion
ids but the last (`include_output_tokens`), one state per id at each layer asked, and the
states are Hugging Face's forward pass of the same model on those ids within 1e-5
(float32): layers 1..L-1 its `hidden_states[i]`, layer L the input of the final norm.
"""

from __future__ import annotations

import fcntl
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from conftest import genbench
from fixtures_hs import HSServer, reference_states, trainer_reads
from holding_proxy import HoldingProxy

from genbench import tensors
from genbench.rows import turn_ids

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _chat(server: HSServer, text: str, max_tokens: int) -> dict:
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "return_token_ids": True,
        "kv_transfer_params": {"include_output_tokens": True},
    }
    r = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def _wait(path: Path) -> None:
    """As vLLM's own reader does: the connector holds the .lock until the file is whole."""
    with open(f"{path}.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)


def test_engine_states_equal_a_hugging_face_forward_pass(vllm_hs_server: HSServer):
    s = vllm_hs_server
    answers = [_chat(s, "hello there, how are you", 12), _chat(s, "a longer prompt " * 20, 5)]
    files, expected = [], []
    for a in answers:
        path = Path(a["kv_transfer_params"]["hidden_states_path"])
        assert path.parent == s.storage
        _wait(path)
        files.append(path)
        expected.append(a["prompt_token_ids"] + a["choices"][0]["token_ids"][:-1])
    for got, ids in zip(reference_states(files, s.layers), expected, strict=True):
        assert got["shape"] == [len(ids), len(s.layers), 256]
        assert got["ids"] == ids
        assert got["dtype"] == "torch.float32"
        assert max(got["diff"].values()) <= 1e-5, got
    # the write is atomic: no file under a temporary name is left behind
    assert sorted(p.name for p in s.storage.iterdir() if p.name.endswith(".tmp")) == []
    for f in files:  # the next tests look at what they leave
        f.unlink()
        Path(f"{f}.lock").unlink(missing_ok=True)


def _rows(out: Path) -> list[dict]:
    return [orjson.loads(x) for f in sorted(out.glob("data-*.jsonl"))
            for x in f.read_bytes().splitlines()]  # fmt: skip


def _lines(out: Path) -> int:
    """Rows written whole so far (a line is whole once its newline is there)."""
    return sum(f.read_bytes().count(b"\n") for f in out.glob("data-*.jsonl"))


def _wait_for(what: str, cond, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {timeout:g} s"
        time.sleep(0.05)


def _input(path: Path) -> Path:
    rows = [
        {"id": "chat-0", "messages": [{"role": "user", "content": "tell me about the sea"}]},
        {"id": "chat-1", "messages": [{"role": "user", "content": "and the mountains"}]},
        {"id": "multi", "messages": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
        ]},
    ]  # fmt: skip
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def job(vllm_hs_server, tmp_path_factory) -> dict:
    """One generate job with capture: two chats and a two-turn row, short answers."""
    s, tmp = vllm_hs_server, tmp_path_factory.mktemp("hs-job")
    out = tmp / "out"
    before = set(s.storage.glob("*-gb*"))  # another test's, killed in flight
    p = genbench("generate", "-i", str(_input(tmp / "in.jsonl")), "-o", str(out),
                 "--url", s.url, "-c", "4", "--max-tokens", "6", "--temperature", "0",
                 "--hidden-states", "--layers", "1,2,3,4", timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    left = set(s.storage.glob("*-gb*")) - before
    return {"out": out, "tmp": tmp, "turns": [t for r in _rows(out) for t in turn_ids(r)],
            "left": left}  # fmt: skip


def test_generate_keeps_each_generated_turns_states_once(job):
    out, turns = job["out"], job["turns"]
    assert len(turns) == 4  # two chats, and both turns of the multi-turn row
    names = [t.states for t in turns]
    assert None not in names and len(set(names)) == 4
    kept = (out / "hidden_states").rglob("*.safetensors")
    on_disk = sorted(str(p.relative_to(out)) for p in kept)
    assert on_disk == sorted(names)  # every turn's states, once; nothing else kept
    layers = orjson.loads((out / "hidden_states" / "layers.json").read_bytes())
    assert layers["layers"] == [1, 2, 3, 4] and layers["numbering"].startswith("vllm")
    for t in turns:  # the engine's file as it wrote it (held against Hugging Face above)
        got = tensors.read(out / t.states)
        assert got["token_ids"].array.tolist() == (t.prompt + t.generated)[:-1]
        assert got["hidden_states"].shape == (len(t.prompt) + len(t.generated) - 1, 4, 256)
    # taken (their locks too), not copied; the preflight's own test request leaves its file
    assert job["left"] == set()


@pytest.fixture(scope="module")
def fp8_job(job, vllm_hs_server) -> dict:
    """The job's rows again with `--states-fp8`, on the same engine (asked per request)."""
    out = job["tmp"] / "fp8"
    p = genbench("generate", "-i", str(job["tmp"] / "in.jsonl"), "-o", str(out), "--url",
                 vllm_hs_server.url, "-c", "4", "--max-tokens", "6", "--temperature", "0",
                 "--hidden-states", "--layers", "1,2,3,4", "--states-fp8", timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    return {"out": out, "turns": [t for r in _rows(out) for t in turn_ids(r)]}


def test_fp8_states_are_the_float32_ones_within_half_an_fp8_step(job, fp8_job, tmp_path):
    """hs-connectors' format (float8_e4m3fn, a float32 scale per token): the same ids as
    the float32 capture at temperature 0, each value within half a step of FP8's top
    binade (16/448 of its token's largest magnitude), a byte a value on disk."""
    ids = {t.states: (t.prompt, t.generated) for t in job["turns"]}  # named by row and turn
    assert {t.states: (t.prompt, t.generated) for t in fp8_job["turns"]} == ids
    for t in fp8_job["turns"]:
        got, f32 = tensors.read(fp8_job["out"] / t.states), tensors.read(job["out"] / t.states)
        assert got["hidden_states"].dtype == "F8_E4M3"
        assert got["token_ids"].array.tolist() == f32["token_ids"].array.tolist()
        want = f32["hidden_states"].floats()
        back = got["hidden_states"].scaled(got["hidden_states_scales"].floats())
        amax = abs(want).max(axis=(1, 2), keepdims=True)
        assert (abs(back - want) <= amax * 16 / 448 + 1e-12).all()
    p = genbench("inspect", str(fp8_job["out"]), "--json", "--save", str(tmp_path / "i.json"))
    hs = orjson.loads(p.stdout)["hidden_states"]
    assert (hs["ok"], hs["dtype"], hs["bytes_per_token"]) == (4, "F8_E4M3", 4 * 256 + 4 + 8)
    assert 0 < hs["off_by"] < 0.01  # the header


def test_the_trainers_own_loaders_read_the_exported_states(job, fp8_job):
    wheres = {}
    for src, tag in ((job, ""), (fp8_job, "_fp8")):
        for fmt in ("speculators-states", "specforge-states"):
            where = wheres[fmt.split("-")[0] + tag] = job["tmp"] / (fmt + tag)
            p = genbench("export", str(src["out"]), "--format", fmt, "-o", str(where),
                         "--keep-cut", "--min-tokens", "0", "--json")  # fmt: skip
            assert p.returncode == 0, p.stdout + p.stderr
            doc = orjson.loads(p.stdout)
            assert doc["samples"] == 4 and doc["layers"] == [1, 2, 3, 4]
            assert doc["last_layer"] == 4
            manifest = orjson.loads((where / "genbench_states.json").read_bytes())
            assert manifest["numbering"].startswith("vllm") and manifest["model"]
            assert ("fp8" in manifest) == bool(tag)
    reads = trainer_reads(wheres)  # one run of the trainers' python
    for g, t in zip(reads.pop("speculators_fp8"), fp8_job["turns"], strict=True):
        f = tensors.read(fp8_job["out"] / t.states)  # FP8Transfer's dequantizing is ours
        ours = f["hidden_states"].scaled(f["hidden_states_scales"].floats()).astype("f8").sum()
        assert g["sum"] == pytest.approx(ours, rel=1e-5, abs=1e-3)
        assert g["input_ids"] == (t.prompt + t.generated)[:-1]
    assert {g["dtype"] for g in reads["specforge_fp8"]} == {"torch.bfloat16"}  # dequantized
    for trainer, got in reads.items():
        turns = fp8_job["turns"] if trainer.endswith("_fp8") else job["turns"]  # their order
        assert len(got) == len(turns), trainer
        for g, t in zip(got, turns, strict=True):
            n = len(t.prompt) + len(t.generated) - 1  # the last id has no state
            assert g["input_ids"] == (t.prompt + t.generated)[:-1]
            assert sum(g["loss_mask"]) <= len(t.generated) - 1
            assert g["aux"][-2:] == [n, 3 * 256] and g["last"][-2:] == [n, 256]


def test_sigkill_mid_job_then_a_rerun_keeps_every_rows_states_once(vllm_hs_server, tmp_path):
    """genbench killed while rows are in flight (their first turns' states already moved
    in), then run again: every row once, every turn's states once, each whole and its own.

    Held by events, not clocks: the job reaches the server through a proxy that holds every
    second turn (its prompt holds HOLD), so at -c 2 the two one-turn rows are written, the
    next two rows' first turns are taken and their second turns wait at the proxy, and
    nothing more can happen before the kill, however fast or slow the machine."""
    s, out = vllm_hs_server, tmp_path / "out"
    rows = [{"id": f"k{i}", "messages": [{"role": "user", "content": f"row {i} " * (i + 1)}]}
            for i in range(2)]  # fmt: skip
    rows += [{"id": f"k{i}", "messages": [
        {"role": "user", "content": f"row {i} " * i},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": f"HOLD and go on, row {i}"},
    ]} for i in range(2, 8)]  # fmt: skip
    (tmp_path / "in.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    states = out / "hidden_states"
    with HoldingProxy(s.root, b"HOLD").running() as proxy:
        args = [sys.executable, "-m", "genbench", "generate", "-i", str(tmp_path / "in.jsonl"),
                "-o", str(out), "--url", f"{proxy.root}/v1", "-c", "2", "--max-tokens", "24",
                "--param", "ignore_eos=true", "--hidden-states", "--layers", "1,2,3,4",
                "--json"]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for("2 rows written, 2 more held in their second turn",
                      lambda: _lines(out) >= 2 and proxy.held == 2
                      and len(list(states.rglob("*.safetensors"))) >= 4)  # fmt: skip
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert _lines(out) == 2  # killed mid-job: k2 and k3 in flight, k4.. not started
        assert len(list(states.rglob("*.safetensors"))) == 4  # k2's and k3's first turns too
        proxy.open()
        p = genbench(*args[3:], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    done = _rows(out)
    assert sorted(r["id"] for r in done) == sorted(r["id"] for r in rows)
    turns = [t for r in done for t in turn_ids(r)]
    assert len(turns) == 2 + 2 * 6
    kept = sorted(str(p.relative_to(out)) for p in states.rglob("*.safetensors"))
    assert kept == sorted(t.states for t in turns)  # once each, no orphan of the killed run
    for t in turns:
        got = tensors.read(out / t.states)
        assert got["token_ids"].array.tolist() == (t.prompt + t.generated)[:-1]
        assert got["hidden_states"].shape[:2] == (len(t.prompt) + 23, 4)


def test_a_write_refused_mid_job_exits_12_and_loses_nothing(vllm_hs_server, tmp_path):
    """The kernel refuses genbench a write mid-job: RLIMIT_FSIZE on its process, set just
    above the largest file it writes (the data shard of two rows done before), so the next
    rows' append fails with EFBIG, the errno path a full disk's ENOSPC takes too (a tmpfs
    or a quota needs privileges CI lacks). Exit 12, one line; the rows and states written
    before are intact, nothing torn is kept, and a rerun finishes each row's states once."""
    s, out, inp = vllm_hs_server, tmp_path / "out", tmp_path / "in.jsonl"
    rows = [{"id": f"f{i}", "messages": [{"role": "user", "content": f"fill {i} " * (i + 1)}]}
            for i in range(6)]  # fmt: skip
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    args = ("generate", "-i", str(inp), "-o", str(out), "--url", s.url, "-c", "2",
            "--max-tokens", "8", "--hidden-states", "--layers", "1,2,3,4")  # fmt: skip
    assert genbench(*args, "--limit", "2", timeout=300).returncode == 0
    data = sorted(out.glob("data-*.jsonl"))
    kept = {f: f.read_bytes() for f in data}
    before = [t for r in _rows(out) for t in turn_ids(r)]
    states = {t.states: (out / t.states).read_bytes() for t in before}
    ours = [f for f in out.rglob("*") if f.is_file() and "hidden_states" not in f.parts]
    limit = max(f.stat().st_size for f in ours) + 64  # less than one more row's line

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = subprocess.run([sys.executable, "-m", "genbench", *args], capture_output=True,
                       text=True, timeout=300, preexec_fn=limited)  # fmt: skip
    assert p.returncode == 12, p.stdout + p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "Traceback" not in p.stderr and "File too large" in line and "ulimit -f" in line
    for f, b in kept.items():  # what was written before: whole (a torn tail after it is cut)
        assert f.read_bytes()[: len(b)] == b
    for name, b in states.items():
        assert (out / name).read_bytes() == b
    assert [f for f in out.rglob("*.tmp")] == []  # no half-written file at any name
    again = genbench(*args, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    done = _rows(out)
    assert sorted(r["id"] for r in done) == sorted(r["id"] for r in rows)
    turns = [t for r in done for t in turn_ids(r)]
    found = (out / "hidden_states").rglob("*.safetensors")
    assert sorted(str(f.relative_to(out)) for f in found) == sorted(t.states for t in turns)
    for t in turns:  # once each, none orphaned, each its own turn's
        got = tensors.read(out / t.states)["token_ids"].array.tolist()
        assert got == (t.prompt + t.generated)[:-1]


def test_capture_afterwards_gives_the_states_captured_while_generating(job, vllm_hs_server):
    """`genbench hidden-states` on the same rows without their states (a copy of the data
    files alone): a prefill per turn of its exact ids gives what capture while generating
    gave, within 1e-5; a second run asks nothing (resumable by file)."""
    s, src = vllm_hs_server, job["out"]
    copy = job["tmp"] / "afterwards"
    (copy / ".genbench").mkdir(parents=True)
    for f in src.glob("data-*.jsonl"):  # the rows, their turns naming no states here
        rows = [orjson.loads(x) for x in f.read_bytes().splitlines()]
        for r in rows:
            for t in r["conversations"]:
                t.pop("hidden_states", None)
        (copy / f.name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    args = ("hidden-states", str(copy), "--url", s.url, "--layers", "1,2,3,4", "--json")
    p = genbench(*args, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert orjson.loads(p.stdout)["captured"] == 4
    for t in job["turns"]:
        before = tensors.read(src / t.states)
        after = tensors.read(copy / t.states)  # the same name: the row's id and the turn
        assert after["token_ids"].array.tolist() == before["token_ids"].array.tolist()
        diff = abs(after["hidden_states"].floats() - before["hidden_states"].floats()).max()
        assert diff <= 1e-5
    again = genbench(*args, timeout=300)
    assert again.returncode == 0 and orjson.loads(again.stdout)["already"] == 4
    where = job["tmp"] / "afterwards-export"
    p = genbench("export", str(copy), "--format", "speculators-states", "-o", str(where),
                 "--keep-cut", "--min-tokens", "0")  # fmt: skip
    assert p.returncode == 0 and len(list((where / "hidden_states").iterdir())) == 4
    # in FP8 (--states-fp8): the same ids, within half an FP8 step of the float32 states
    fp8 = job["tmp"] / "afterwards-fp8"
    (fp8 / ".genbench").mkdir(parents=True)
    for f in copy.glob("data-*.jsonl"):
        (fp8 / f.name).write_bytes(f.read_bytes())
    p = genbench("hidden-states", str(fp8), *args[2:], "--states-fp8", timeout=300)
    assert p.returncode == 0 and orjson.loads(p.stdout)["captured"] == 4, p.stderr
    for t in job["turns"]:
        got, want = tensors.read(fp8 / t.states), tensors.read(src / t.states)
        assert got["token_ids"].array.tolist() == want["token_ids"].array.tolist()
        back = got["hidden_states"].scaled(got["hidden_states_scales"].floats())
        want_f = want["hidden_states"].floats()
        assert (abs(back - want_f) <= abs(want_f).max(axis=(1, 2), keepdims=True) / 28).all()
    mixed = genbench("hidden-states", str(copy), *args[2:], "--states-fp8", timeout=300)
    assert mixed.returncode != 0 and "its hidden states are F32" in mixed.stderr


def test_inspect_checks_each_turns_states_and_their_bytes(job, tmp_path):
    """inspect reads every turn's file as it was taken; a file damaged since is named."""
    out = job["out"]
    p = genbench("inspect", str(out), "--json", "--save", str(tmp_path / "i.json"))
    assert p.returncode == 0, p.stdout + p.stderr
    hs = orjson.loads(p.stdout)["hidden_states"]
    assert (hs["turns"], hs["ok"], hs["missing"], hs["bad"]) == (4, 4, 0, 0)
    assert hs["layers"] == [1, 2, 3, 4] and hs["dtype"] == "F32" and hs["hidden_size"] == 256
    assert hs["bytes_per_token"] == 4 * 256 * 4 + 8  # the states and the token's id
    assert 0 < hs["off_by"] < 0.01  # the bytes are the forecast's, the header aside
    damaged = out / job["turns"][0].states
    keep = damaged.read_bytes()
    try:
        damaged.write_bytes(keep[:-4])  # cut short
        hs = orjson.loads(genbench("inspect", str(out), "--json", "--save",
                                   str(tmp_path / "j.json")).stdout)["hidden_states"]  # fmt: skip
        assert hs["bad"] == 1 and "cut short" in hs["examples"][0]
    finally:
        damaged.write_bytes(keep)
