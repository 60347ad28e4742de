"""The defects, as a registry of rules: each a `Defect` with its `--drop` name, how the
reports name it, the rule and thresholds docs/inspect.md states, and its detector. A rule
more is one `register` call (here, or in a module that inspect imports).

Every detector looks at one turn, or one row (its assistant turns and its `meta`), and
nothing else, except duplicates, which compare rows (distribution.duplicates). A row can
have several defects: a thought that loops until max_tokens is both a loop and thinking
that never closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from genbench.rows import OutputRow, Turn

DEFAULT_TAGS = ("<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
MIN_LOOP_CHARS = 64  # a repetition shorter than this is not worth calling a loop
PROBE = 32  # chars at the very end searched for earlier in the window
WHITESPACE = b" \t\n\r\x0b\x0c"


@dataclass(frozen=True)
class Thresholds:
    """What counts as a defect; every field is a flag of `genbench inspect`."""

    min_tokens: int = 16
    loop_window: int = 2000
    loop_cover: float = 0.5
    loop_repeats: int = 3
    dup_min_chars: int = 64
    tags: tuple[str, ...] = field(default=DEFAULT_TAGS)

    def describe(self) -> dict[str, object]:
        return {**asdict(self), "tags": list(self.tags)}  # the fields in order, tags a list


@dataclass(frozen=True, slots=True)
class Loop:
    period: int  # chars
    covered: int  # chars at the end of the text that repeat with that period
    window: int  # chars examined


def find_loop(text: str, th: Thresholds) -> Loop | None:
    """Does `text` end in a repetition? Only its last `loop_window` chars are read.

    The unit of a loop recurs `period` chars before the end, so the last PROBE chars do
    too. They are searched backwards (C speed); each earlier occurrence at shift q is a
    candidate period, kept if the window's tail equals itself shifted by q over enough
    chars. Natural text rarely repeats 32 chars within the window, so most rows cost one
    `rfind`.
    """
    tail = text[-th.loop_window :]
    n = len(tail)
    if n < MIN_LOOP_CHARS:
        return None
    max_period = n // th.loop_repeats
    base = max(MIN_LOOP_CHARS, int(th.loop_cover * n + 0.999999))
    probe = tail[-PROBE:]
    i = tail.rfind(probe, 0, n - 1)
    while i >= 0:
        q = n - PROBE - i
        if q > max_period:
            return None
        need = max(base, th.loop_repeats * q)
        c = need - q  # chars that must equal the chars q before them
        if c <= n - q and tail[n - q - c : n - q] == tail[n - c :]:
            return Loop(q, q + _match_length(tail, q, c), n)
        i = tail.rfind(probe, 0, i + PROBE - 1)
    return None


def _match_length(tail: str, q: int, known: int) -> int:
    """The longest c with tail[-c:] == the c chars q before them (at least `known`)."""
    n = len(tail)
    lo, hi = known, n - q
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tail[n - q - mid : n - q] == tail[n - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _loops(turn: Turn, row: OutputRow, th: Thresholds) -> str | None:
    """A loop at the end of the answer, or else of the thinking."""
    for part, text in (("answer", turn.answer), ("thinking", turn.thinking)):
        if (loop := find_loop(text, th)) is not None:
            return (f"{part} ends in a loop: a {loop.period}-char unit covers the last "
                    f"{loop.covered:,} of {loop.window:,} chars")  # fmt: skip
    return None


def _inline_open(answer: str) -> bool:
    """The answer opens an inline <think> that it never closes."""
    at = answer.rfind("<think>")
    return at >= 0 and answer.find("</think>", at) < 0


def unclosed(turn: Turn, truncated: bool) -> bool:
    """Cut by max_tokens inside the thought: thinking but a blank answer, or an inline
    <think> left open. Needs the row cut by max_tokens: a thought that stopped on its own
    without an answer is an empty answer, not an unclosed one."""
    if not truncated:
        return False
    if turn.thinking.strip() and not turn.answer.strip():
        return True
    return _inline_open(turn.answer)


def empty(turn: Turn, truncated: bool) -> bool:
    """No answer: blank content, or nothing after a closed inline thought (a turn that
    calls tools answers with its calls)."""
    if turn.calls:
        return False
    answer = turn.answer
    if "</think>" in answer:
        answer = answer[answer.rfind("</think>") + len("</think>") :]
    return not answer.strip() and not unclosed(turn, truncated)


def _tags(turn: Turn, row: OutputRow, th: Thresholds) -> str | None:
    for text in (turn.answer, turn.thinking):
        if "<" in text:
            for tag in th.tags:
                if tag in text:
                    return f"contains {tag}"
    return None


def _garbled(turn: Turn, row: OutputRow, th: Thresholds) -> str | None:
    bad = turn.answer.count("\ufffd") + turn.thinking.count("\ufffd")
    return f"{bad} U+FFFD replacement {'char' if bad == 1 else 'chars'}" if bad else None


def answer_keys(row: OutputRow, th: Thresholds) -> tuple[int, int] | None:
    """(exact, normalised) 64-bit hashes of the row's answer, or None when it is too short
    to call a copy (two rows both answering "42" are not a defect).

    Python's own str hash (SipHash, computed once per string in C) is enough here: keys
    are compared within one process only, and 64 bits make a false match between 1M rows
    a one-in-10^7 event. Normalised: case-folded, ASCII whitespace removed (bytes.translate:
    six times cheaper than splitting into words and joining them again).
    """
    answer = "\n".join([t.answer for t in row.turns])  # one turn: the string itself
    if len(answer) < th.dup_min_chars:
        return None
    norm = answer.casefold().encode().translate(None, WHITESPACE)
    if len(norm) < th.dup_min_chars:
        return None
    return hash(answer), hash(norm)


@dataclass(frozen=True)
class Defect:
    """One defect rule. `turn` finds it in one assistant turn, `row` in the whole row (each
    says what it saw, or None); a rule with neither is found across rows (dup)."""

    name: str  # its --drop name
    label: str  # how the reports name it
    rule: str  # what counts, its thresholds (`Thresholds` fields) named
    turn: Callable[[Turn, OutputRow, Thresholds], str | None] | None = None
    row: Callable[[OutputRow, Thresholds], str | None] | None = None


DEFECTS: dict[str, Defect] = {}  # in the order they are reported
BIT: dict[str, int] = {}  # each defect's bit in a row's flags (one byte: 8 rules, scan.py)


def register(d: Defect) -> Defect:
    BIT.setdefault(d.name, 1 << len(BIT))
    DEFECTS[d.name] = d
    return d


register(Defect(
    "loops", "repetition loop", "the end of the thinking or of the answer repeats one unit "
    "(period <= window/repeats chars) at least `loop_repeats` times, covering at least "
    "`loop_cover` of its last `loop_window` chars (and at least 64 chars)", turn=_loops,
))  # fmt: skip
register(Defect(
    "unclosed", "thinking never closed", "cut by max_tokens (finish_reason length) inside the "
    "thought: thinking but no answer, or an answer with an inline <think> never closed",
    turn=lambda t, r, th: "cut by max_tokens inside the thought" if unclosed(t, r.truncated)
    else None,
))  # fmt: skip
register(Defect(
    "empty", "empty answer", "no answer (blank content, or only a closed inline <think> "
    "block) and not cut inside the thought",
    turn=lambda t, r, th: f"no answer (finish {r.finish_reason})" if empty(t, r.truncated)
    else None,
))  # fmt: skip
register(Defect(
    "tags", "leftover tags", "the answer or the thinking contains one of `tags` verbatim",
    turn=_tags,
))  # fmt: skip
register(Defect(
    "garbled", "U+FFFD replacement characters", "the answer or the thinking contains U+FFFD, "
    "the replacement character left by bytes that were not valid UTF-8 (a tokenizer/"
    "detokenizer mismatch)", turn=_garbled,
))  # fmt: skip
register(Defect(
    "short", "too short to supervise", "fewer than `min_tokens` output tokens "
    "(meta.completion_tokens): less than one block of target tokens to supervise",
    row=lambda r, th: f"{r.completion_tokens} output tokens < {th.min_tokens}"
    if r.completion_tokens < th.min_tokens else None,
))  # fmt: skip
register(Defect(
    "dup", "duplicate answer", "the answer (all assistant turns' content, at least "
    "`dup_min_chars` chars) is the same as an earlier row's, exactly or up to case and "
    "whitespace (whitespace removed); the first row is kept",
))  # fmt: skip


def examine(row: OutputRow, th: Thresholds) -> tuple[int, list[tuple[str, str]]]:
    """The row's defect bits (dup aside) and a one-line detail for each defect found: a
    turn's defects in the first turn that has each, then the row's."""
    bits = 0
    details: list[tuple[str, str]] = []
    many = len(row.turns) > 1
    for turn in row.turns:
        where = f"turn #{turn.at}: " if many else ""  # #N: conversations[N], export's ROW#N
        for d in DEFECTS.values():
            if d.turn and not bits & BIT[d.name] and (seen := d.turn(turn, row, th)):
                bits |= BIT[d.name]
                details.append((d.name, where + seen))
    for d in DEFECTS.values():
        if d.row and (seen := d.row(row, th)):
            bits |= BIT[d.name]
            details.append((d.name, seen))
    return bits, details
