"""`generate --hidden-states`: each generated turn's hidden states, taken from the engine
into the output directory exactly once (docs/hidden-states.md).

The engine (vLLM's `extract_hidden_states` with a hidden-states connector) writes, for each
finished request, `DIR/<its request id>-<8 hex>.safetensors` with a `.lock` beside it held
until the file is written. Every request carries an id of genbench's (`request_id`, kept on
its record as `extra.states_id`), so its file is found by name although a streamed answer
names no path. After a turn's answer, before the turn counts:

  * the file is waited for (its `.lock` free, the file there; at most `wait_s`);
  * it is read whole (a file cut short is refused: `tensors.read`), and held to the turn:
    one state per id of the prompt and completion but the last (the last id was sampled,
    never fed back), its `token_ids` those ids, one layer per layer asked, every value
    finite;
  * it is moved into the output directory under the layout's name for that row and turn
    (a rerun of the row replaces it, never adds one), and the turn names it in its
    `hidden_states` field. Only then is the turn answered, and the row written after.

Anything else is a failed request (`ErrorKind.HIDDEN_STATES`), retried as any other: a 200
whose file never appears (the engine died after answering, a full disk there), a torn
file, other ids, a NaN. The preflight asks each server once (`probe`): it must answer
`kv_transfer_params.hidden_states_path`, and genbench must read that file (the two must
share a filesystem); that answer also says which directory the server writes to.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genbench import tensors
from genbench.atomic import move_across, write_atomic
from genbench.engines.hs_flags import NUMBERING
from genbench.errors import ErrorKind, ExitCode, GenbenchError, OutputError
from genbench.generate.store.layout import HIDDEN_STATES, Layout
from genbench.records import RequestRecord
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint

WAIT_S = 60.0  # how long a file may take to appear after its answer
CHUNK = 4096  # tokens checked for NaN/Inf at a time (a bounded copy)
OUT_OF_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a size limit
STATES_ID_PREFIX = "gb"  # transport/client.py's request ids: genbench's files in a shared dir
FP8_ASK, SCALES = "genbench_states_dtype", "hidden_states_scales"  # engines/hs_connector.py


@dataclass(frozen=True)
class CaptureSpec:
    """What `--hidden-states` asks: the layers (vLLM's numbering) and, where they were not
    given, the trainer whose default they follow (`--for`)."""

    layers: tuple[int, ...] | None = None
    trainer: str | None = None
    connector: str = "auto"
    wait_s: float = WAIT_S
    fp8: bool = False  # --states-fp8: hs-connectors' FP8 files (genbench's connector)

    def setting(self) -> dict[str, Any]:
        """What job.json keeps (compared on resume: other layers are another data set)."""
        doc: dict[str, Any] = {"layers": list(self.layers or ()), "for": self.trainer}
        if self.fp8:  # only then: a job made before FP8 was offered resumes as it was
            doc["dtype"] = "fp8"
        return doc


class StatesProblem(Exception):
    """Why a turn's states are not taken (a failed request, retried)."""


class NotFP8(StatesProblem):
    """FP8 was asked and the engine's connector wrote another dtype (vLLM's stock one)."""


class Capture:
    """The job's hidden states: each server's directory, each turn's file taken."""

    def __init__(
        self, layout: Layout, layers: Sequence[int], wait_s: float = WAIT_S, fp8: bool = False
    ) -> None:
        self.layout, self.layers, self.wait_s, self.fp8 = layout, list(layers), wait_s, fp8
        self.dirs: dict[str, Path] = {}  # server (its base URL) -> where its engine writes
        self.hidden: int | None = None  # the model's hidden size, as the first file says
        self.dtype: str | None = None

    @classmethod
    def of(cls, layout: Layout, spec: CaptureSpec) -> Capture:
        """The job's capture, as `--hidden-states` asked."""
        return cls(layout, spec.layers or (), spec.wait_s, spec.fp8)

    # -- the preflight -------------------------------------------------------------------

    async def probe(self, ep: Endpoint, model: str, timeout: float = 120.0) -> None:
        """One tiny request that must leave a readable file of the layers asked; its
        directory is where this server's files are looked for. A GenbenchError (one
        line) otherwise."""
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2, "return_token_ids": True, "stream": False,
                "kv_transfer_params": self.kv_params()}  # fmt: skip
        pool = ConnectionPool(ep.base_url)
        try:
            status, _, raw = await pool.get(ep.base_url + "/chat/completions", timeout,
                                            headers=ep.headers(), json=body)  # fmt: skip
        except Exception as e:  # transport's Failure: the preflight said why it is down
            raise GenbenchError(f"{ep.base_url}: hidden-states probe failed ({e})",
                                ExitCode.BAD_RESPONSE) from None  # fmt: skip
        finally:
            await pool.close()
        answer = _json(raw) if status == 200 else {}
        path = ((answer.get("kv_transfer_params") or {}).get("hidden_states_path")
                if isinstance(answer, dict) else None)  # fmt: skip
        if not isinstance(path, str):
            why = f"HTTP {status}" if status != 200 else "no kv_transfer_params.hidden_states_path"
            raise GenbenchError(
                f"{ep.base_url} does not capture hidden states ({why}): start vLLM with "
                "--speculative-config and --kv-transfer-config as docs/hidden-states.md says, "
                "or let genbench start it (--serve)", ExitCode.BAD_RESPONSE)  # fmt: skip
        file = Path(path)
        try:
            await self._wait(file)
            choice = answer["choices"][0]
            ids = list(answer.get("prompt_token_ids") or []) + list(choice.get("token_ids") or [])
            await asyncio.to_thread(self._check, file, ids[:-1])
        except NotFP8 as e:
            raise GenbenchError(f"{ep.base_url}: --states-fp8: {e}",
                                ExitCode.BAD_RESPONSE) from None  # fmt: skip
        except (StatesProblem, OSError) as e:
            raise GenbenchError(
                f"{ep.base_url} wrote its hidden states to {path}, which genbench cannot read "
                f"({e}): the server and genbench must share a filesystem",
                ExitCode.BAD_RESPONSE) from None  # fmt: skip
        finally:
            _remove(file)
        self.dirs[ep.base_url] = file.parent
        abandoned(file.parent, self.wait_s)

    def kv_params(self) -> dict[str, Any]:
        """What each request asks of the engine's connector: the states of the prompt and
        the completion, and FP8 files where asked (genbench's connector writes them)."""
        return {"include_output_tokens": True, **({FP8_ASK: "fp8"} if self.fp8 else {})}

    async def probe_all(
        self, ok: Sequence[Any], api_key: str | None, model: str, note: Callable[[str], None]
    ) -> None:
        """`probe` each server the preflight found up (its reports), after a check that each
        sends the token ids the states are held to."""
        if any(r.token_ids is None for r in ok):
            raise GenbenchError("--hidden-states: a server sends no token ids, to which the "
                                "states are held", ExitCode.BAD_RESPONSE)  # fmt: skip
        for r in ok:
            ep = Endpoint.parse(r.url, api_key)
            await self.probe(ep, model)
            note(f"{r.url}: hidden states of layers {self.layers} (vLLM's numbering) from "
                 f"{self.dirs[ep.base_url]}")  # fmt: skip

    def write_layers(self, model: str) -> None:
        """`hidden_states/layers.json`: which layers the files hold, in whose numbering,
        of which model (a file without them is a silent trap for a trainer)."""
        doc = {"layers": self.layers, "numbering": NUMBERING, "model": model,
               "hidden_size": self.hidden, "dtype": self.dtype,
               "tokens": "the turn's prompt and completion ids but the last"}  # fmt: skip
        self.layout.hidden_states.mkdir(parents=True, exist_ok=True)
        write_atomic(self.layout.layers_file, json.dumps(doc, indent=1).encode() + b"\n")

    def drop(self, turns: list[dict[str, Any]]) -> None:
        """The states of a row that failed after some of its turns were answered: no row
        holds them, so none is kept."""
        for t in turns:
            name = t.get(HIDDEN_STATES) if isinstance(t, dict) else None
            if isinstance(name, str):
                with contextlib.suppress(OSError, ValueError):
                    self.layout.states_file(name).unlink()

    # -- a turn ---------------------------------------------------------------------------

    async def take(self, rec: RequestRecord, ep: Endpoint, row_id: str | int, turn: int) -> str:
        """The turn's states moved into the output directory: their name (the turn's
        `hidden_states`). Raises StatesProblem (a failed request) or OutputError."""
        sid = rec.extra.get("states_id")
        if ep.base_url not in self.dirs:  # down at the preflight: asked now, once it answers
            try:
                await self.probe(ep, rec.model or "")
            except GenbenchError as e:
                raise StatesProblem(str(e)) from None
        where = self.dirs[ep.base_url]
        if sid is None:
            raise StatesProblem("the request carried no id of genbench's to find its file by")
        if rec.prompt_token_ids is None or rec.token_ids is None:
            raise StatesProblem("the server sent no token ids: the states cannot be checked")
        ids = [*rec.prompt_token_ids, *rec.token_ids][:-1]
        file = await self._find(where, sid)
        name = self.layout.states_name(row_id, turn)
        try:
            await asyncio.to_thread(self._settle, file, ids, self.layout.out / name)
        except StatesProblem:
            _remove(file)
            raise
        return name

    async def _find(self, where: Path, sid: str) -> Path:
        """The request's file, whole, once its writer let go; StatesProblem after wait_s."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.wait_s, 0.005
        while True:
            found = _named(where, sid)
            if found is not None and not _locked(found):
                if found.exists():
                    return found
                if Path(f"{found}.lock").exists():  # its writer let go with no file: died
                    _remove(found)
                    raise StatesProblem(
                        f"the engine answered but wrote no hidden-states file ({found.name}; "
                        "did it die, or its disk fill?)"
                    )
            if loop.time() > deadline:
                raise StatesProblem(
                    f"the engine answered but no hidden-states file for {sid} appeared in "
                    f"{where} within {self.wait_s:g} s"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)

    async def _wait(self, file: Path) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while _locked(file) or not file.exists():
            if loop.time() > deadline:
                raise StatesProblem(f"{file} did not appear within {self.wait_s:g} s")
            await asyncio.sleep(0.05)

    def _settle(self, file: Path, ids: list[int], dest: Path) -> None:
        self._check(file, ids)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            move_across(file, dest)
        except OSError as e:
            if e.errno in OUT_OF_ROOM:  # a retry cannot help: the job stops (exit 12)
                raise OutputError(f"{dest.parent}: no room left for hidden states ({e})") from e
            raise StatesProblem(f"cannot move {file} into {dest.parent} ({e})") from None
        with contextlib.suppress(OSError):
            os.unlink(f"{file}.lock")

    def _check(self, file: Path, ids: list[int]) -> None:
        """The file holds one finite state per id at each layer asked, for exactly `ids`
        (FP8 files: with a positive, finite scale per token)."""
        try:
            got = tensors.read(file, ("hidden_states", "token_ids", SCALES))
        except (tensors.TensorFileError, OSError) as e:
            raise StatesProblem(str(e)) from None
        hs, tok, scales = got.get("hidden_states"), got.get("token_ids"), got.get(SCALES)
        if hs is None or tok is None:
            raise StatesProblem(f"{file.name}: no hidden_states or token_ids in it")
        if self.fp8 and hs.dtype != "F8_E4M3":
            raise NotFP8(
                f"{file.name}: {hs.dtype} states where FP8 was asked (genbench's connector "
                "writes FP8; vLLM's stock one does not)"
            )
        if hs.dtype == "F8_E4M3" and (scales is None or scales.shape != (hs.shape[0], 1, 1)):
            raise StatesProblem(f"{file.name}: FP8 states without one {SCALES} per token")
        if len(hs.shape) != 3 or hs.shape[0] != len(ids) or hs.shape[1] != len(self.layers):
            raise StatesProblem(
                f"{file.name}: hidden_states {list(hs.shape)}, expected [{len(ids)}, "
                f"{len(self.layers)}, hidden] (the turn's ids, the layers asked)"
            )
        seen = tok.array.tolist()
        if seen != ids:
            at = next((i for i, (a, b) in enumerate(zip(seen, ids, strict=False)) if a != b),
                      min(len(seen), len(ids)))  # fmt: skip
            raise StatesProblem(
                f"{file.name}: its token_ids differ from the turn's ids at position {at}"
            )
        every_scale = scales.floats() if scales is not None and hs.dtype == "F8_E4M3" else None
        for lo in range(0, hs.shape[0], CHUNK):
            part = tensors.Tensor(hs.dtype, hs.shape, hs.array[lo : lo + CHUNK])
            if every_scale is not None:
                scale = every_scale[lo : lo + CHUNK]
                if not (np.isfinite(scale).all() and (scale > 0).all()):
                    raise StatesProblem(f"{file.name}: a scale that is not finite and positive")
                values = part.scaled(scale)
            else:
                values = part.floats()
            if not np.isfinite(values).all():
                raise StatesProblem(f"{file.name}: NaN or Inf among its states")
        self.hidden = self.hidden or hs.shape[2]
        self.dtype = self.dtype or hs.dtype


def _named(where: Path, sid: str) -> Path | None:
    """The file (or, before it is written, the lock) vLLM named after request `sid`."""
    for p in where.glob(f"*{sid}-*.safetensors*"):
        name = p.name
        if name.endswith(".safetensors"):
            return p
        if name.endswith(".safetensors.lock"):
            return p.with_name(name.removesuffix(".lock"))
    return None


def _locked(file: Path) -> bool:
    """Its writer still holds its `.lock` (vLLM's protocol: LOCK_EX until written)."""
    try:
        fd = os.open(f"{file}.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _remove(file: Path) -> None:
    for p in (file, Path(f"{file}.lock")):
        with contextlib.suppress(OSError):
            p.unlink()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {}


def fail(rec: RequestRecord, why: str) -> None:
    """The request counts as failed: its states could not be taken."""
    rec.error_kind, rec.error_message = ErrorKind.HIDDEN_STATES, why


def abandoned(where: Path, wait_s: float) -> int:
    """Files of genbench's requests nobody took (a run killed while they were in flight):
    free of their lock and older than any take waits, so no job is still after them.
    Removed; how many."""
    gone, now = 0, time.time()
    for p in where.glob(f"*-{STATES_ID_PREFIX}*.safetensors"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > wait_s and not _locked(p):
                _remove(p)
                gone += 1
    return gone


def clear_incoming(where: Path) -> None:
    """The directory the job's own engines write to, emptied before they start: what is
    there was left by an earlier run's requests, whose rows were not written."""
    if where.is_dir():
        for p in where.iterdir():
            if p.is_file():
                _remove(p)
