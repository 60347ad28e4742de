"""Token fidelity: is the set the tokens the target generated, and what would a trainer
that reads only the text lose?

From the rows alone (the same pass as the defects): how many rows are token-exact (every
generated turn has the prompt ids and the generated ids, trusted), how many generated
turns have no ids or ids genbench found wrong, how many were cut by `max_tokens`, how many
generated fewer than `--min-tokens` ids (a DFlash block).

With a server that tokenizes (`--url`: vLLM's `/detokenize` and `/tokenize`), on a sample
of the turns with ids: each turn's ids are decoded by the server's tokenizer and the text
tokenized again. Where the ids that come back differ, a trainer that re-tokenizes the text
trains on other tokens than the target generated (retokenization drift), even with the
text exactly as generated. The same decoded text also says whether the text genbench kept
(`reasoning_content`, `content`) is what the ids hold.
"""

from __future__ import annotations

import asyncio
import random
from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from genbench.fmt import counted
from genbench.rows import RowMeta, turn_ids

DRIFT_EXAMPLES = 5
DRIFT_SAMPLE = 1000  # turns round-tripped by default: 2,000 requests


@dataclass
class Checked:
    """One sampled turn: where it is, its ids, and the text genbench kept for it."""

    id: str
    ids: array
    texts: tuple[str, ...]


@dataclass
class Fidelity:
    """Counts over every row read, and a reservoir sample of turns with ids to check."""

    min_tokens: int
    sample_size: int = 0
    rows: int = 0
    rows_exact: int = 0
    rows_unchecked: int = 0  # meta.token_ids `unchecked`: ids, but no usage to check them
    by_meta: Counter[str] = field(default_factory=Counter)
    turns: int = 0
    exact: int = 0
    unchecked: int = 0  # turns with ids of an unchecked row
    no_ids: int = 0
    mismatch: int = 0
    cut: int = 0
    short: int = 0
    with_ids: int = 0  # turns that could be sampled
    model: str | None = None  # the rows' model, for the tokenizer's requests
    sample: list[Checked] = field(default_factory=list)
    _rng: random.Random = field(default_factory=lambda: random.Random(0))

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one row's generated turns (a row of an older genbench has none: not exact)."""
        self.rows += 1
        meta = RowMeta.of(row)
        if self.model is None and meta.model is not None:
            self.model = meta.model
        self.by_meta[meta.token_ids or "absent"] += 1
        found = turn_ids(row)
        self.turns += len(found)
        conv = row.get("conversations") or []
        all_exact = bool(found)
        # ids kept but the server sent no usage to count them against: their own count,
        # never token-exact (the row's status says it; a row without one is judged by ids)
        unchecked = meta.token_ids == "unchecked"
        for t in found:
            self.cut += t.finish_reason == "length"
            if t.prompt is None or t.generated is None:
                self.no_ids += 1
                all_exact = False
                continue
            self.short += len(t.generated) < self.min_tokens
            if t.error is not None:
                self.mismatch += 1
                all_exact = False
                continue
            if unchecked:
                self.unchecked += 1
                all_exact = False
            else:
                self.exact += 1
            self._keep(row.get("id"), t.turn, t.generated, conv[t.turn])
        self.rows_exact += all_exact
        self.rows_unchecked += unchecked

    def _keep(self, rid: Any, turn: int, ids: list[int], msg: Any) -> None:
        n = self.with_ids
        self.with_ids += 1
        if self.sample_size <= 0:
            return
        j = n if n < self.sample_size else self._rng.randrange(n + 1)
        if j >= self.sample_size:
            return
        texts = tuple(
            msg.get(k) or "" for k in ("reasoning_content", "content") if isinstance(msg, Mapping)
        )
        checked = Checked(f"{rid}#{turn}", array("i", ids), texts)
        if n < self.sample_size:
            self.sample.append(checked)
        else:
            self.sample[j] = checked

    def describe(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "rows_token_exact": self.rows_exact,
            "rows_not_token_exact": self.rows - self.rows_exact,
            "rows_unchecked": self.rows_unchecked,
            "rows_by_token_ids": dict(sorted(self.by_meta.items())),
            "turns": self.turns,
            "turns_token_exact": self.exact,
            "turns_unchecked": self.unchecked,
            "turns_without_ids": self.no_ids,
            "turns_ids_mismatch": self.mismatch,
            "turns_cut": self.cut,
            "turns_short": self.short,
            "min_tokens": self.min_tokens,
            "drift": None,
        }


def _first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _in_order(decoded: str, texts: tuple[str, ...]) -> bool:
    """Whether each kept text (thinking, then answer) is in the decoded ids, in order."""
    at = 0
    for t in texts:
        if not t:
            continue
        i = decoded.find(t, at)
        if i < 0:
            return False
        at = i + len(t)
    return True


class TokenizerError(Exception):
    """The server did not tokenize: it has no such endpoint, or refused the request."""


