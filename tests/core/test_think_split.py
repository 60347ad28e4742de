"""The inline-thinking splitter: every chunking of a reply gives the split of the whole, and
the whole is split as vLLM's qwen3 reasoning parser splits it."""

from __future__ import annotations

import itertools

import pytest

from genbench.transport.thinking import (
    INLINE,
    INLINE_OPENED,
    NONE,
    SEPARATE,
    Splitter,
    ThinkMode,
    describe,
    detect,
    parse_tags,
    split_text,
)

pytestmark = pytest.mark.core

OPENED = ThinkMode(INLINE_OPENED)
EXPLICIT = ThinkMode(INLINE)


def reference(text: str, opened: bool, tags=("<think>", "</think>")) -> tuple[str, str]:
    """The split written the plain way: no streaming at all."""
    open_, close = tags
    if not opened:
        if not text.lstrip().startswith(open_):
            return "", text
        text = text.lstrip()[len(open_) :]
    if close not in text:
        return text.replace(open_, ""), ""
    thinking, answer = text.split(close, 1)
    return thinking.replace(open_, ""), answer


def chunked(sp: Splitter, pieces: list[str]) -> tuple[str, str]:
    t, a = [], []
    for p in pieces:
        x, y = sp.feed(p)
        t.append(x)
        a.append(y)
    x, y = sp.end()
    return "".join(t) + x, "".join(a) + y


