"""A dict of tensors in `torch.save`'s file format, written without torch: what SpecForge's
offline loader reads (`torch.load`, mmap'd) from genbench's numpy arrays.

The format (torch >= 1.6): an uncompressed zip of `ARCHIVE/data.pkl`, a pickle in which
each tensor is `torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False,
OrderedDict())` and each storage a persistent id `('storage', torch.<T>Storage, key,
'cpu', numel)`; the storage's bytes in `ARCHIVE/data/<key>`, each record aligned to 64
bytes as torch writes them (so a mmap'd load reads them in place); `ARCHIVE/byteorder`
and `ARCHIVE/version`. The pickle is spelled opcode by opcode: pickling torch's names
would need torch importable.
"""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np

from genbench.tensors import Tensor

ARCHIVE = "archive"
ALIGN = 64
# safetensors' dtype name -> torch's storage class
STORAGES = {"F32": "FloatStorage", "F16": "HalfStorage", "BF16": "BFloat16Storage",
            "F64": "DoubleStorage", "I64": "LongStorage", "I32": "IntStorage",
            "U8": "ByteStorage", "BOOL": "BoolStorage"}  # fmt: skip


def torch_save(items: dict[str, Tensor]) -> bytes:
    """The bytes `torch.save(dict_of_tensors)` would write for `items`."""
    pickle = bytearray(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    blobs = []
    for key, (name, t) in enumerate(items.items()):
        pickle += _text(name) + _tensor(t, str(key))
        blobs.append(np.ascontiguousarray(t.array).tobytes())
    pickle += b"u."  # SETITEMS, STOP
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        _record(z, "data.pkl", bytes(pickle))
        _record(z, "byteorder", b"little")
        for key, blob in enumerate(blobs):
            _record(z, f"data/{key}", blob)
        _record(z, "version", b"3\n")
    return buf.getvalue()


def _tensor(t: Tensor, key: str) -> bytes:
    storage = STORAGES.get(t.dtype)
    if storage is None:
        raise ValueError(f"no torch storage for dtype {t.dtype}")
    numel = int(np.prod(t.shape)) if t.shape else 1
    stride, acc = [], 1
    for d in reversed(t.shape):
        stride.insert(0, acc)
        acc *= d
    pid = b"(" + _text("storage") + _global("torch", storage) + _text(key) + _text("cpu")
    pid += _int(numel) + b"tQ"  # TUPLE, BINPERSID
    args = pid + _int(0) + _tuple(t.shape) + _tuple(stride) + b"\x89"  # NEWFALSE
    args += _global("collections", "OrderedDict") + b")R"  # EMPTY_TUPLE, REDUCE
    return _global("torch._utils", "_rebuild_tensor_v2") + b"(" + args + b"tR"


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _text(s: str) -> bytes:
    data = s.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _int(n: int) -> bytes:
    if 0 <= n < 1 << 31:
        return b"J" + struct.pack("<i", n)
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def _tuple(values: tuple[int, ...] | list[int]) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _record(z: zipfile.ZipFile, name: str, data: bytes) -> None:
    """A stored record whose bytes start on a 64-byte boundary (padding in its extra)."""
    info = zipfile.ZipInfo(f"{ARCHIVE}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    assert z.fp is not None
    start = z.fp.tell() + 30 + len(info.filename.encode())
    pad = -(start + 4) % ALIGN
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    z.writestr(info, data)
