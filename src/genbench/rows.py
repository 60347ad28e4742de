"""An output row: SpecForge's `conversations` plus genbench's metadata, as one JSONL line
or one Parquet row (a full JSONL part is converted in a separate process).

Each generated assistant turn also carries the ids the server generated and the prompt
ids it saw (`token_ids`, `prompt_token_ids`: JSON arrays of ints; Parquet list<int32>),
its `finish_reason`, and `token_ids_error` when its ids cannot be trusted; the row's
`meta.token_ids` sums them up (genbench.transport.token_ids). `turn_ids` is the one reader of them
every consumer uses (the trainer export, inspect). The row is written here (`DataRow.line`,
its meta `RowMeta.to_json`) and read back here (`RowMeta.read`; `parse_row`, what `inspect`
reads), side by side."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from genbench.atomic import writing
from genbench.errors import UsageError

MAX_COUNT = 1 << 31  # token counts are read back as int32


def _omit() -> Any:
    """A field written only where it has a value (a chat row has no tool counts)."""
    return field(default=None, metadata={"omit": True})


@dataclass(frozen=True, slots=True)
class RowMeta:
    """A row's `meta`: written by `to_json`, read back by `read` (a file of any age: a key
    it lacks is None, a key it does not know is passed over, a value of the wrong type is
    None). A new field is one line here (its type is its Parquet column) and the code that
    fills it (generate/conversation.py); a field that is None is written as null, or left
    out where it is `_omit()`."""

    server: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    tokens_estimated: bool | None = None
    reasoning_tokens_from: str | None = None  # chunks | tokenizer | server; null: no thinking
    finish_reason: str | None = None
    truncated: bool | None = None
    turns: int | None = None
    attempts: int | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    sent_at: float | None = None
    finished_at: float | None = None
    token_ids: str | None = None  # exact | partial | none | mismatch | unchecked
    request: str | None = _omit()  # the row's request hash (request_hash.py)
    # the row's prompt group, and its speculative acceptance summed over its turns where the
    # server said it (docs/acceptance.md)
    group: str | None = _omit()
    spec_steps: int | None = _omit()
    spec_accepted: int | None = _omit()
    spec_length: float | None = _omit()
    spec_drafted: int | None = _omit()
    spec_dropped: str | None = _omit()  # why a turn's figures were dropped: they cannot be
    # agentic rows only (generate/agent.py)
    tool_policy: str | None = _omit()
    tool_calls: int | None = _omit()
    tool_call_turns: int | None = _omit()
    tool_call_tokens: int | None = _omit()
    tool_results_ran_out: bool | None = _omit()
    tool_names_differ: bool | None = _omit()
    tool_call_cut: bool | None = _omit()

    def to_json(self) -> dict[str, Any]:
        """The `meta` object as a row's line holds it, in declaration order."""
        return {
            f.name: v
            for f in fields(self)
            if (v := getattr(self, f.name)) is not None or not f.metadata.get("omit")
        }

    @classmethod
    def read(cls, meta: Any) -> RowMeta:
        """A row's `meta` as a JSONL line or a Parquet row holds it (anything else: empty)."""
        if not isinstance(meta, Mapping):
            return cls()
        return cls(**{n: v for n, kind in _kinds(cls).items() if _is(v := meta.get(n), kind)})

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RowMeta:
        """The `meta` of a whole row read back."""
        return cls.read(row.get("meta"))


@cache
def _kinds(cls: type[RowMeta]) -> dict[str, str]:
    """Each field's kind: str, int, float or bool (its annotation less `| None`)."""
    return {f.name: str(f.type).split(" |")[0] for f in fields(cls)}


_ARROW = {"str": "string", "int": "int64", "float": "float64", "bool": "bool"}
# the Parquet struct's order as files written before RowMeta hold it (one job's parts share
# one schema); a field added since follows, in declaration order
_PARQUET_ORDER = (
    "server", "model", "prompt_tokens", "completion_tokens", "reasoning_tokens",
    "answer_tokens", "tokens_estimated", "reasoning_tokens_from", "finish_reason", "truncated",
    "turns", "attempts", "ttft_s", "latency_s", "sent_at", "finished_at", "tool_policy",
    "tool_calls", "tool_call_turns", "tool_call_tokens", "tool_results_ran_out",
    "tool_names_differ", "tool_call_cut", "token_ids", "request", "group", "spec_steps",
    "spec_accepted", "spec_drafted", "spec_length",
)  # fmt: skip


def _is(v: Any, kind: str) -> bool:
    """`v` is of a field's kind (a bool is no int; an int is a float)."""
    if isinstance(v, bool):
        return kind == "bool"
    return isinstance(v, {"str": str, "int": int, "float": int | float}.get(kind, object))


