"""safetensors files read and written with numpy alone: the hidden-states files an engine
writes (`hidden_states` [tokens, layers, hidden], `token_ids` [tokens]) and the ones
`export` writes for a trainer.

genbench's own environment holds no torch; the format is small (an 8-byte little-endian
header length, a JSON header naming each tensor's dtype, shape and byte range, the bytes),
so it is read here, checked as strictly as safetensors' own `safe_open` checks it (the byte
ranges contiguous and covering the file exactly: a file cut short by a crash is refused,
never taken), and bfloat16 (which numpy lacks) is widened to float32 where values are
looked at.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

# safetensors' dtype names -> numpy's (BF16 and the FP8s are read as raw bytes)
DTYPES: dict[str, Any] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
}  # fmt: skip
NAMES = {np.dtype(t): name for name, t in DTYPES.items()
         if name not in ("BF16", "F8_E4M3", "F8_E5M2")}  # fmt: skip
MAX_HEADER = 100 << 20  # safetensors' own bound


FP8_SCALE_BYTES = 4  # hs-connectors' FP8 files: one float32 scale per token (all its layers)


class TensorFileError(Exception):
    """A file that is not a whole safetensors file (the reason, one line)."""


def _e4m3_table() -> np.ndarray:
    """float8_e4m3fn's 256 values (no infinity; S.1111.111 is NaN), as float32."""
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, mant = (b >> 3) & 0xF, b & 0x7
    mag = np.where(exp == 0, mant / 8.0 * 2.0**-6, (1 + mant / 8.0) * 2.0 ** (exp - 7.0))
    return np.where((b & 0x7F) == 0x7F, np.nan, sign * mag).astype(np.float32)


E4M3 = _e4m3_table()


@dataclass(frozen=True)
class Tensor:
    """One tensor of a file: its safetensors dtype name, shape and values (BF16 and FP8
    as their raw integers: `floats` widens BF16)."""

    dtype: str
    shape: tuple[int, ...]
    array: np.ndarray

    def floats(self) -> np.ndarray:
        """The values as float32 (BF16 widened); FP8 is refused (it needs its scales)."""
        if self.dtype == "BF16":
            return (self.array.astype(np.uint32) << 16).view(np.float32)
        if self.dtype.startswith("F8"):
            raise TensorFileError(f"{self.dtype} values need their scales to be read")
        return self.array.astype(np.float32, copy=False)

    def scaled(self, scales: np.ndarray) -> np.ndarray:
        """F8_E4M3 values times their scales (hs-connectors' per-token FP8), as float32."""
        if self.dtype != "F8_E4M3":
            raise TensorFileError(f"{self.dtype} values are not FP8 with scales")
        return E4M3[self.array] * scales


def read(path: Path | str, names: tuple[str, ...] | None = None) -> dict[str, Tensor]:
    """The file's tensors (or only `names`), mapped, not copied; TensorFileError when the
    file is not whole (cut short, a bad header, ranges that do not cover it)."""
    with open(path, "rb") as f:
        header, start, size = _header(f, path)
        if size == start:
            return {}
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or (names is not None and name not in names):
            continue
        lo, hi = info["data_offsets"]
        dt = np.dtype(DTYPES[info["dtype"]])
        arr = np.frombuffer(mm, dtype=dt, count=(hi - lo) // dt.itemsize, offset=start + lo)
        out[name] = Tensor(info["dtype"], tuple(info["shape"]), arr.reshape(info["shape"]))
    return out


def metadata(path: Path | str) -> dict[str, str]:
    """The file's `__metadata__` (text to text), {} where it has none."""
    with open(path, "rb") as f:
        header, _, _ = _header(f, path)
    meta = header.get("__metadata__") or {}
    return {str(k): str(v) for k, v in meta.items()}


def _header(f: BinaryIO, path: Path | str) -> tuple[dict[str, Any], int, int]:
    size = f.seek(0, 2)
    f.seek(0)
    head = f.read(8)
    if len(head) < 8:
        raise TensorFileError(f"{path}: {size} bytes, not a safetensors file (cut short?)")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER or 8 + n > size:
        raise TensorFileError(f"{path}: its header says {n} bytes, the file has {size}")
    try:
        header = json.loads(f.read(n))
    except ValueError as e:
        raise TensorFileError(f"{path}: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise TensorFileError(f"{path}: its header is not a JSON object")
    end = 0
    for name, info in sorted(
        ((k, v) for k, v in header.items() if k != "__metadata__"),
        key=lambda kv: kv[1].get("data_offsets", [0])[0] if isinstance(kv[1], dict) else 0,
    ):
        _check_entry(path, name, info, end)
        end = info["data_offsets"][1]
    if 8 + n + end != size:
        raise TensorFileError(
            f"{path}: its tensors end at byte {8 + n + end}, the file at {size} (cut short?)"
        )
    return header, 8 + n, size


def _check_entry(path: Path | str, name: str, info: Any, end: int) -> None:
    ok = isinstance(info, dict) and info.get("dtype") in DTYPES
    offsets = info.get("data_offsets") if ok else None
    shape = info.get("shape") if ok else None
    if not ok or not isinstance(offsets, list) or not isinstance(shape, list):
        raise TensorFileError(f"{path}: tensor {name!r} has no dtype, shape or offsets")
    lo, hi = offsets
    count = int(np.prod(shape)) if shape else 1
    if lo != end or hi - lo != count * np.dtype(DTYPES[info["dtype"]]).itemsize:
        raise TensorFileError(f"{path}: tensor {name!r}'s bytes do not match its shape")


def encode(tensors: dict[str, Tensor | np.ndarray], meta: dict[str, str] | None = None) -> bytes:
    """A safetensors file's bytes: a numpy array is stored in its own dtype, a `Tensor`
    (BF16, FP8 raw) in its named one."""
    header: dict[str, Any] = {"__metadata__": dict(meta)} if meta else {}
    blobs, at = [], 0
    for name, t in tensors.items():
        arr = t.array if isinstance(t, Tensor) else t
        dtype = t.dtype if isinstance(t, Tensor) else NAMES[arr.dtype]
        data = np.ascontiguousarray(arr).tobytes()
        span = [at, at + len(data)]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": span}
        blobs.append(data)
        at += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)
