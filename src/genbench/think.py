"""Thinking told from answer inside `content`, when the server did not split it out.

A server with a reasoning parser sends thinking in its own field (`reasoning_content`,
`reasoning`); without one, the model's thinking arrives in `content`, inside
`<think>…</think>`, or, when the chat template opened the block in the prompt (Qwen3,
DeepSeek-R1), from the first token on, ending at `</think>`. `Splitter` is the small state
machine that splits such a stream: content deltas in, (thinking, answer) pieces out, at
any chunking, holding back only what may be the start of a tag.

It gives what vLLM's qwen3 reasoning parser streams, so the two compare equal: the tags
that open and close the thinking belong to neither part; an opening tag inside the
thinking is dropped; after the first closing tag everything is answer, a second `</think>`
included (tests/test_vllm_think.py saw vLLM 0.32 stream it so); whitespace around the tags
is kept as it came (the parser strips none).

The dialect a server speaks (`Dialect`) is decided once per run, by `check`'s request:
`separate` (its own field), `inline` (the model writes `<think>`), `inline-opened` (the
template opened the block: the text starts inside it), or `none`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_TAGS = ("<think>", "</think>")

SEPARATE = "separate"  # reasoning_content / reasoning: the server split it
INLINE = "inline"  # <think>…</think> in content, the model writes both tags
INLINE_OPENED = "inline-opened"  # the template opened the block: only </think> appears
NONE = "none"  # no thinking seen
DIALECTS = (SEPARATE, INLINE, INLINE_OPENED, NONE)

_START, _THINK, _ANSWER = 0, 1, 2


def parse_tags(text: str) -> tuple[str, str]:
    """`--think-tags OPEN,CLOSE`: two non-empty, different tags."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"--think-tags {text!r}: expected two different tags, OPEN,CLOSE")
    return parts[0], parts[1]


@dataclass(frozen=True)
class ThinkMode:
    """How a run reads thinking: the dialect its check saw, and the tags."""

    dialect: str = NONE
    tags: tuple[str, str] = DEFAULT_TAGS

    @property
    def inline(self) -> bool:
        return self.dialect in (INLINE, INLINE_OPENED)

    def splitter(self, params: dict[str, Any] | None = None) -> Splitter | None:
        """A splitter for one request, or None when nothing is to be split. A request
        that turns thinking off (`chat_template_kwargs.enable_thinking: false`) has its
        block closed in the prompt: its text starts as answer, whatever the dialect."""
        if not self.inline:
            return None
        kwargs = (params or {}).get("chat_template_kwargs") or {}
        thinking_off = isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False
        return Splitter(self.tags, opened=self.dialect == INLINE_OPENED and not thinking_off)


def _held(buf: str, tags: tuple[str, ...]) -> int:
    """How many characters at the end of `buf` may begin one of `tags`."""
    longest = 0
    for tag in tags:
        for k in range(min(len(buf), len(tag) - 1), longest, -1):
            if tag.startswith(buf[-k:]):
                longest = k
                break
    return longest


class Splitter:
    """Content deltas in, (thinking, answer) out. `opened`: the text starts inside the
    thinking block (the template opened it); else a leading OPEN opens it, and text that
    does not start with one is all answer."""

    __slots__ = ("open", "close", "state", "held", "tags_seen")

    def __init__(self, tags: tuple[str, str] = DEFAULT_TAGS, *, opened: bool = False) -> None:
        self.open, self.close = tags
        self.state = _THINK if opened else _START
        self.held = ""
        self.tags_seen = 0  # tags consumed: they are text of neither kind

    @property
    def closed(self) -> bool:
        """The thinking block has ended (or never opened): what follows is answer."""
        return self.state == _ANSWER

    def feed(self, text: str) -> tuple[str, str]:
        """The thinking and the answer in `text` (with what was held back before)."""
        buf = self.held + text if self.held else text
        self.held = ""
        thinking: list[str] = []
        answer: list[str] = []
        while buf:
            if self.state == _START:
                buf = self._start(buf)
                if self.state == _START:
                    break
            elif self.state == _THINK:
                buf = self._scan(buf, thinking, (self.close, self.open))
            else:
                answer.append(buf)
                break
        return "".join(thinking), "".join(answer)

    def _start(self, buf: str) -> str:
        """Before any text: does it open with OPEN (leading whitespace allowed)?"""
        body = buf.lstrip()
        if body.startswith(self.open):
            self.state = _THINK
            self.tags_seen += 1
            return body[len(self.open) :]
        if not body or self.open.startswith(body):
            self.held = buf  # may still become OPEN
            return ""
        self.state = _ANSWER
        return buf

    def _scan(self, buf: str, out: list[str], tags: tuple[str, ...]) -> str:
        """Thinking up to the first tag (consumed), or to the end less what may begin a
        tag (held back). CLOSE ends the thinking; OPEN met here is dropped."""
        first = min(((i, t) for t in tags if (i := buf.find(t)) >= 0), default=None)
        if first is None:
            k = _held(buf, tags)
            out.append(buf[: len(buf) - k])
            self.held = buf[len(buf) - k :]
            return ""
        i, tag = first
        out.append(buf[:i])
        self.tags_seen += 1
        if tag == self.close:
            self.state = _ANSWER
        return buf[i + len(tag) :]

    def end(self) -> tuple[str, str]:
        """The stream ended: what was held back, as the kind it would have been."""
        rest, self.held = self.held, ""
        if self.state == _THINK:
            return rest, ""
        return "", rest


def split_text(text: str, mode: ThinkMode, params: dict[str, Any] | None = None) -> tuple[str, str]:
    """A whole reply's content split as the stream would split it."""
    sp = mode.splitter(params)
    if sp is None:
        return "", text
    t, a = sp.feed(text)
    t2, a2 = sp.end()
    return t + t2, a + a2


def detect(
    content: str, separate: bool, tags: tuple[str, str] = DEFAULT_TAGS, prompt_tail: str = ""
) -> str:
    """The dialect of one reply: `separate` when the server filled a reasoning field;
    inline when the content opens with OPEN, or holds CLOSE (the template opened the
    block); else `inline-opened` when the rendered prompt ends inside an open block
    (`prompt_tail`, where the server can show it); else none."""
    open_, close = tags
    if separate:
        return SEPARATE
    if content.lstrip().startswith(open_):
        return INLINE
    if close in content:
        return INLINE_OPENED
    tail = prompt_tail.rstrip()
    if tail.endswith(open_):
        return INLINE_OPENED
    return NONE


DIALECT_TEXT = {
    SEPARATE: "in its own field (the server splits it: a reasoning parser is on)",
    INLINE: "inline in content, between {open} and {close}: genbench splits it",
    INLINE_OPENED: "inline in content, opened by the chat template and ended by {close}: "
    "genbench splits it",
    NONE: "none seen",
}


def describe(mode: ThinkMode) -> str:
    """The line a person reads for a dialect."""
    open_, close = mode.tags
    return DIALECT_TEXT[mode.dialect].format(open=open_, close=close)