def _status_line(status: int, body: bytes) -> str:
    """`HTTP 404: Not Found`: the server's words, without its status said twice."""
    from genbench.transport.failures import error_message_from_body

    words = error_message_from_body(body, 200)
    for head in (f"{status}:", str(status)):  # a body of "404: Not Found"
        if words.startswith(head):
            words = words[len(head) :].strip()
            break
    return f"HTTP {status}: {words}" if words else f"HTTP {status}"


async def _post(pool: Any, url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    status, _, raw = await pool.get(url, 60.0, headers, json=body)
    if status != 200:
        raise TokenizerError(f"{url}: {_status_line(status, raw)}")
    return orjson.loads(raw)


async def _check_one(pool: Any, ep: Any, model: str | None, c: Checked) -> dict[str, Any]:
    headers = ep.headers()
    body: dict[str, Any] = {"tokens": c.ids.tolist()}
    if model:
        body["model"] = model
    dec = await _post(pool, ep.root + "/detokenize", headers, body)
    text = dec.get("prompt") if isinstance(dec, dict) else None
    if not isinstance(text, str):
        raise TokenizerError(f"{ep.root}/detokenize: no 'prompt' text in its answer")
    body = {"prompt": text, "add_special_tokens": False, **({"model": model} if model else {})}
    tok = await _post(pool, ep.root + "/tokenize", headers, body)
    again = tok.get("tokens") if isinstance(tok, dict) else None
    if not isinstance(again, list):
        raise TokenizerError(f"{ep.root}/tokenize: no 'tokens' list in its answer")
    ids = c.ids.tolist()
    return {
        "id": c.id,
        "drift": again != ids,
        "text": _in_order(text, c.texts),
        "at": _first_difference(ids, again),
        "ids": ids,
        "again": again,
    }


async def check_drift(
    sample: list[Checked], ep: Any, model: str | None, concurrency: int = 8
) -> dict[str, Any]:
    """Round-trip each sampled turn's ids through the server's tokenizer; the drift rate."""
    from genbench.transport.client import ConnectionPool
    from genbench.transport.failures import Failure

    pool = ConnectionPool(ep.root)
    sem = asyncio.Semaphore(concurrency)

    async def one(c: Checked) -> dict[str, Any]:
        async with sem:
            return await _check_one(pool, ep, model, c)

    try:
        results = await asyncio.gather(*(one(c) for c in sample))
    except (TokenizerError, Failure, ValueError) as e:  # ValueError: an answer not JSON
        return {"url": ep.root, "checked": 0, "error": str(e)}
    finally:
        await pool.close()
    drifted = [r for r in results if r["drift"]]
    examples = []
    for r in drifted[:DRIFT_EXAMPLES]:
        at = r["at"]
        examples.append({"id": r["id"], "at": at, "ids": r["ids"][at : at + 5],
                         "retokenized": r["again"][at : at + 5]})  # fmt: skip
    n = len(results)
    return {
        "url": ep.root,
        "checked": n,
        "drifted": len(drifted),
        "rate": len(drifted) / n if n else None,
        "text_not_in_ids": sum(1 for r in results if not r["text"]),
        "examples": examples,
    }


def fidelity_lines(f: dict[str, Any] | None, console: Any) -> None:
    """The token ids' lines of inspect's summary."""
    if not f:
        return
    by = ", ".join(f"{k} {v:,}" for k, v in f["rows_by_token_ids"].items())
    unchecked = f.get("rows_unchecked", 0)
    console.print(
        f"token ids: {f['rows_token_exact']:,} of {counted(f['rows'], 'row')} token-exact"
        + (
            f", {unchecked:,} unchecked (ids kept, but the server sent no usage to count "
            "them against)"
            if unchecked
            else ""
        )
        + f" (meta.token_ids: {by}); {f['turns']:,} generated turns: "
        f"{f['turns_token_exact']:,} exact, "
        + (f"{f['turns_unchecked']:,} unchecked, " if f.get("turns_unchecked") else "")
        + f"{f['turns_without_ids']:,} without ids, {f['turns_ids_mismatch']:,} ids "
        f"mismatched; {f['turns_cut']:,} cut by max_tokens, {f['turns_short']:,} with fewer "
        f"than {f['min_tokens']} ids"
    )
    d = f.get("drift")
    if not d:
        return
    if d.get("error") or d.get("note"):
        console.print(
            f"[yellow]retokenization drift: not measured:[/] {d.get('error') or d['note']}"
        )
        return
    ex = "; ".join(
        f"{e['id']} at id {e['at']}: {e['ids']} -> {e['retokenized']}" for e in d["examples"][:2]
    )
    console.print(
        f"retokenization drift: {d['drifted']:,} of {d['checked']:,} turns ({d['rate']:.0%}) "
        f"come back as other ids when their text is tokenized again by {d['url']}"
        + (f" (e.g. {ex})" if ex else "")
        + f"; text not in its ids: {d['text_not_in_ids']:,}"
    )