def cuts(text: str, n: int):
    """`text` cut at every choice of n positions."""
    for pos in itertools.combinations(range(1, len(text)), n):
        bounds = (0, *pos, len(text))
        yield [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


TEXTS = [
    "let me see\n</think>\n\nIt is 42.",  # opened by the template
    "<think>hmm</think>answer",  # the model writes both tags
    "  <think>\nhmm\n</think>\n\nanswer",  # whitespace before OPEN
    "no tags at all, a < b and </ not a tag",
    "a</think>b</think>c",  # a second CLOSE: answer text, as vLLM's parser streams it
    "x<think>y</think>z",  # OPEN inside the opened block: dropped
    "</think>",
    "<thi",  # cut off inside OPEN
    "thinking cut by max_tokens </thi",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("opened", [True, False])
def test_every_chunking_gives_the_split_of_the_whole(text, opened):
    want = reference(text, opened)
    assert chunked(Splitter(opened=opened), [text]) == want
    assert chunked(Splitter(opened=opened), list(text)) == want  # a character a chunk
    for n in (1, 2):
        for pieces in cuts(text, n):
            assert chunked(Splitter(opened=opened), pieces) == want, pieces


def test_close_tag_cut_at_every_position_is_still_found():
    text = "abc</think>def"
    for i in range(len(text) + 1):
        sp = Splitter(opened=True)
        t1, a1 = sp.feed(text[:i])
        t2, a2 = sp.feed(text[i:])
        assert (t1 + t2, a1 + a2) == ("abc", "def"), i
        # only a possible tag prefix is held back: the thinking is out as soon as it is known
        assert t1 == text[:i][:3] if i >= 3 else t1 == text[:i], i


def test_held_back_only_what_may_start_a_tag():
    sp = Splitter(opened=True)
    assert sp.feed("a <b </") == ("a <b ", "")
    assert sp.held == "</"
    assert sp.feed("x") == ("</x", "")  # it was not a tag after all


def test_the_qwen3_template_example_whitespace_kept_as_the_parser_keeps_it():
    text = "Okay, the user says hi.\n</think>\n\nHello!"
    assert split_text(text, OPENED) == ("Okay, the user says hi.\n", "\n\nHello!")
    assert split_text("<think>\nhm\n</think>\n\nHi", EXPLICIT) == ("\nhm\n", "\n\nHi")


def test_a_no_thinking_request_starts_as_answer_even_when_the_template_opens_the_block():
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert split_text("Hello there.", OPENED, off) == ("", "Hello there.")
    assert split_text("Hello there.", OPENED) == ("Hello there.", "")  # never closed
    assert split_text("<think>a</think>b", OPENED, off) == ("a", "b")  # still honours OPEN


def test_no_split_where_the_server_splits_or_nothing_thinks():
    assert ThinkMode(SEPARATE).splitter() is None
    assert ThinkMode(NONE).splitter() is None
    assert split_text("<think>x</think>y", ThinkMode(NONE)) == ("", "<think>x</think>y")


def test_custom_tags():
    tags = parse_tags("[[t]], [[/t]]")
    assert tags == ("[[t]]", "[[/t]]")
    mode = ThinkMode(INLINE_OPENED, tags)
    for pieces in cuts("ab[[/t]]cd", 2):
        assert chunked(mode.splitter(), pieces) == ("ab", "cd")
    for bad in ("<think>", "a,a", ",b", "a,b,c"):
        with pytest.raises(ValueError):
            parse_tags(bad)


def test_detect_each_dialect():
    assert detect("OK", separate=True) == SEPARATE
    assert detect("<think>hm", separate=False) == INLINE
    assert detect("hm</think>OK", separate=False) == INLINE_OPENED
    assert detect("hm, still thinking", separate=False, prompt_tail="assistant\n<think>\n") == (
        INLINE_OPENED
    )
    assert detect("OK", separate=False, prompt_tail="assistant\n") == NONE
    assert "</think>" in describe(OPENED) and "template" in describe(OPENED)


def sse(*deltas: dict, usage: dict | None = None) -> bytes:
    import orjson

    out = b""
    for d in deltas:
        out += b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": d}]}) + b"\n\n"
    fin = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    out += b"data: " + orjson.dumps(fin) + b"\n\n"
    if usage:
        out += b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
    return out + b"data: [DONE]\n\n"


def parse(body: bytes, mode: ThinkMode, params=None):
    from genbench.records import RequestRecord
    from genbench.transport.stream import StreamParser

    rec = RequestRecord("q")
    p = StreamParser(rec, 0.0, True, mode.splitter(params))
    for i in range(len(body)):  # a byte a read, each a millisecond later
        p.feed(body[i : i + 1], 0.001 * (i + 1))
    assert p.finish() is None
    return rec


def test_the_stream_parser_splits_inline_thinking_and_times_the_answer():
    # a token a chunk, as vLLM without a reasoning parser sends them; </think> is one token
    tokens = [" 286"] * 3 + ["</th", "ink>"] + ["\n", "OK"] + ["</think>", "!"]
    body = sse(*({"content": t} for t in tokens), usage={"completion_tokens": 9})
    rec = parse(body, OPENED)
    assert (rec.reasoning, rec.text) == (" 286" * 3, "\nOK</think>!")  # a 2nd tag is answer
    assert rec.chunk_kinds == "rrraaaa"  # the closing tag's chunks are text of neither kind
    assert rec.thinking_chars == 12 and rec.answer_chars == 12
    assert rec.ttft < rec.ttft_thinking + 1e-9 < rec.ttft_answer
    # 9 tokens over 7 text chunks and the tag (cut in two chunks): 3 of 8 are thinking
    assert rec.reasoning_tokens == round(9 * 3 / 8) and rec.reasoning_source == "estimate"
    assert rec.completion_tokens == 9 and not rec.tokens_estimated


def test_a_reasoning_field_turns_the_inline_split_off():
    body = sse({"reasoning": "hm"}, {"content": "</think>x"}, usage={"completion_tokens": 3,
               "completion_tokens_details": {"reasoning_tokens": 1}})  # fmt: skip
    rec = parse(body, OPENED)
    assert (rec.reasoning, rec.text) == ("hm", "</think>x")
    assert rec.reasoning_tokens == 1 and rec.reasoning_source is None


def test_parse_whole_splits_too():
    import orjson

    from genbench.records import RequestRecord
    from genbench.transport.stream import parse_whole

    rec = RequestRecord("q")
    msg = {"role": "assistant", "content": "abc</think>de"}
    body = orjson.dumps({"choices": [{"message": msg, "finish_reason": "stop"}],
                         "usage": {"completion_tokens": 10}})  # fmt: skip
    assert parse_whole(rec, body, 0.0, 1.0, True, OPENED.splitter()) is None
    assert (rec.reasoning, rec.text, rec.reasoning_tokens) == ("abc", "de", 6)


def test_text_held_to_the_end_still_counts_and_is_timed():
    rec = parse(sse({"content": "<thi"}, usage={"completion_tokens": 1}), ThinkMode(INLINE))
    assert (rec.reasoning, rec.text) == ("", "<thi")  # never became a tag: answer
    assert rec.answer_chars == 4 and rec.ttft is not None and rec.ttft_answer == rec.ttft
