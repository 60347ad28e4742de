"""A response body in, one `RequestRecord` out: the half of the client that knows no socket.

`StreamParser.feed` takes bytes as they arrive with their arrival time (perf_counter) and
writes what they say into the record: a timestamp per text chunk, thinking told from
answer in both reasoning dialects (`delta.reasoning_content` from SGLang and llama.cpp,
`delta.reasoning` from vLLM), finish reason, the server's `usage` (chunks are not tokens:
with speculative decoding one chunk carries several), in-band errors. `parse_whole` does
the same for a non-streamed JSON body. With no transport in them, their tests feed byte
sequences directly: every read boundary, every fault of the sim (tests/test_stream.py).

SSE: OpenAI-compatible servers send one JSON object per `data:` line. Lines are split
over a carried buffer, so a read may end anywhere, even inside `data:`; one optional
space after the colon is dropped, as the SSE specification says.

What a failure is called (its `ErrorKind` and the line a person reads) is decided in
`genbench.transport.failures`, for the parser as for the connection.
"""

from __future__ import annotations

from array import array
from typing import Any

import orjson
from orjson import JSONDecodeError, loads

from genbench.records import ANSWER, THINKING, RequestRecord
from genbench.transport import acceptance
from genbench.transport.failures import (
    Failure,
    inband_failure,
    incomplete_failure,
    malformed_failure,
    no_choices_failure,
    not_an_object_failure,
)
from genbench.transport.thinking import Splitter, resplit, split_whole
from genbench.transport.token_ids import Ids
from genbench.transport.tool_stream import ToolCalls

_DATA = b"data:"
_DONE = b"[DONE]"
_A, _R = ord(ANSWER), ord(THINKING)

# what `StreamParser.feed` tells the transport: read on, the stream ended, stop reading
MORE, DONE, STOP = 0, 1, 2