def json_default(v: Any) -> Any:
    """orjson's fallback: a turn's ids are kept as arrays (4 bytes an id) until written."""
    if isinstance(v, array):
        return v.tolist()
    return str(v)


@dataclass(frozen=True, slots=True)
class DataRow:
    """A finished row as generate hands it to the store: its output id, its turns, an
    agentic row's `tools` (a trainer renders the template with them) and its meta."""

    id: str | int
    conversations: list[dict[str, Any]]
    meta: RowMeta
    tools: list[dict[str, Any]] | None = None

    def line(self) -> bytes:
        """One output row: SpecForge's conversations format plus genbench's metadata."""
        meta = self.meta.to_json()
        row = {"id": self.id, "conversations": self.conversations}
        row |= {"tools": self.tools, "meta": meta} if self.tools else {"meta": meta}
        return orjson.dumps(row, default=json_default) + b"\n"


@dataclass(frozen=True)
class TurnIds:
    """One generated assistant turn's ids: one training sample (prompt ids, then the
    generated ids the loss is taken on). `prompt`/`generated` are None where the server
    gave none; `error` says why ids that are there cannot be trusted."""

    turn: int  # the turn's index in the row's `conversations`
    prompt: list[int] | None
    generated: list[int] | None
    finish_reason: str | None
    error: str | None = None
    states: str | None = None  # its hidden states' file, relative to the output directory

    @property
    def exact(self) -> bool:
        return self.prompt is not None and self.generated is not None and self.error is None


def turn_ids(row: Mapping[str, Any]) -> list[TurnIds]:
    """Every generated assistant turn of an output row (a JSONL line parsed, or a Parquet
    row as pyarrow's `to_pylist` gives it), in order, with its ids as lists of ints.
    A generated turn is one with a `finish_reason`; assistant turns kept from the input
    (`--turns last`) have none and are not returned."""
    out = []
    for i, t in enumerate(row.get("conversations") or ()):
        assistant = isinstance(t, Mapping) and t.get("role") == "assistant"
        if assistant and t.get("finish_reason") is not None:
            ids = _ints(t.get("prompt_token_ids")), _ints(t.get("token_ids"))
            states = t.get("hidden_states")
            out.append(TurnIds(i, *ids, t["finish_reason"], t.get("token_ids_error"),
                               states if isinstance(states, str) else None))  # fmt: skip
    return out


def _ints(ids: Any) -> list[int] | None:
    return None if ids is None else list(ids)


def parquet_schema(meta_type: type[RowMeta] = RowMeta) -> Any:
    import pyarrow as pa

    fn = pa.struct([("name", pa.string()), ("arguments", pa.string())])
    call = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", fn)])
    turn = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("reasoning_content", pa.string()),
            ("raw", pa.string()),  # generate --keep-raw, where genbench split the thinking
            ("tool_calls", pa.list_(call)),  # an assistant turn that calls tools
            ("tool_call_id", pa.string()),  # a tool result: the call it answers
            ("name", pa.string()),
            ("finish_reason", pa.string()),  # generated turns only
            ("prompt_token_ids", pa.list_(pa.int32())),
            ("token_ids", pa.list_(pa.int32())),
            ("token_ids_error", pa.string()),
            ("hidden_states", pa.string()),  # generate --hidden-states: its states' file
        ]
    )
    kinds = _kinds(meta_type)
    old = [n for n in _PARQUET_ORDER if n in kinds]  # then the fields added since
    order = old + [n for n in kinds if n not in old]
    meta = pa.struct([(n, pa.type_for_alias(_ARROW[kinds[n]])) for n in order])
    fields = [("id", pa.string()), ("conversations", pa.list_(turn))]
    # an agentic row's tools as their JSON text: every row's schema differs
    return pa.schema([*fields, ("tools", pa.string()), ("meta", meta)])


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) or v is None else orjson.dumps(v).decode()


def convert_to_parquet(src: str, dst: str, batch_rows: int = 1000) -> int:
    """JSONL part -> Parquet, streamed in row groups; atomic; returns the rows written.
    Runs in a separate process. Content that is not text (a list of parts) is stored as
    its JSON text, so the schema stays fixed."""

    with writing(dst) as out:  # a full disk leaves no temporary file; the JSONL stays
        return _convert(src, out, batch_rows)


