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

The dialect a server speaks is decided at preflight, by `check`'s request: `separate`
(its own field), `inline` (the model writes `<think>`), `inline-opened` (the template
opened the block: the text starts inside it), or `none`. When it says `none`, a reasoning
model may still be thinking in `content`: check's reply is short, and a template-opened
thought has no `</think>` in its first tokens. So in `none` each request gets a watching
splitter: its text is answer as it comes, but the first `</think>` with no `<think>` before
it (as vLLM's qwen3 parser reads it), or a reply that opens with `<think>`, shows the
dialect: the stream parser reads that reply again with the dialect's splitter, and the
run's `ThinkState` gives every later request that splitter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_TAGS = ("<think>", "</think>")

SEPARATE = "separate"  # reasoning_content / reasoning: the server split it
INLINE = "inline"  # <think>…</think> in content, the model writes both tags
INLINE_OPENED = "inline-opened"  # the template opened the block: only </think> appears
NONE = "none"  # no thinking seen
DIALECTS = (SEPARATE, INLINE, INLINE_OPENED, NONE)
AUTO = "auto"  # --think-dialect's default: check's reply, then the replies, decide


def parse_dialect(text: str) -> str:
    """`--think-dialect`: auto, or one of DIALECTS, set by the user."""
    if text not in (AUTO, *DIALECTS):
        raise ValueError(
            f"--think-dialect {text!r}: expected one of {', '.join((AUTO, *DIALECTS))}"
        )
    return text


_START, _THINK, _ANSWER, _WATCH = 0, 1, 2, 3


def parse_tags(text: str) -> tuple[str, str]:
    """`--think-tags OPEN,CLOSE`: two non-empty, different tags."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"--think-tags {text!r}: expected two different tags, OPEN,CLOSE")
    return parts[0], parts[1]


@dataclass(frozen=True)
class ThinkMode:
    """How a run reads thinking: the dialect its check saw, and the tags. `fixed`: the
    user set the dialect (--think-dialect): the replies do not change it."""

    dialect: str = NONE
    tags: tuple[str, str] = DEFAULT_TAGS
    fixed: bool = False

    @property
    def inline(self) -> bool:
        return self.dialect in (INLINE, INLINE_OPENED)

    def splitter(self, params: dict[str, Any] | None = None) -> Splitter | None:
        """A splitter for one request, or None when nothing is to be split. A request
        that turns thinking off (`chat_template_kwargs.enable_thinking: false`) has its
        block closed in the prompt: its text starts as answer, whatever the dialect."""
        if not self.inline:
            return None
        opened = self.dialect == INLINE_OPENED and not thinking_off(params)
        return Splitter(self.tags, opened=opened)


def thinking_off(params: dict[str, Any] | None) -> bool:
    """The request turns thinking off (`chat_template_kwargs.enable_thinking: false`)."""
    kwargs = (params or {}).get("chat_template_kwargs") or {}
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False


LEARNED = " (seen in the replies; check's short reply did not show it)"


class ThinkState:
    """The dialect of one run or job, shared by the Clients that send its requests and read
    by each request as it starts: check's, or, where check saw `none`, the one the first
    reply that showed it showed (`learned_from`: that request's id). One event loop: the
    first `learn` wins, and nothing else writes it."""

    __slots__ = ("mode", "learned_from")

    def __init__(self, mode: ThinkMode) -> None:
        self.mode = mode
        self.learned_from: str | None = None

    def splitter(self, params: dict[str, Any] | None = None, where: str = "") -> Splitter | None:
        """The splitter for one request: the dialect's; in `none`, a watching one, unless
        the request turns thinking off (its reply is answer, and shows nothing)."""
        mode = self.mode
        if mode.dialect != NONE or mode.fixed:
            return mode.splitter(params)
        if thinking_off(params):
            return None
        return Splitter(mode.tags, watch=lambda dialect: self.learn(dialect, where))

    def learn(self, dialect: str, where: str) -> None:
        """A reply showed `dialect`: later requests are split that way."""
        if self.mode.dialect == NONE and dialect in (INLINE, INLINE_OPENED):
            self.mode = ThinkMode(dialect, self.mode.tags)
            self.learned_from = where

    def describe(self) -> str:
        return describe(self.mode, learned=self.learned_from is not None)


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
    does not start with one is all answer.

    `watch` (the `none` dialect): text is answer, but a leading OPEN, or a CLOSE with no
    OPEN before it, shows the dialect: `seen` is set to it, `watch(seen)` is called, and
    the splitter stops (what it gave is void: the reply is to be read again with the
    dialect's splitter). An OPEN met first inside the text ends the watch: an answer that
    talks about the tags."""

    __slots__ = ("open", "close", "state", "held", "tags_seen", "watch", "seen")

    def __init__(
        self,
        tags: tuple[str, str] = DEFAULT_TAGS,
        *,
        opened: bool = False,
        watch: Callable[[str], None] | None = None,
    ) -> None:
        self.open, self.close = tags
        self.state = _THINK if opened else _START
        self.held = ""
        self.tags_seen = 0  # tags consumed: they are text of neither kind
        self.watch = watch
        self.seen: str | None = None  # the dialect a watching splitter saw

    @property
    def watching(self) -> bool:
        """A watcher that has seen nothing (yet): what it gave is answer, unsplit."""
        return self.watch is not None and self.seen is None

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
            elif self.state == _WATCH:
                buf = self._watch(buf, answer)
            else:
                answer.append(buf)
                break
        return "".join(thinking), "".join(answer)

    def _start(self, buf: str) -> str:
        """Before any text: does it open with OPEN (leading whitespace allowed)?"""
        body = buf.lstrip()
        if body.startswith(self.open):
            if self.watch is not None:
                return self._saw(INLINE)
            self.state = _THINK
            self.tags_seen += 1
            return body[len(self.open) :]
        if not body or self.open.startswith(body):
            self.held = buf  # may still become OPEN
            return ""
        self.state = _ANSWER if self.watch is None else _WATCH
        return buf

    def _watch(self, buf: str, out: list[str]) -> str:
        """Answer up to the first tag, or to the end less what may begin one (held back).
        CLOSE first: the text before it was thinking. OPEN first: the watch ends."""
        if self.close[0] not in buf and self.open[0] not in buf:  # the common chunk
            out.append(buf)
            return ""
        close, open_ = buf.find(self.close), buf.find(self.open)
        if close >= 0 and (open_ < 0 or close < open_):
            return self._saw(INLINE_OPENED)
        if open_ >= 0:
            self.state = _ANSWER
            return buf
        k = _held(buf, (self.close, self.open))
        out.append(buf[: len(buf) - k])
        self.held = buf[len(buf) - k :]
        return ""

    def _saw(self, dialect: str) -> str:
        self.seen, self.state, self.held = dialect, _ANSWER, ""
        if self.watch is not None:
            self.watch(dialect)
        return ""

    def _scan(self, buf: str, out: list[str], tags: tuple[str, ...]) -> str:
        """Thinking up to the first tag (consumed), or to the end less what may begin a
        tag (held back). CLOSE ends the thinking; OPEN met here is dropped."""
        if all(t[0] not in buf for t in tags):  # the common chunk: no tag can start in it
            out.append(buf)
            return ""
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
    return split_whole(sp, text)[1:]


def split_whole(sp: Splitter, text: str) -> tuple[Splitter, str, str]:
    """A whole reply split by `sp`; a watcher that sees the dialect hands the text to the
    dialect's splitter (`resplit`). The splitter that split it, the thinking, the answer."""
    t, a = sp.feed(text)
    if sp.seen is not None:
        sp = resplit(sp)
        t, a = sp.feed(text)
    t2, a2 = sp.end()
    return sp, t + t2, a + a2


def resplit(watcher: Splitter) -> Splitter:
    """A fresh splitter for the dialect `watcher` saw: the reply is read again with it."""
    tags = (watcher.open, watcher.close)
    return Splitter(tags, opened=watcher.seen == INLINE_OPENED)


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


def describe(mode: ThinkMode, learned: bool = False) -> str:
    """The line a person reads for a dialect; `learned`: seen in the replies, not by check."""
    open_, close = mode.tags
    line = DIALECT_TEXT[mode.dialect].format(open=open_, close=close)
    return line + (LEARNED if learned else "")
