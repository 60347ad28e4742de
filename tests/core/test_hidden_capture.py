"""A turn's hidden states are taken only whole, for exactly its ids, finite: what
`generate --hidden-states` does with an engine's file (generate/hidden.py), on files made
here in vLLM's shape and under its `.lock` protocol. Anything else is a failed request."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import numpy as np
import pytest

from genbench import tensors
from genbench.errors import ErrorKind, Retry
from genbench.generate.hidden import Capture, StatesProblem
from genbench.generate.store.layout import Layout
from genbench.records import RequestRecord
from genbench.transport.endpoint import Endpoint

pytestmark = pytest.mark.core

EP = Endpoint.parse("http://127.0.0.1:9/v1")
PROMPT, GENERATED = [1, 5, 7, 9], [11, 12, 2]
IDS = (PROMPT + GENERATED)[:-1]  # the last id was sampled, never fed: no state


def _record(sid: str = "gbabc") -> RequestRecord:
    rec = RequestRecord(id="r", model="m")
    rec.prompt_token_ids, rec.token_ids = PROMPT, GENERATED
    rec.extra["states_id"] = sid
    return rec


def _states(n: int = len(IDS), layers: int = 3, value: float = 0.5) -> np.ndarray:
    return np.full((n, layers, 8), value, dtype=np.float32)


def _engine_file(where: Path, states: np.ndarray, ids: list[int], sid: str = "gbabc") -> Path:
    path = where / f"chatcmpl-{sid}-1a2b3c4d.safetensors"
    data = {"hidden_states": states, "token_ids": np.asarray(ids, dtype=np.int64)}
    path.write_bytes(tensors.encode(data))
    return path


def _capture(tmp_path: Path, wait_s: float = 1.0) -> tuple[Capture, Path]:
    where = tmp_path / "engine"
    where.mkdir()
    cap = Capture(Layout(tmp_path / "out"), [1, 2, 3], wait_s)
    cap.dirs[EP.base_url] = where
    return cap, where


def _take(cap: Capture, rec: RequestRecord | None = None) -> str:
    return asyncio.run(cap.take(rec or _record(), EP, "row-1", 3))


def test_a_whole_file_is_moved_under_the_rows_name(tmp_path):
    cap, where = _capture(tmp_path)
    src = _engine_file(where, _states(), IDS)
    Path(f"{src}.lock").touch()  # free: the writer let go
    name = _take(cap)
    assert name == cap.layout.states_name("row-1", 3)
    got = tensors.read(tmp_path / "out" / name)
    assert got["token_ids"].array.tolist() == IDS
    assert list(where.iterdir()) == []  # the file and its lock, taken
    assert (cap.hidden, cap.dtype) == (8, "F32")


def test_it_waits_for_the_writer_to_let_go(tmp_path):
    cap, where = _capture(tmp_path, wait_s=5.0)
    lock = os.open(where / "chatcmpl-gbabc-1a2b3c4d.safetensors.lock", os.O_CREAT | os.O_WRONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)

    async def write_then_release() -> str:
        task = asyncio.create_task(cap.take(_record(), EP, "row-1", 3))
        await asyncio.sleep(0.1)
        assert not task.done()  # held: not taken yet
        _engine_file(where, _states(), IDS)
        os.close(lock)
        return await task

    assert asyncio.run(write_then_release()).endswith("-3.safetensors")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda w: None, "no hidden-states file"),  # the writer died: lock free, no file
        (lambda w: _engine_file(w, _states(), [*IDS[:-1], 99]), "differ from the turn's ids"),
        (lambda w: _engine_file(w, _states(n=len(IDS) - 1), IDS[:-1]), "expected [6, 3"),
        (lambda w: _engine_file(w, _states(layers=2), IDS), "expected [6, 3"),
        (lambda w: _engine_file(w, _states(value=np.nan), IDS), "NaN or Inf"),
        (lambda w: _engine_file(w, _states(value=np.inf), IDS), "NaN or Inf"),
    ],
    ids=["never-written", "other-ids", "too-few", "other-layers", "nan", "inf"],
)
def test_a_file_not_fit_is_a_failed_request_and_is_not_kept(tmp_path, make, said):
    cap, where = _capture(tmp_path)
    Path(where / "chatcmpl-gbabc-1a2b3c4d.safetensors.lock").touch()
    make(where)
    with pytest.raises(StatesProblem, match=said.replace("[", r"\[")):
        _take(cap)
    assert list(where.iterdir()) == [] and not (tmp_path / "out" / "hidden_states").exists()


def test_a_torn_file_is_never_taken(tmp_path):
    cap, where = _capture(tmp_path)
    src = _engine_file(where, _states(), IDS)
    src.write_bytes(src.read_bytes()[:-5])  # cut short: a writer killed mid-write
    with pytest.raises(StatesProblem, match="cut short"):
        _take(cap)


def test_no_file_at_all_fails_after_the_wait(tmp_path):
    cap, _ = _capture(tmp_path, wait_s=0.2)
    with pytest.raises(StatesProblem, match="appeared"):
        _take(cap)


def test_bfloat16_states_are_read_widened():
    raw = np.array([0x3F80, 0x7FC0], dtype=np.uint16)  # 1.0 and a NaN in bfloat16
    t = tensors.Tensor("BF16", (2,), raw)
    out = t.floats()
    assert out[0] == 1.0 and np.isnan(out[1])


def test_the_failure_is_retried_as_any_passing_fault():
    assert ErrorKind.HIDDEN_STATES.retry is Retry.YES
    assert not ErrorKind.HIDDEN_STATES.server_gone


# -- FP8 files (--states-fp8): hs-connectors' format ----------------------------------------


def test_e4m3_values_are_the_formats_own():
    # S.EEEE.MMM, bias 7: 0x38 = 1.0, 0x7E = 448 (the largest), 0x01 = 2^-9 (the least
    # subnormal), 0xC0 = -2.0; 0x7F and 0xFF are NaN (the format has no infinity)
    got = tensors.E4M3[[0x38, 0x7E, 0x01, 0xC0, 0x00]].tolist()
    assert got == [1.0, 448.0, 2.0**-9, -2.0, 0.0]
    assert np.isnan(tensors.E4M3[[0x7F, 0xFF]]).all()
    assert np.isfinite(np.delete(tensors.E4M3, [0x7F, 0xFF])).all()


def _fp8_file(where: Path, raw: np.ndarray, scales: np.ndarray | None) -> Path:
    path = where / "chatcmpl-gbabc-1a2b3c4d.safetensors"
    data: dict = {"hidden_states": tensors.Tensor("F8_E4M3", raw.shape, raw),
                  "token_ids": np.asarray(IDS, dtype=np.int64)}  # fmt: skip
    if scales is not None:
        data["hidden_states_scales"] = scales
    path.write_bytes(tensors.encode(data))
    return path


@pytest.mark.parametrize(
    ("byte", "scale", "why"),
    [(0x38, 0.5, None), (0x7F, 0.5, "NaN or Inf"), (0x38, 0.0, "finite and positive"),
     (0x38, np.nan, "finite and positive"), (0x38, None, "one hidden_states_scales per")],
)  # fmt: skip
def test_an_fp8_file_counts_only_with_a_finite_positive_scale_a_token(tmp_path, byte, scale, why):
    cap, where = _capture(tmp_path)
    cap.fp8 = True
    raw = np.full((len(IDS), 3, 8), byte, dtype=np.uint8)
    scales = None if scale is None else np.full((len(IDS), 1, 1), scale, dtype=np.float32)
    path = _fp8_file(where, raw, scales)
    if why is None:
        cap._check(path, IDS)
        got = tensors.read(path)
        assert (got["hidden_states"].scaled(got["hidden_states_scales"].floats()) == 0.5).all()
    else:
        with pytest.raises(StatesProblem, match=why):
            cap._check(path, IDS)


def test_a_float32_file_where_fp8_was_asked_is_refused(tmp_path):
    cap, where = _capture(tmp_path)
    cap.fp8 = True
    path = _engine_file(where, _states(), IDS)
    with pytest.raises(StatesProblem, match="F32 states where FP8 was asked"):
        cap._check(path, IDS)
    assert cap.kv_params() == {"include_output_tokens": True, "genbench_states_dtype": "fp8"}
