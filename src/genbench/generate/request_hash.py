"""The request a row makes, as its request hash: what lets a resumed job see an edited input.

A row's request hash is a 64-bit hash of every request the job builds for it (the
`ChatRequest`s of its conversation, in order: messages, max_tokens, sampling and any
other field a request carries), the answers it generates replaced by a placeholder, so
it says what was *asked*, not what came back. It is built by the same code that builds
the requests (`Conversation.next_request`): a field added to requests is covered the
day it is added, and a field left at its empty default does not change old
hashes (empty values are left out).

Computing it means parsing and normalising the row (microseconds), too slow for every
row of a 1M-row resume. So the store also keeps, per row, a *line key*: the input line's
length and a CRC-32 seeded by the job's *salt* (the request hash of a fixed synthetic row
under this job's `Recipe`: sampling, `--turns`, tool policy). Same bytes, same salt: same
request, no parsing. Anything else (a reformatted line, new job settings, a newer
genbench) falls back to the request hash itself, which decides.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from genbench.generate.agent import start
from genbench.generate.input.linekey import line_key
from genbench.generate.input.reader import Row
from genbench.generate.recipe import REPLAY, Recipe
from genbench.transport.client import ChatRequest

__all__ = [
    "LazyHashes", "RequestCheck", "from_hex", "job_salt", "line_key", "request_hash", "to_hex",
]  # fmt: skip

PROBE = Row(  # the synthetic row behind the salt: a system prompt and two user turns
    "genbench-salt",
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "v"},
    ],
    {},
    0,
)


def _canonical(req: ChatRequest) -> dict[str, Any]:
    """The request's fields that say what is asked: its id is the row's key, not part of
    the request, and fields at their default or empty are left out (a field added to
    requests changes no request hash made before, until a row sets it)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(req):
        v = getattr(req, f.name)
        if f.name == "id" or v is None or v == {} or v == [] or v == _default(f):
            continue
        out[f.name] = v
    return out


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def request_hash(row: Row, recipe: Recipe) -> int:
    """The request hash (an unsigned 64-bit int, never 0) of the requests `row` makes."""
    conv = start(row, recipe)
    h = hashlib.blake2b(digest_size=8)
    if conv.plan.tools is None:
        for req in conv.asked():
            h.update(_dumps(_canonical(req)) + b"\n")
        return int.from_bytes(h.digest(), "big") or 1
    # an agentic row: its later requests follow the target's calls, so what it asks is its
    # first request and everything of the row that the others are made from
    first = next(conv.asked(), None)
    h.update(_dumps(_canonical(first)) if first is not None else b"")
    rest = [row.messages, row.tools, row.tool_choice, recipe.tool_policy, recipe.all_turns]
    h.update(_dumps(rest))
    return int.from_bytes(h.digest(), "big") or 1


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS, default=str)


def job_salt(recipe: Recipe) -> int:
    """What the line keys of this job are keyed by: changes with its recipe (sampling,
    `--turns`, tool policy) and the way genbench builds requests."""
    req_hash = request_hash(PROBE, recipe).to_bytes(8, "big")
    if recipe.tool_policy == REPLAY:  # the default leaves the keys of earlier jobs as they were
        return int.from_bytes(req_hash, "big")
    digest = hashlib.blake2b(req_hash + recipe.tool_policy.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def to_hex(req_hash: int) -> str:
    return f"{req_hash:016x}"


def from_hex(text: Any) -> int:
    """A request hash read back from a row's meta; 0 when absent or unreadable."""
    if not isinstance(text, str):
        return 0
    try:
        return int(text, 16)
    except ValueError:
        return 0


@dataclass
class RequestCheck:
    """The input scan's judge of done rows whose input line changed (`input.scan`).

    `hashes`: the request hash each done row was made with (0: unknown, a row of an older
    genbench: trusted). `kept`: rows kept by `--input-changed keep`, with the request hash
    and line key they were kept for (hash 0: kept although not in the input)."""

    recipe: Recipe
    hashes: Any  # id -> request hash: a mapping with .get (store.LazyHashes)
    kept: dict[str, tuple[int, int]] = field(default_factory=dict)
    changes: list[tuple[str, int, int]] = field(default_factory=list)  # (id, req_hash now, key)
    learned: dict[str, int] = field(default_factory=dict)  # id -> key, for the index
    # a few changed rows and the request hash each was made with: lostjob.attribute
    samples: list[tuple[Row, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.salt = job_salt(self.recipe)

    def key(self, raw: bytes) -> int:
        return line_key(self.salt, raw)

    def has_kept(self) -> bool:
        return bool(self.kept)

    def kept_key(self, row_id: str) -> int:
        return self.kept.get(row_id, (0, 0))[1]

    def kept_gone(self, row_id: str) -> bool:
        k = self.kept.get(row_id)
        return k is not None and k[0] == 0

    def changed(self, row_id: str, row: Row, key: int) -> bool:
        """Whether the row's request is not the one its answer was made for (nor one
        kept for it); if so, noted in `changes`."""
        old = self.hashes.get(row_id, 0)
        if not old:
            return False  # made by a genbench that kept no request hash: cannot tell
        req_hash = request_hash(row, self.recipe)
        if req_hash == old:
            self.learned[row_id] = key  # the same request from another line: its new key
            return False
        if self.kept.get(row_id, (0, 0))[0] == req_hash:  # kept for this request (never 0)
            return False
        self.changes.append((row_id, req_hash, key))
        if len(self.samples) < 3:
            self.samples.append((row, old))
        return True


class LazyHashes:
    """id -> request hash of the done rows, built on first use: a resume whose
    input lines are all as they were never needs it (1M entries cost ~0.2 s, ~80 MB)."""

    def __init__(self) -> None:
        self.parts: list[tuple[list[str], list[int]]] = []
        self._map: dict[str, int] | None = None

    def add(self, ids: list[str], hashes: list[int]) -> None:
        self.parts.append((ids, hashes))
        self._map = None

    def get(self, row_id: str, default: int = 0) -> int:
        if self._map is None:
            self._map = {}
            for ids, hashes in self.parts:
                self._map.update(zip(ids, hashes, strict=True))
        return self._map.get(row_id, default)

    def __getitem__(self, row_id: str) -> int:
        return self.get(row_id)