class StreamParser:
    """One streamed response: SSE lines in, the record's fields out.

    `text` is where each text-bearing chunk lands. With a `split`
    (`genbench.transport.thinking`), the thinking that arrives inline in `content` is told
    from the answer there, unless the server fills a reasoning field itself. A chunk whose
    text is all tag, or held back as the possible start of one, is no text chunk (the
    server's parser sends none for it).

    A watching `split` (the `none` dialect, `genbench.transport.thinking`) gives answer until it
    sees the dialect; then the reply so far is read again with the dialect's splitter, from its
    first chunk (`watched`), so the record is what that splitter would have made of it.
    While it watches, a chunk it holds back is an answer chunk all the same (its text
    comes with a later one), as the chunk is when nothing is split.
    """

    __slots__ = (
        "rec", "t0", "buf", "kinds", "answer", "thinking", "done", "finished", "failure",
        "split", "last", "raw", "watched", "ids", "add_ids", "tools", "verify_ct",
    )  # fmt: skip

    def __init__(
        self,
        rec: RequestRecord,
        t0: float,
        keep_text: bool,
        split: Splitter | None = None,
        keep_raw: bool = False,
        ids: Ids | None = None,
    ) -> None:
        self.rec = rec
        self.t0 = t0  # when the request was sent: chunk offsets are from here
        self.buf = b""  # an incomplete line from the previous read
        self.kinds = bytearray()  # one byte per text chunk: b"r" thinking, b"a" answer
        self.answer: list[str] | None = [] if keep_text else None
        self.thinking: list[str] | None = [] if keep_text else None
        self.done = False  # [DONE] seen
        self.finished = False  # a finish_reason seen
        self.failure: Failure | None = None
        if split is not None and split.watching and not keep_text:
            split = None  # a watcher reads the kept text again: none kept, none to watch
        self.split = split
        self.last = 0.0  # offset of the last chunk with content
        self.raw: list[str] | None = [] if keep_raw and split is not None else None
        # a watcher's chunk lengths (4 bytes a chunk): the kept answer text cut back into
        # its chunks, at chunk_offsets, to be read again once it sees the dialect
        self.watched: array[int] | None = (
            array("I") if split is not None and split.watching else None
        )
        self.tools: ToolCalls | None = None  # the reply's tool calls, from delta.tool_calls
        self.ids = ids  # the server's token ids when asked (genbench.transport.token_ids)
        self.add_ids = ids.out.fromlist if ids is not None else None
        self.verify_ct = 0  # older SGLang's verify steps, read with the completion tokens

    def feed(self, data: bytes, now: float) -> int:
        """Bytes of the body that arrived at `now`: MORE, DONE ([DONE] seen) or STOP (a
        failure was recorded; read no further)."""
        lines = (self.buf + data if self.buf else data).split(b"\n")
        self.buf = lines.pop()
        if not lines:
            return MORE
        rel = now - self.t0
        for line in lines:
            if not line.startswith(_DATA):
                continue  # blank separators, ": keep-alive" comments, "event:" fields
            payload = line[5:].strip()
            if payload == _DONE:
                self.done = True
                continue
            if not payload:
                continue
            try:
                obj = loads(payload)
            except JSONDecodeError:
                return self._stop(now, malformed_failure(payload))
            # The common chunk (one choice, a delta, no finish_reason, no usage) is handled
            # here; every other one by `_event`, which does the same and more.
            if type(obj) is dict:
                choices = obj.get("choices")
                if type(choices) is list and choices:
                    choice = choices[0]
                    if (
                        type(choice) is dict
                        and not choice.get("finish_reason")
                        and not obj.get("usage")
                    ):
                        if self.add_ids is not None:  # the chunk's ids (vLLM), in place
                            t = choice.get("token_ids")
                            if t and type(t) is list:
                                try:
                                    self.add_ids(t)
                                except (TypeError, OverflowError):
                                    self.ids.malformed()  # type: ignore[union-attr]
                            else:
                                self.ids.event(obj, choice)  # type: ignore[union-attr]
                        delta = choice.get("delta")
                        if not delta:
                            continue
                        if type(delta) is dict:
                            thinking = delta.get("reasoning_content") or delta.get("reasoning")
                            content = delta.get("content")
                            if thinking or content:
                                self.text(rel, thinking, content)
                            if calls := delta.get("tool_calls"):
                                self.tool(rel, calls, bool(thinking or content))
                            continue
            failure = self._event(obj, rel)
            if failure is not None:
                return self._stop(now, failure)
        if self.done:
            self.rec.t_end = now
            return DONE
        return MORE

    def _stop(self, now: float, failure: Failure) -> int:
        self.failure = failure
        self.rec.t_end = now
        return STOP

    def _event(self, obj: Any, rel: float) -> Failure | None:
        """Any chunk: text, finish_reason, usage, or an error event."""
        if not isinstance(obj, dict):
            return not_an_object_failure()
        rec = self.rec
        choices = obj.get("choices")
        choice = choices[0] if choices else None
        if self.ids is not None:
            self.ids.event(obj, choice)
        # acceptance rides on a stream's last chunks: a plain chunk pays four look-ups
        if (
            "metrics" in obj
            or "sglext" in obj
            or "meta_info" in obj
            or (type(choice) is dict and "meta_info" in choice)
        ):
            spec = acceptance.read(obj, choice)
            if spec is not None:
                self._spec(spec)
        if choice:
            delta = choice.get("delta")
            if delta:
                thinking = delta.get("reasoning_content") or delta.get("reasoning")
                content = delta.get("content")
                if thinking or content:
                    self.text(rel, thinking, content)
                if calls := delta.get("tool_calls"):
                    self.tool(rel, calls, bool(thinking or content))
            fr = choice.get("finish_reason")
            if fr:
                rec.finish_reason = fr
                self.finished = True
        elif "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            return inband_failure(msg)
        usage = obj.get("usage")
        if usage:
            apply_usage(rec, usage)
        return None

    def _spec(self, spec: dict[str, Any] | int) -> None:
        if type(spec) is int:
            self.verify_ct = spec
        else:
            _keep_spec(self.rec, spec)  # type: ignore[arg-type]

    def text(self, rel: float, thinking: str | None, content: str | None) -> None:
        """A chunk with text arrived `rel` seconds after the request was sent."""
        quiet = False  # a watcher holding back a possible tag: an answer chunk, text to come
        if self.split is not None:
            if thinking:  # the server splits: nothing inline to split
                self._unsplit()
            elif content:
                self.last = rel
                if self.raw is not None:
                    self.raw.append(content)
                if self.watched is not None:
                    self.watched.append(len(content))
                held, whole = self.split.held, content
                thinking, content = self.split.feed(content)
                if self.split.seen is not None:
                    return self._reread(rel, held + whole)
                if not thinking and not content:
                    if not self.split.watching:
                        return
                    quiet = True
        rec = self.rec
        if rec.ttft is None:
            rec.ttft = rel
        rec.chunk_offsets.append(rel)
        if content or quiet:
            self.kinds.append(_A)
            if rec.ttft_answer is None:
                rec.ttft_answer = rel
            if content:
                rec.answer_chars += len(content)
                if self.answer is not None:
                    self.answer.append(content)
        else:
            self.kinds.append(_R)
        if thinking:
            rec.thinking_chars += len(thinking)
            if rec.ttft_thinking is None:
                rec.ttft_thinking = rel
            if self.thinking is not None:
                self.thinking.append(thinking)

    def tool(self, rel: float, parts: Any, counted: bool) -> None:
        """A chunk carrying tool-call fragments: joined by `ToolCalls`; the chunk is an
        answer chunk (its tokens are output), once, when no text came with it."""
        if self.tools is None:
            self.tools = ToolCalls()
            if self.watched is not None:
                self._unsplit()  # a watcher meets a call: the reply is not inline thinking
        self.tools.feed(parts)
        if counted:
            return
        rec = self.rec
        if rec.ttft is None:
            rec.ttft = rel
        if rec.ttft_answer is None:
            rec.ttft_answer = rel
        rec.chunk_offsets.append(rel)
        self.kinds.append(_A)

    def _reread(self, rel: float, tail: str) -> None:
        """The watcher saw the dialect in the chunk at `rel`: every text field the reply set
        so far is undone, and its chunks are read again, at their times, with the
        dialect's splitter. Until then a watcher gave all it was fed as answer, but for
        what it held back: the kept answer, the held text and this chunk (`tail`) are the
        reply's text, which its chunks' lengths cut back into chunks."""
        assert self.split is not None and self.watched is not None
        lens, self.watched = self.watched, None
        text = "".join(self.answer or ()) + tail
        rels = [*self.rec.chunk_offsets, rel]
        self.split = resplit(self.split)
        rec = self.rec
        rec.ttft = rec.ttft_answer = rec.ttft_thinking = None
        rec.chunk_offsets.clear()
        rec.answer_chars = rec.thinking_chars = 0
        self.kinds.clear()
        for kept in (self.answer, self.thinking, self.raw):
            if kept is not None:
                kept.clear()
        pos = 0
        for at, n in zip(rels, lens, strict=True):
            self.text(at, None, text[pos : pos + n])
            pos += n

    def _unsplit(self) -> None:
        """The server sends a reasoning field: split nothing; what was held is answer."""
        held = self.split.held if self.split is not None else ""
        self.split = self.raw = self.watched = None
        if held:
            self.text(self.last, None, held)

    def _flush(self) -> None:
        """The stream is over: the text held back as a possible tag counts as its kind."""
        if self.split is None:
            return
        thinking, content = self.split.end()
        rec = self.rec
        rec.thinking_chars += len(thinking)
        rec.answer_chars += len(content)
        if (thinking or content) and rec.ttft is None:
            rec.ttft = self.last  # all of it was held: it came with the last chunk
        if content and rec.ttft_answer is None:
            rec.ttft_answer = self.last
        if thinking and rec.ttft_thinking is None:
            rec.ttft_thinking = self.last
        if self.thinking is not None and thinking:
            self.thinking.append(thinking)
        if self.answer is not None and content:
            self.answer.append(content)

    def end(self, now: float) -> None:
        """The body ended at `now`. A last line without its newline still counts."""
        if self.done or self.failure is not None:
            return
        self.rec.t_end = now
        if self.buf:
            self.feed(b"\n", now)

    def stop(self) -> None:
        """The request ended early (failed, cancelled): keep what was seen."""
        self.rec.chunk_kinds = self.kinds.decode("ascii")

    def finish(self) -> Failure | None:
        """The stream is over: complete the record; the failure, if it has one."""
        rec = self.rec
        self.stop()
        if self.failure is not None:
            return self.failure
        self._flush()
        if self.answer is not None:
            rec.text = "".join(self.answer)
            rec.reasoning = "".join(self.thinking or [])
        if self.tools is not None:
            rec.tool_call_count = len(self.tools)
            if self.answer is not None:
                rec.tool_calls = self.tools.result()
        if self.ids is not None:
            self.ids.keep(rec)
        split = self.split if self.split is not None and not self.split.watching else None
        if self.raw is not None and split is not None:  # a watcher that saw nothing split none
            rec.raw = "".join(self.raw)
        if rec.completion_tokens is None:
            estimate_tokens(rec)
        elif self.verify_ct and rec.spec is None:
            rec.spec = acceptance.from_steps(self.verify_ct, rec.completion_tokens)
        acceptance.settle(rec)
        if split is not None and (rec.reasoning_tokens is None or rec.tokens_estimated):
            estimate_thinking(rec, split.tags_seen)
        elif not rec.reasoning_tokens and rec.thinking_chars:  # split, not counted (or 0)
            estimate_thinking(rec, 0)
        if not self.finished:
            why = "[DONE] without a finish_reason" if self.done else "stream ended before finish"
            return incomplete_failure(why)
        return None


