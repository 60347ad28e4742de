"""The key of an input line: what lets a resume skip a done row without parsing it.

A done row's input line that is byte for byte the one it was made from asks the same
request; its key (kept in the index, request_hash.py) says so in 0.2 us a line. The
input scan asks a `RequestCheck` about any other line.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

_crc = zlib.crc32


def fast_id(s: bytes) -> str | None:
    """The id of a line that starts with a plain string id (genbench's own output and most
    generated files do), without parsing the rest: resume skips 1M done rows by this.
    None when it cannot be sure (escapes, an integer id, another key first)."""
    if s[:7] == b'{"id":"':
        start = 7
    elif s[:8] == b'{"id": "':
        start = 8
    elif s[:14] == b'{"custom_id":"':  # an OpenAI Batch request line (batch.py)
        start = 14
    else:
        return None
    end = s.find(b'"', start)
    if end <= start:
        return None
    raw = s[start:end]
    if b"\\" in raw:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def line_key(salt: int, raw: bytes) -> int:
    """The key of an input line's bytes under a job's `salt` (request_hash.py); never 0,
    which means unknown: its length and a CRC-32 seeded by the salt. It only ever says
    "this line is byte for byte the one the row was made from" (an edit of the same
    length slips by once in 4 billion; the request hash decides every other case), and it
    is on the resume's hot path (inline there, in `_Scan.row`): 0.2 us a line."""
    return (len(raw) << 32 | _crc(raw, salt & 0xFFFFFFFF)) or 1


def raw_of(item: bytes | dict[str, Any]) -> bytes:
    """The bytes a row's line key is taken of: a JSONL line as it is, a Parquet row as JSON."""
    return item if type(item) is bytes else orjson.dumps(item, default=str)
