"""vLLM's hidden-states connector made to run where the engine runs on CPU, and to write
every file whole.

This module is imported by **vLLM's process only** (`--kv-transfer-config`'s
`"kv_connector_module_path": "genbench.engines.hs_connector"`), never by genbench itself:
it imports torch, safetensors and vLLM, which genbench's own environment need not hold.
genbench puts a directory holding nothing but a link to its own package on the engine's
`PYTHONPATH` (`engines/hs_flags.py`), so vLLM's process reads this file and the two empty
`__init__`s above it, and nothing else of genbench's environment.

Why not vLLM's `ExampleHiddenStatesConnector` as it is:

* it is CUDA-only as written (a CUDA stream and event, a pinned host buffer): on the CPU
  build the request answers 200 with a path, then the worker dies on `pin_memory=True` and
  the file never appears. Here the slots are copied straight out of the CPU cache tensor
  (fancy indexing copies), before the blocks are freed; there is nothing to wait for.
* it writes the file in place: an engine killed mid-write leaves a torn file, and the
  kernel releases the `.lock` a reader waits on, so the reader takes the torn file. Here
  the file is written through `genbench.atomic.writing` (a temporary name in the same
  directory, fsync, rename): at the final name there is a whole file or none. The stock
  `.lock` protocol is kept (created when the request is first scheduled, held until the
  rename), so a reader that waits on it as vLLM's own `load_hidden_states` does works
  unchanged.

The file is the stock one: `hidden_states` [tokens, layers, hidden] in the cache's dtype,
`token_ids` [tokens] (int64); the path is answered in `kv_transfer_params.hidden_states_path`.
A request whose `kv_transfer_params` hold `"genbench_states_dtype": "fp8"` gets hs-connectors'
FP8 file instead (what speculators' `FP8Transfer` reads): `hidden_states` float8_e4m3fn, scaled
per token by `hidden_states_scales` float32 [tokens, 1, 1] (the token's largest magnitude over
its layers / 448), half the bytes of bf16. Per request, so one engine serves both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import save
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)

from genbench.atomic import writing

FP8_KEY, SCALES_KEY = "genbench_states_dtype", "hidden_states_scales"


@dataclass
class _FP8Save(PendingSave):
    """A request that asked for FP8 states."""


def _fp8(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hs-connectors' quantization: one float32 scale per token over all its layers."""
    fp8 = torch.float8_e4m3fn
    x = states.float()
    amax = x.abs().amax(dim=tuple(range(1, x.dim())), keepdim=True)
    scale = (amax / torch.finfo(fp8).max).clamp(min=1e-12)
    return (x / scale).to(fp8), scale


class _Copied:
    """Stands where the stock connector keeps its CUDA event: the copy is already done."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class GenbenchHiddenStatesConnector(ExampleHiddenStatesConnector):
    """The stock connector with a CPU copy and an atomic write (see the module's doc)."""

    def _slots(self, block_ids: list[int]) -> torch.Tensor:
        blocks = torch.tensor(block_ids, dtype=torch.long).reshape(-1, 1)
        offsets = torch.arange(self._block_size, dtype=torch.long).reshape(1, -1)
        return (offsets + blocks * self._block_size).flatten()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Any]:
        delay, params = super().request_finished(request, block_ids)
        pending = self._pending_saves.get(request.request_id)
        if pending is not None and (request.kv_transfer_params or {}).get(FP8_KEY) == "fp8":
            self._pending_saves[request.request_id] = _FP8Save(**vars(pending))
        return delay, params

    def _submit_async_write(self, pending: PendingSave) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        num_tokens = pending.token_ids.shape[0]
        slots = self._slots(pending.block_ids).to(self._kv_cache.device)
        # advanced indexing copies: the blocks may be reused once this returns
        states = extract_from_kv_cache(self._kv_cache, slots, num_tokens).to("cpu")
        tensors = {"hidden_states": states.contiguous(), "token_ids": pending.token_ids.clone()}
        if isinstance(pending, _FP8Save):
            tensors["hidden_states"], tensors[SCALES_KEY] = _fp8(states)
        assert self._req_futures.get(pending.req_id) is None, "a request id came twice"
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = _locked(pending.filename + ".lock")
        future = self._executor.submit(
            self._write_tensors, tensors, _Copied(), pending.filename, lock_fd
        )
        self._req_copy_events[pending.req_id] = _Copied()
        self._req_futures[pending.req_id] = future
        future.add_done_callback(lambda f, rid=pending.req_id: self._on_write_done(rid, f))

    @staticmethod
    def _write_tensors(
        tensors: dict[str, torch.Tensor],
        event: Any,
        filename: str,
        lock_fd: int | None,
    ) -> None:
        """Write whole (genbench.atomic.writing: a temporary name, fsync, rename), then
        release the lock."""
        try:
            event.synchronize()
            with writing(filename, shared=True) as f:
                f.write(save(tensors))
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases LOCK_EX


def _locked(path: str) -> int:
    import fcntl

    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd
