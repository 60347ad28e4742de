"""The `none` dialect learned from a reply: a watching splitter reads text as answer until
the reply shows thinking (a leading OPEN, or a CLOSE with no OPEN before it); the stream
parser then reads the reply again, so the record is, field for field, the one the
dialect's own splitter makes of the same chunks, at every chunking. A reply that shows
nothing stays unsplit."""

from __future__ import annotations

import itertools

import orjson
import pytest

from genbench.records import RequestRecord
from genbench.transport.stream import StreamParser, parse_whole
from genbench.transport.thinking import (
    INLINE,
    INLINE_OPENED,
    NONE,
    SEPARATE,
    Splitter,
    ThinkMode,
    ThinkState,
    describe,
)

pytestmark = pytest.mark.core

SHORT = ("<t>", "</t>")
FIELDS = (
    "chunk_kinds", "chunk_offsets", "ttft", "ttft_answer", "ttft_thinking", "thinking_chars",
    "answer_chars", "text", "reasoning", "raw", "completion_tokens", "reasoning_tokens",
    "reasoning_source", "finish_reason",
)  # fmt: skip


def compositions(text: str):
    """Every way to cut `text` into non-empty chunks."""
    for mask in range(1 << max(len(text) - 1, 0)):
        bounds = [0, *(i + 1 for i in range(len(text) - 1) if mask >> i & 1), len(text)]
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


def cuts(text: str, n: int):
    for pos in itertools.combinations(range(1, len(text)), n):
        bounds = (0, *pos, len(text))
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


def parse(pieces: list[str], split: Splitter | None) -> RequestRecord:
    rec = RequestRecord(id="r", phase="p")
    parser = StreamParser(rec, 0.0, keep_text=True, split=split, keep_raw=True)
    for i, piece in enumerate(pieces):
        obj = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        parser.feed(b"data: " + orjson.dumps(obj) + b"\n\n", 0.01 * (i + 1))
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 40}}  # fmt: skip
    parser.feed(b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n", 1.0)
    assert parser.finish() is None
    return rec


def fields(rec: RequestRecord) -> dict:
    return {f: getattr(rec, f) for f in FIELDS}


def check(pieces: list[str], tags: tuple[str, str], dialect: str) -> None:
    seen: list[str] = []
    watcher = Splitter(tags, watch=seen.append)
    got = parse(pieces, watcher)
    if dialect == NONE:
        want = parse(pieces, None)  # nothing split: what a Client without a mode records
    else:
        want = parse(pieces, Splitter(tags, opened=dialect == INLINE_OPENED))
    assert fields(got) == fields(want), pieces
    assert seen == ([] if dialect == NONE else [dialect]), pieces


CASES = [  # (text, what it shows), short tags: every chunking of each
    ("ab</t>cd", INLINE_OPENED),  # the template opened the block
    ("a\n</t>\n\nb", INLINE_OPENED),
    ("</t>x", INLINE_OPENED),  # thinking empty
    ("x</t>y</t>", INLINE_OPENED),  # a second CLOSE is answer
    ("<t>a</t>b", INLINE),  # the model wrote OPEN
    (" <t>ab", INLINE),  # opened, cut before CLOSE: all thinking
    ("a<t>b</t>c", NONE),  # OPEN met first inside the text: an answer about tags
    ("ab </ c", NONE),  # no tag at all
    ("x </t", NONE),  # cut inside CLOSE: answer
    ("<t", NONE),  # cut inside OPEN: answer
]


@pytest.mark.parametrize(("text", "dialect"), CASES)
def test_a_watched_reply_is_its_dialect_splitters_at_every_chunking(text, dialect):
    for pieces in compositions(text):
        check(pieces, SHORT, dialect)


@pytest.mark.parametrize(
    ("text", "dialect"),
    [
        ("Okay, let me see.\n</think>\n\nIt is 42.", INLINE_OPENED),
        ("<think>\nhmm\n</think>\n\n42", INLINE),
        ("The tag </think> ends a thought, <think> opens one.", INLINE_OPENED),
        ("Use <think> and </think> to mark thoughts.", NONE),
        ("no tags at all", NONE),
    ],
)
def test_the_real_tags_cut_anywhere(text, dialect):
    for n in (0, 1, 2):
        for pieces in cuts(text, n):
            check(pieces, ("<think>", "</think>"), dialect)


def test_a_whole_reply_is_split_the_same_way():
    def whole(content: str, split: Splitter | None) -> RequestRecord:
        rec = RequestRecord(id="r", phase="p")
        body = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 10}}  # fmt: skip
        assert parse_whole(rec, orjson.dumps(body), 0.0, 1.0, True, split, True) is None
        return rec

    got = whole("ab</t>cd", Splitter(SHORT, watch=lambda d: None))
    assert fields(got) == fields(whole("ab</t>cd", Splitter(SHORT, opened=True)))
    assert (got.reasoning, got.text, got.raw) == ("ab", "cd", "ab</t>cd")
    plain = whole("a<t>b</t>", Splitter(SHORT, watch=lambda d: None))
    assert fields(plain) == fields(whole("a<t>b</t>", None))


def test_the_run_state_learns_once_and_only_from_none():
    state = ThinkState(ThinkMode(NONE))
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert state.splitter(off, "x") is None  # thinking off: nothing to watch, nothing learned
    first, second = state.splitter({}, "warmup-0"), state.splitter({}, "warmup-1")
    assert first is not None and first.watching and second is not None
    first.feed("hmm</think>")
    assert (state.mode.dialect, state.learned_from) == (INLINE_OPENED, "warmup-0")
    second.feed("<think>x")  # a later reply in another dialect changes nothing
    assert (state.mode.dialect, state.learned_from) == (INLINE_OPENED, "warmup-0")
    sp = state.splitter({}, "next")  # later requests: the dialect's own splitter
    assert sp is not None and not sp.watching and sp.feed("a</think>b") == ("a", "b")
    assert state.describe() == describe(ThinkMode(INLINE_OPENED)) + (
        " (seen in the replies; check's short reply did not show it)"
    )
    sep = ThinkState(ThinkMode(SEPARATE))
    assert sep.splitter({}, "x") is None
    sep.learn(INLINE, "x")
    assert sep.mode.dialect == SEPARATE and sep.learned_from is None