def _convert(src: str, out: BinaryIO, batch_rows: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    n = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as w, open(src, "rb") as f:
        while batch := [_parquet_row(line) for line in islice(f, batch_rows)]:
            w.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


def _parquet_row(line: bytes) -> dict[str, Any]:
    obj = orjson.loads(line)
    obj["id"] = str(obj["id"])  # one column type: integer ids become text
    for t in obj["conversations"]:
        t["content"] = _text(t.get("content"))
    if obj.get("tools") is not None:
        obj["tools"] = _text(obj["tools"])
    return obj


def parquet_ids(path: Path) -> tuple[list[str], list[int]]:
    """A Parquet part's ids and their request hashes (0 where it has none)."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        meta = pf.schema_arrow.field("meta").type if "meta" in names else None
        has_fp = meta is not None and meta.get_field_index("request") >= 0
        table = pf.read(columns=["id", "meta.request"] if has_fp else ["id"])
    except Exception as e:  # pyarrow's own error types
        raise UsageError(f"{path}: cannot read its ids ({e})") from None
    ids = [str(x) for x in table.column("id").to_pylist()]
    if not has_fp:
        return ids, [0] * len(ids)
    col = table.column("meta").combine_chunks().field("request").to_pylist()
    return ids, [int(x, 16) if isinstance(x, str) else 0 for x in col]


# -- the row read back ----------------------------------------------------------------------


@dataclass(slots=True)
class Turn:
    """One assistant turn: its thinking (reasoning_content) and its answer (content)."""

    thinking: str
    answer: str
    calls: int = 0  # tool calls in the turn: an empty answer is no defect then
    at: int = 0  # its index in the row's conversations: the TURN of export's ROW#TURN


@dataclass(slots=True)
class OutputRow:
    """What inspect needs of one output row; `where` is its line (JSONL) or row (Parquet)."""

    id: str | int
    turns: list[Turn]
    completion_tokens: int
    reasoning_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None
    server: str
    truncated: bool
    nbytes: int
    estimated: bool = False  # meta.tokens_estimated: its counts are genbench's, not the server's


class RowFormatError(Exception):
    """A row that is not in generate's format: the problem and the field it is in."""

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.field = problem, field


def _read_text(v: Any, where: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # a list of parts: its text, as generate stores it in Parquet
        return orjson.dumps(v).decode()
    raise RowFormatError(f"expected text, got {type(v).__name__}", where)


def _count(meta: dict[str, Any], key: str, required: bool) -> int | None:
    v = meta.get(key)
    if v is None:
        if required:
            raise RowFormatError("missing: generate writes it for every row", f"meta.{key}")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_COUNT:
        raise RowFormatError(f"expected a count (an integer >= 0), got {v!r}", f"meta.{key}")
    return v


def parse_row(obj: Any, nbytes: int) -> OutputRow:
    """Validate one decoded row of generate's format; raises RowFormatError naming the field."""
    if not isinstance(obj, dict):
        raise RowFormatError(f"expected a JSON object per line, got {type(obj).__name__}")
    rid = obj.get("id")
    if rid is None or isinstance(rid, bool) or not isinstance(rid, str | int) or rid == "":
        raise RowFormatError("missing or not text/an integer", "id")
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise RowFormatError("missing or not a list of turns", "conversations")
    turns: list[Turn] = []
    for i, t in enumerate(conv):
        if not isinstance(t, dict):
            what = f"expected an object, got {type(t).__name__}"
            raise RowFormatError(what, f"conversations[{i}]")
        if t.get("role") == "assistant":
            answer = _read_text(t.get("content"), f"conversations[{i}].content")
            where = f"conversations[{i}].reasoning_content"
            thinking = _read_text(t.get("reasoning_content"), where)
            calls = t.get("tool_calls")
            n_calls = len(calls) if isinstance(calls, list) else 0
            turns.append(Turn(thinking, answer, n_calls, i))
    if not turns:
        raise RowFormatError("no assistant turn: not a generated row", "conversations")
    meta = obj.get("meta")
    if not isinstance(meta, dict):
        raise RowFormatError("missing or not an object (generate's per-row metadata)", "meta")
    if "finish_reason" not in meta:
        raise RowFormatError("missing: generate writes it for every row", "meta.finish_reason")
    finish = meta["finish_reason"]
    if finish is not None and not isinstance(finish, str):
        raise RowFormatError(f"expected text, got {finish!r}", "meta.finish_reason")
    m = RowMeta.read(meta)
    return OutputRow(
        id=rid,
        turns=turns,
        completion_tokens=_count(meta, "completion_tokens", True) or 0,
        reasoning_tokens=_count(meta, "reasoning_tokens", False),
        prompt_tokens=_count(meta, "prompt_tokens", False),
        finish_reason=finish,
        server=m.server or "unknown",
        truncated=m.truncated if m.truncated is not None else finish == "length",
        nbytes=nbytes,
        estimated=m.tokens_estimated is True,
    )
