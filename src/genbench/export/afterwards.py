"""`genbench hidden-states OUT_DIR`: the hidden states of a set generated earlier (without
`--hidden-states`, or on another engine such as SGLang), captured afterwards by a vLLM
started with the capture flags (docs/hidden-states.md).

Each generated turn with exact ids is one prefill: `/v1/completions` with the turn's
prompt and generated ids but the last as the prompt (the ids capture while generating
covers), `max_tokens` 1. The engine's file is held to those ids as a turn's is while
generating (generate/hidden.py: whole, its ids, its layers, finite) and moved under the
layout's name for the row and turn, where `export` finds it. Resumable by file: a turn
whose file is there is not asked again; a turn that fails is retried, then counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genbench.errors import GenbenchError, UsageError
from genbench.export.samples import samples
from genbench.generate.hidden import Capture, StatesProblem
from genbench.generate.store.layout import Layout, is_generate_dir
from genbench.inspect.reader import FileStats, data_files, kind_of, read_rows
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint

RETRIES = 2


async def capture_afterwards(
    out: Path,
    url: str,
    layers: Sequence[int],
    *,
    model: str | None = None,
    concurrency: int = 8,
    api_key: str | None = None,
    timeout: float = 600.0,
    note: Callable[[str], None] = lambda _: None,
    fp8: bool = False,
) -> dict[str, Any]:
    """Capture every generated turn's states that `out` does not hold yet; the counts.
    `fp8`: hs-connectors' FP8 files (genbench's connector writes them)."""
    if not is_generate_dir(out):
        raise UsageError(f"{out}: not a genbench generate output directory")
    lay = Layout(out)
    was = _dtype(lay)
    if was is not None and (was == "F8_E4M3") != fp8:  # one dtype a set: layers.json says it
        raise UsageError(f"{out}: its hidden states are {was}: capture the rest in the same "
                         + ("dtype (drop --states-fp8)" if fp8 else "dtype (--states-fp8)"))
    ep = Endpoint.parse(url, api_key)
    pool = ConnectionPool(ep.base_url)
    try:
        model = model or await _model(pool, ep, timeout)
        cap = Capture(lay, layers, fp8=fp8)
        await cap.probe(ep, model, timeout)
        todo, have, no_ids = _turns(out, lay)
        note(f"{len(todo)} turns to capture, {have} already there, {no_ids} without exact ids")
        gate = asyncio.Semaphore(concurrency)
        failed: list[str] = []

        async def one(row_id: str | int, turn: int, ids: list[int]) -> None:
            async with gate:
                why = await _capture(cap, pool, ep, model, row_id, turn, ids, timeout)
            if why is not None:
                failed.append(f"{row_id}#{turn}: {why}")

        await asyncio.gather(*(one(*t) for t in todo))
        cap.write_layers(model)
    finally:
        await pool.close()
    return {"out": str(out), "captured": len(todo) - len(failed), "already": have,
            "without_ids": no_ids, "failed": failed, "layers": list(layers)}  # fmt: skip


def _turns(out: Path, lay: Layout) -> tuple[list[tuple[str | int, int, list[int]]], int, int]:
    todo, have, no_ids = [], 0, 0
    for path in data_files(out):
        for _, _row, obj in read_rows(path, FileStats(path, kind_of(path))):
            for s in samples(obj):
                if not s.exact or not s.generated:
                    no_ids += 1
                elif (out / lay.states_name(s.row_id, s.turn)).exists():
                    have += 1
                else:
                    assert s.prompt is not None
                    todo.append((s.row_id, s.turn, (s.prompt + s.generated)[:-1]))
    return todo, have, no_ids


async def _capture(
    cap: Capture, pool: ConnectionPool, ep: Endpoint, model: str,
    row_id: str | int, turn: int, ids: list[int], timeout: float,
) -> str | None:  # fmt: skip
    """One turn's prefill and its file taken; why not, after the retries."""
    body = {"model": model, "prompt": ids, "max_tokens": 1, "stream": False,
            "kv_transfer_params": {**cap.kv_params(), "include_output_tokens": False}}  # fmt: skip
    why = "not tried"
    for _ in range(1 + RETRIES):
        try:
            status, _, raw = await pool.get(ep.base_url + "/completions", timeout,
                                            headers=ep.headers(), json=body)  # fmt: skip
        except Exception as e:  # the transport's Failure: no answer
            why = str(e)
            continue
        answer = json.loads(raw) if status == 200 else {}
        path = (answer.get("kv_transfer_params") or {}).get("hidden_states_path")
        if not isinstance(path, str):
            why = f"HTTP {status}, no hidden_states_path"
            continue
        dest = cap.layout.out / cap.layout.states_name(row_id, turn)
        try:
            await cap._wait(Path(path))
            await asyncio.to_thread(cap._settle, Path(path), ids, dest)
            return None
        except StatesProblem as e:
            why = str(e)
    return why


def _dtype(lay: Layout) -> str | None:
    """The dtype the set's states are in (its layers.json), None before any."""
    try:
        doc = json.loads(lay.layers_file.read_bytes())
    except (OSError, ValueError):
        return None
    return doc.get("dtype") if isinstance(doc, dict) else None


async def _model(pool: ConnectionPool, ep: Endpoint, timeout: float) -> str:
    status, _, raw = await pool.get(ep.base_url + "/models", timeout, headers=ep.headers())
    try:
        return str(json.loads(raw)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise GenbenchError(f"{ep.base_url}/models: HTTP {status}, no model named: give "
                            "--model") from None  # fmt: skip