def parse_whole(
    rec: RequestRecord,
    body: bytes,
    t0: float,
    now: float,
    keep_text: bool,
    split: Splitter | None = None,
    keep_raw: bool = False,
    ids: Ids | None = None,
) -> Failure | None:
    """A non-streamed response that arrived whole at `now`."""
    rec.t_end = now
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return malformed_failure(body, "response")
    if not isinstance(obj, dict) or not obj.get("choices"):
        return no_choices_failure(obj, body)
    choice = obj["choices"][0]
    msg = choice.get("message") or {}
    content = msg.get("content") or ""
    thinking = msg.get("reasoning_content") or msg.get("reasoning") or ""
    if split is not None and not thinking and isinstance(content, str):
        whole = content
        split, thinking, content = split_whole(split, content)
        if keep_raw and not split.watching:
            rec.raw = whole
    if split is not None and split.watching:
        split = None  # a watcher that saw nothing: the reply is answer, unsplit
    rec.answer_chars, rec.thinking_chars = len(content), len(thinking)
    rec.ttft = now - t0  # the whole reply arrives at once
    if keep_text:
        rec.text, rec.reasoning = content, thinking
    rec.finish_reason = choice.get("finish_reason")
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and calls:
        rec.tool_call_count = len(calls)
        if keep_text:
            rec.tool_calls = calls  # as the server sent them
    if obj.get("usage"):
        apply_usage(rec, obj["usage"])
    else:
        rec.tokens_estimated = True
    if ids is not None:
        ids.whole_response(obj, choice, rec)
    spec = acceptance.read(obj, choice)
    if type(spec) is int:
        spec = acceptance.from_steps(spec, rec.completion_tokens)
    if spec is not None:
        _keep_spec(rec, spec)  # type: ignore[arg-type]
        acceptance.settle(rec)
    if (split is not None and rec.reasoning_tokens is None) or (
        thinking and not rec.reasoning_tokens
    ):  # thinking the server did not count (or counted as 0 tokens: text is never 0)
        share_by_chars(rec, len(thinking), len(content))
    if not rec.finish_reason:
        return incomplete_failure("response without a finish_reason")
    return None


def apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
    rec.completion_tokens = usage.get("completion_tokens", rec.completion_tokens)
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
        rec.reasoning_tokens = details["reasoning_tokens"]
    elif usage.get("reasoning_tokens") is not None:
        rec.reasoning_tokens = usage["reasoning_tokens"]


def estimate_tokens(rec: RequestRecord) -> None:
    """No usage from the server: one token per text chunk (true for servers without
    speculative decoding), marked as estimated."""
    rec.tokens_estimated = True
    rec.completion_tokens = len(rec.chunk_kinds)
    rec.reasoning_tokens = rec.chunk_kinds.count(THINKING)


def share_by_chars(rec: RequestRecord, thinking: int, answer: int) -> None:
    """A whole reply with thinking the server did not count (genbench split it, or the
    server split it and left `reasoning_tokens` out of usage, as llama.cpp does): its
    completion tokens shared out by characters, marked estimated."""
    if rec.completion_tokens is None:
        return
    total = thinking + answer
    rec.reasoning_tokens = round(rec.completion_tokens * thinking / total) if total else 0
    rec.reasoning_source = "estimate"


def estimate_thinking(rec: RequestRecord, tags: int) -> None:
    """Thinking the server did not count, the server counting only completion tokens
    (split inline by genbench, or sent in a reasoning field with no `reasoning_tokens`
    in usage, as llama.cpp does): its tokens shared out by chunks (a chunk a token: exact
    without speculative decoding; the tag chunks count as answer, as a reasoning parser
    counts them), marked estimated until the server's tokenizer counts the thinking text
    (`genbench.transport.thinking_count`)."""
    thinking = rec.chunk_kinds.count(THINKING)
    chunks = len(rec.chunk_kinds) + tags
    total = rec.completion_tokens or 0
    rec.reasoning_tokens = min(total, round(total * thinking / chunks)) if chunks else 0
    rec.reasoning_source = "estimate"


def _keep_spec(rec: RequestRecord, spec: dict[str, Any]) -> None:
    """The figures a reply said, or why they were dropped (never both, never a dropped
    shape in `spec`: its readers take `steps` and `accepted`)."""
    if "dropped" in spec:
        rec.spec, rec.spec_dropped = None, spec["dropped"]
    else:
        rec.spec, rec.spec_dropped = spec, None


__all__ = [
    "StreamParser", "apply_usage", "estimate_thinking", "estimate_tokens", "parse_whole",
    "share_by_chars",
]  # fmt: skip
