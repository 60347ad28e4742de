"""Read the prompt file: JSON Lines (optionally gzipped) or Parquet rows -> validated `Row`s.

Two passes, on purpose. `scan` reads the whole file before any request is sent: a
malformed line 900,000 must fail in seconds, not after a night of generation, and every
bad line is reported from that one pass (input_errors.py), not one per rerun. It also
counts the rows (the ETA needs the total) and finds duplicate ids. It keeps only ids,
never rows, so memory does not grow with prompt length. `iter_rows` then streams the
rows still to do, parsing each line again.

A row is an object with
  * `id` (text or integer); without one, genbench derives a stable id from the row's
    content (blake2b of its messages and params), so reordering or reformatting the
    file keeps ids;
  * the prompt: `conversations` or `messages` (a list of {role, content}, or ShareGPT's
    {from, value}), or `prompt` (text) with an optional `system` (text);
  * optional `params`: sampling fields for this row only (temperature, max_tokens, ...);
  * optional `tools` and `tool_choice`, and turns that call tools or carry their results
    (`genbench.generate.input.tools` reads the shapes the common agentic data sets use).
An OpenAI Batch request line (`custom_id`, `body`) is read as such a row (batch.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from genbench.errors import InputFileError, UsageError
from genbench.generate.input import batch as batch_api
from genbench.generate.input.errors import AT, BadRows, InputErrors
from genbench.generate.input.files import check_exists as _check_exists
from genbench.generate.input.files import check_kind as _not_what_it_says
from genbench.generate.input.files import check_stream, rows_after
from genbench.generate.input.files import jsonl_lines as _jsonl
from genbench.generate.input.files import parquet_rows as _parquet
from genbench.generate.input.linekey import _crc, fast_id, line_key, raw_of
from genbench.generate.input.messages import BadField as _Bad
from genbench.generate.input.messages import messages as read_messages
from genbench.generate.input.params import check_params
from genbench.generate.input.shard import ShardSpec
from genbench.generate.input.tools import BadTool, row_tools

RAW_LIMIT = 2000  # characters of a bad line kept in the errors file


class RowError(InputFileError):
    """A bad row: 'FILE, line N: ...' for JSONL, 'FILE, row N: ...' for Parquet."""

    def __init__(self, path: object, where: str, problem: str, field: str | None = None):
        what = f"field '{field}': {problem}" if field else problem
        UsageError.__init__(self, f"{path}, {where}: {what}")
        self.path, self.line, self.field = path, None, field


@dataclass(slots=True)
class Row:
    """One prompt to (re)generate. `messages` are normalised to {role, content[, reasoning]}.
    `id` is the key (text); `out_id` is the id as the input gave it (an integer stays one)."""

    id: str
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    line: int
    out_id: str | int | None = None
    tools: list[dict[str, Any]] | None = None  # the row's tool schema, sent with each request
    tool_choice: Any = None
    src: int = 0  # the key of its input line (request_hash.py), 0 when not computed
    group: str | None = None  # its group, category or source field: acceptance by group

    @property
    def output_id(self) -> str | int:
        return self.id if self.out_id is None else self.out_id


class RequestCheck(Protocol):
    """What the input scan asks about a done row whose line changed (request_hash.py)."""

    salt: int

    def key(self, raw: bytes) -> int: ...
    def kept_key(self, row_id: str) -> int: ...
    def has_kept(self) -> bool: ...
    def kept_gone(self, row_id: str) -> bool: ...
    def changed(self, row_id: str, row: Row, key: int) -> bool: ...


@dataclass(slots=True)
class BadRow:
    """A row that cannot be sent; with --skip-invalid it goes to the errors file."""

    line: int
    id: str | None
    problem: str
    field: str | None = None
    raw: str | None = None

    def describe(self) -> str:
        return f"field '{self.field}': {self.problem}" if self.field else self.problem


@dataclass
class InputScan:
    """What the first pass found. `todo` holds the ids still to generate in this shard."""

    path: Path
    kind: str  # jsonl | parquet
    rows: int = 0  # valid rows that belong to this shard (done or not)
    done: int = 0  # of which already done in the output directory
    failed: int = 0  # of which failed in an earlier run (in the errors file)
    derived: int = 0  # rows whose id genbench derived from the content
    todo: set[str] = field(default_factory=set)
    bad: list[BadRow] = field(default_factory=list)
    bad_lines: set[int] = field(default_factory=set)
    last_line: int | None = None  # --limit: pass 2 stops here
    left: int | None = None  # --limit: the file's rows after it (None: not counted)
    tools: tuple[list[dict[str, Any]], Any] | None = None  # a row to do's tools and choice
    removed: list[str] = field(default_factory=list)  # done ids no longer in the input

    @property
    def where(self) -> str:
        return "row" if self.kind == "parquet" else "line"

    @property
    def total(self) -> int:
        """The rows this run accounts for: invalid ones found now count as failed."""
        return self.rows + len(self.bad)


def derive_id(messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    blob = orjson.dumps([messages, params], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


def input_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".parquet") or name.endswith(".pq"):
        return "parquet"
    return "jsonl"


def _items(path: Path, kind: str) -> Iterator[tuple[int, Any]]:
    """(line or row number, its bytes or decoded row) of the file, in order."""
    return _parquet(path) if kind == "parquet" else _jsonl(path)


# -- parsing one row ------------------------------------------------------------------------


def _id_of(obj: dict[str, Any]) -> str | None:
    raw = obj.get("id")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise _Bad(f"expected text or an integer, got {type(raw).__name__}", "id")
    text = str(raw)
    if not text:
        raise _Bad("is empty", "id")
    return text


def _params(obj: dict[str, Any]) -> dict[str, Any]:
    raw = obj.get("params")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _Bad(f"expected an object of sampling fields, got {type(raw).__name__}", "params")
    params = {k: v for k, v in raw.items() if v is not None}  # Parquet structs pad with nulls
    problem = check_params(params)
    if problem:
        raise _Bad(problem[1], f"params.{problem[0]}" if problem[0] else "params")
    return params


# a row's field naming its kind of prompt, the first given (acceptance is shown by group)
GROUP_FIELDS = ("group", "category", "source")


def parse_row(obj: Any, line: int, row_id: str | None = None) -> Row:
    """Validate one decoded row; raises _Bad naming the field."""
    if not isinstance(obj, dict):
        kind = "an array" if isinstance(obj, list) else type(obj).__name__
        raise _Bad(f"expected a JSON object per line (JSON Lines), got {kind}")
    if row_id is None:
        row_id = _id_of(obj)
    try:
        messages = read_messages(obj)
        params = _params(obj)
        tools, choice = row_tools(obj)
    except BadTool as t:
        raise _Bad(t.problem, t.field, row_id) from None
    except _Bad as b:
        b.id = row_id
        if obj.get(batch_api.MARK):
            b.field = batch_api.field_name(b.field)
        raise
    raw = obj.get("id") if row_id is not None else None
    out_id = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    # a row's tools are part of its content; a row without keeps the id it always had
    key = derive_id(messages, params if tools is None else {**params, "tools": tools})
    group = next((g for f in GROUP_FIELDS if isinstance(g := obj.get(f), str) and g), None)
    return Row(row_id or key, messages, params, line, out_id, tools, choice, group=group)


def _decode(s: bytes) -> Any:
    """JSON from one line, with the problem said plainly (encoding first: it explains most)."""
    try:
        obj = orjson.loads(s)
    except orjson.JSONDecodeError as e:
        try:
            s.decode("utf-8")
        except UnicodeDecodeError as u:
            raise _Bad(
                f"not UTF-8 text (byte 0x{s[u.start]:02x} at column {u.start + 1}); "
                "re-encode the file as UTF-8"
            ) from None
        hint = (
            "; a JSON array? genbench reads JSON Lines, one object per line"
            if s[:1] == b"["
            else ""
        )
        raise _Bad(f"not valid JSON ({e.msg} at column {e.colno}){hint}") from None
    if batch_api.is_batch_line(obj):
        try:
            return batch_api.batch_row(obj)
        except batch_api.BatchLineError as b:
            cid = obj.get("custom_id")
            raise _Bad(b.problem, b.field, cid if isinstance(cid, str) and cid else None) from None
    return obj


def scan(
    path: Path,
    done: Collection[str] = frozenset(),
    failed: set[str] | frozenset[str] = frozenset(),
    *,
    shard: ShardSpec | None = None,
    skip_invalid: bool = False,
    limit: int | None = None,
    known_bad: set[str] | frozenset[str] = frozenset(),
    check: RequestCheck | None = None,
) -> InputScan:
    """First pass: validate every row, count, find duplicates; raise, once the pass is
    over, naming every bad row (the first input_errors.SHOWN, and the count), unless
    `skip_invalid`. Rows whose id is in `done` or `failed` (this shard's output of
    earlier runs) are counted, not validated: resume must be fast. `known_bad`: keys ('id'
    or 'line:N') of the errors file, so invalid rows are not reported twice. With
    `check` (and `done` a dict of id -> line key), a done row whose line changed has its
    request compared (`RequestCheck`): a changed one is to do again, and the done ids
    the input no longer has are `removed`."""
    _check_exists(path)
    kind = input_kind(path)
    _not_what_it_says(path, kind)
    res = InputScan(path=path, kind=kind)
    sc = _Scan(res, shard or ShardSpec(1, 1), limit, done, failed, skip_invalid, known_bad, check)
    rows = _items(path, kind)
    seen = 0
    for n, item in rows:
        seen += 1
        if sc.row(n, item):
            break
    if sc.errors.count:
        check_stream(path)  # a corrupt gzip is the file's fault, not the row's
        raise sc.report()
    if not seen:
        raise InputFileError(path, None, "no rows (the file is empty or blank)")
    if res.last_line is not None and sc.shard.count == 1:  # --limit: the rows after it
        res.left = rows_after(path, kind, rows, seen)
    if res.last_line is None:  # read to the end: what was not met is not in the input
        res.removed = [i for i in sc.left_done if check is None or not check.kept_gone(i)]
    return res


class _Scan:
    """The first pass's state (`scan`'s arguments); `row` takes one row and says when
    --limit is reached."""

    def __init__(
        self, res: InputScan, shard: ShardSpec, limit: int | None, done: Collection[str],
        failed: Collection[str], skip_invalid: bool, known_bad: Collection[str],
        check: RequestCheck | None,
    ) -> None:  # fmt: skip
        self.res, self.shard, self.limit, self.check = res, shard, limit, check
        self.done, self.failed, self.known_bad = done, failed, known_bad
        self.skip_invalid = skip_invalid
        # Ids of earlier runs are used up as they are met, so meeting one again is a
        # duplicate; new ids live in res.todo and invalid ones in bad_ids: no set of all ids.
        self.left_done = dict(done) if isinstance(done, dict) else dict.fromkeys(done, 0)
        self.left_failed = set(failed)
        self.bad_ids: set[str] = set()
        self.salt = check.salt & 0xFFFFFFFF if check is not None else None
        self.kept = check is not None and check.has_kept()  # --input-changed keep's own keys
        self.errors = BadRows(res.path, res.where)  # without --skip-invalid: all reported

    def row(self, n: int, item: Any) -> bool:
        res = self.res
        if type(item) is bytes:
            fid = fast_id(item)
            if fid is not None and (src := self.left_done.get(fid)) is not None:
                salt = self.salt  # the hot path of a resume: line_key, inline
                if salt is None or src == (k := len(item) << 32 | _crc(item, salt) or 1) or (
                    self.kept and self.check is not None and self.check.kept_key(fid) == k
                ):
                    del self.left_done[fid]
                    res.done += 1
                    return self.full(n)
        try:
            obj = _decode(item) if type(item) is bytes else item
            row_id = _id_of(obj) if isinstance(obj, dict) else None
            derived = None if row_id is not None else parse_row(obj, n)
        except _Bad as b:
            self.bad(n, b, item)
            return False
        rid = row_id if derived is None else derived.id
        if not self.shard.owns(rid):
            return False
        res.derived += derived is not None
        try:
            if self.earlier(rid, n, obj, derived, item):
                return self.full(n)
        except _Bad as b:
            self.bad(n, b, item)
            return False
        if rid in res.todo or rid in self.bad_ids or rid in self.done or rid in self.failed:
            b = self.dup(rid, n, derived is not None)
            b.field = batch_api.field_name(b.field) if obj.get(batch_api.MARK) else b.field
            self.bad(n, b, item, dup=rid)
            return False
        if derived is None:
            try:
                derived = parse_row(obj, n, row_id)
            except _Bad as b:
                self.bad(n, b, item)
                return False
        if derived.tools and res.tools is None:  # the preflight tries them (tool_probe.py)
            res.tools = (derived.tools, derived.tool_choice)
        res.todo.add(rid)
        return self.full(n)

    def same_line(self, row_id: str, item: Any) -> bool:
        """The done row's input line is byte for byte the one it was made from (or there is
        nothing to compare): its request cannot have changed."""
        if self.check is None:
            return True
        key = self.check.key(raw_of(item))
        return key == self.left_done[row_id] or self.check.kept_key(row_id) == key

    def earlier(self, row_id: str, n: int, obj: Any, derived: Row | None, item: Any) -> bool:
        """A row done or failed in an earlier run (True), or one to do: new, or done for a
        request that has changed since (then in `todo`, and in `check.changed`)."""
        if row_id in self.left_done:
            if not self.same_line(row_id, item):
                assert self.check is not None
                row = derived or parse_row(obj, n, row_id)
                if self.check.changed(row_id, row, self.check.key(raw_of(item))):
                    del self.left_done[row_id]
                    self.res.todo.add(row_id)
                    return True  # counted as a row of the input; done again, or kept
            del self.left_done[row_id]
            self.res.done += 1
            return True
        if row_id in self.left_failed:
            self.left_failed.remove(row_id)
            self.res.failed += 1
            return True
        return False

    def full(self, n: int) -> bool:
        self.res.rows += 1
        if self.limit is not None and self.res.rows >= self.limit:
            self.res.last_line = n
            return True
        return False

    def dup(self, row_id: str, n: int, derived: bool) -> _Bad:
        what = "duplicate row: the same content" if derived else f"duplicate id {row_id!r}"
        unit = self.res.where
        if self.skip_invalid:
            return _Bad(f"{what} as an earlier {unit}", "id", row_id)
        hint = " (ids are derived from the content when a row has none)" if derived else ""
        return _Bad(f"{what}{AT}{hint}; ids must be unique", "id", row_id)  # AT: report()

    def bad(self, n: int, b: _Bad, raw: Any, dup: str | None = None) -> None:
        self.res.bad_lines.add(n)
        if b.id is not None:
            self.bad_ids.add(b.id)
        if not self.skip_invalid:  # counted, the first few kept: reported after the pass
            self.errors.add(n, b.problem, b.field, dup)
            return
        if b.id is None and self.shard.index != 1:
            return  # id-less bad rows are reported by shard 1 only
        # a second copy of an id is kept by its line: its id is the first copy's, to be done
        rid = None if dup is not None else b.id
        if (rid if rid is not None else f"line:{n}") not in self.known_bad:
            self.res.bad.append(BadRow(n, rid, b.problem, b.field, _raw(raw)))

    def report(self) -> InputFileError:
        """Every bad row found, as one error: one row's line as it always was, else each
        row shown in its line and the count of all."""
        path, unit, shard = self.res.path, self.res.where, self.shard
        shown = self.errors.resolved(lambda ids: _first_lines(path, ids, shard))
        if self.errors.count == 1:
            n, problem, field = shown[0]
            return RowError(path, f"{unit} {n}", problem, field)
        lines = [self.errors.line(*s) for s in shown]
        return InputErrors(path, lines, self.errors.count, unit)


def _first_lines(path: Path, ids: set[str], shard: ShardSpec) -> dict[str, int]:
    """Where each id first appeared: one more pass, only on the error path."""
    first: dict[str, int] = {}
    for row in iter_rows(path, ids, set(), shard=shard):
        if isinstance(row, Row) and row.id not in first:
            first[row.id] = row.line
            if len(first) == len(ids):
                break
    return first


def _raw(item: Any) -> str:
    if isinstance(item, bytes):
        text = item.decode("utf-8", "replace")
    else:
        text = orjson.dumps(item, default=str).decode()
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + "…"


def iter_rows(
    path: Path,
    todo: set[str],
    bad_lines: set[int],
    *,
    shard: ShardSpec | None = None,
    last_line: int | None = None,
    salt: int | None = None,
) -> Iterator[Row | BadRow]:
    """Second pass: the rows whose id is in `todo`, in file order. A row that no longer
    parses (the file changed since `scan`) comes back as a BadRow. With `salt`, each row
    carries the key of its line (`Row.src`)."""
    kind = input_kind(path)
    shard = shard or ShardSpec(1, 1)
    for n, item in _items(path, kind):
        if last_line is not None and n > last_line:
            return
        if n in bad_lines:
            continue
        if isinstance(item, bytes) and (fid := fast_id(item)) is not None and fid not in todo:
            continue
        try:
            obj = _decode(item) if isinstance(item, bytes) else item
            row_id = _id_of(obj) if isinstance(obj, dict) else None
            if row_id is not None and row_id not in todo:
                continue
            row = parse_row(obj, n, row_id)
        except _Bad as b:
            yield BadRow(n, b.id, "changed since it was checked: " + b.problem, b.field, _raw(item))
            continue
        if row.id in todo and shard.owns(row.id):
            if salt is not None:
                row.src = line_key(salt, raw_of(item))
            yield row
