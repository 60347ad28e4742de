"""The token ids a server generated, kept as they stream in: the drafter's training data.

A drafter (EAGLE-3, DFlash) learns the target model's own tokens. Re-tokenizing the text
gives other tokens (`" 1671"` comes back as `" 167","17"`), so `generate` asks the server
for the ids it generated and the prompt ids it saw, and keeps them exactly as served.
Each engine offers them its own way (read in their sources):

* `vllm`: the request sets `return_token_ids`; a stream carries the prompt's ids at the
  top level of its first chunk (`prompt_token_ids`) and each chunk's generated ids in its
  choice (`choices[0].token_ids`), some chunks with ids and no text (the ids of
  `</think>` under a reasoning parser, the final EOS); a whole response has both at the
  same places (vllm `entrypoints/openai/chat_completion/serving.py`).
* `sglang`: `return_token_ids` is refused on a streamed chat request; the request sets
  `return_input_ids_in_sglext` and `return_output_ids_in_sglext`, and the ids come once,
  whole, in the response-level `sglext` extension (`input_ids`, and `output_ids` one list
  per choice): in the last chunk before `[DONE]` (`choices: []`) or the body.
* llama.cpp's chat endpoint returns no ids (its `return_tokens` fills the native
  `/completion`'s `tokens`, without the prompt's): a server with no ids is `None`.

`Ids` collects one reply's ids in compact arrays (4 bytes an id: a list of ints costs
36), filled per chunk without a dict or object made. What a turn kept is checked against
the server's own count (`usage`): `check_turn` says why a turn's ids cannot be trusted.
"""

from __future__ import annotations

from array import array
from typing import Any

from genbench.transport.server_kind import traits

VLLM, SGLANG = "vllm", "sglang"
DIALECTS = (VLLM, SGLANG)

# what a request sets to be given the ids, per dialect
REQUEST_FIELDS: dict[str, dict[str, bool]] = {
    VLLM: {"return_token_ids": True},
    SGLANG: {"return_input_ids_in_sglext": True, "return_output_ids_in_sglext": True},
}

# the row's `meta.token_ids`: every generated turn's ids kept and matching the server's
# counts; some turns without ids; no turn with ids; a turn whose ids disagree with the
# server's counts (or came malformed); ids kept but no usage to check them against
EXACT, PARTIAL, NONE, MISMATCH, UNCHECKED = "exact", "partial", "none", "mismatch", "unchecked"


class Ids:
    """One reply's ids as they arrive: `prompt` and `out` (the generated ids, in order).

    `out.fromlist` is what the stream parser calls per chunk with ids; anything else
    (prompt ids, SGLang's whole lists, a malformed field) goes through `event`."""

    __slots__ = ("prompt", "out", "bad", "whole")

    def __init__(self) -> None:
        self.prompt: array[int] | None = None
        self.out: array[int] = array("i")
        self.bad: str | None = None  # why the ids that came cannot be kept
        self.whole = False  # `out` came whole (SGLang's sglext), not per chunk

    def event(self, obj: dict[str, Any], choice: Any) -> None:
        """A chunk (or a whole response) other than a plain chunk with ids: the prompt's
        ids, a choice's ids, SGLang's `sglext` lists."""
        try:
            p = obj.get("prompt_token_ids")
            if p is None and type(choice) is dict:
                p = choice.get("prompt_token_ids")  # SGLang's return_token_ids, per choice
            if p is not None and self.prompt is None:
                self.prompt = array("i", p)
            if type(choice) is dict:
                t = choice.get("token_ids")
                if t:
                    self.out.extend(t)
            ext = obj.get("sglext")
            if type(ext) is dict:
                self._sglext(ext)
        except (TypeError, OverflowError, ValueError):
            self.bad = "the server's token ids are not a list of 32-bit integers"

    def _sglext(self, ext: dict[str, Any]) -> None:
        inp, out = ext.get("input_ids"), ext.get("output_ids")
        if inp is not None:
            self.prompt = array("i", inp)
        if isinstance(out, list) and out and isinstance(out[0], list):
            out = out[0]  # one list per choice; genbench asks for one choice
        if out is not None:
            new = array("i", out)  # checked whole first: a bad list leaves `out` as it was
            del self.out[:]  # the same array: the parser holds its `fromlist`
            self.out.extend(new)
            self.whole = True

    def malformed(self) -> None:
        """A chunk's `token_ids` was not a list of integers."""
        self.bad = "the server's token ids are not a list of 32-bit integers"

    @property
    def seen(self) -> bool:
        return self.prompt is not None or len(self.out) > 0 or self.bad is not None

    def whole_response(self, obj: dict[str, Any], choice: Any, rec: Any) -> None:
        """A non-streamed response's ids onto its record."""
        self.event(obj, choice)
        self.keep(rec)

    def keep(self, rec: Any) -> None:
        """The reply's ids onto its `RequestRecord`, as the arrays they came in (none: None)."""
        if self.bad is not None:
            rec.token_ids_error = self.bad
        elif self.seen:
            rec.prompt_token_ids = self.prompt
            rec.token_ids = self.out if (len(self.out) or self.whole) else None


def check_turn(
    prompt: array[int] | list[int] | None,
    out: array[int] | list[int] | None,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    tokens_estimated: bool,
) -> tuple[str, str | None]:
    """A generated turn's status (EXACT, NONE, MISMATCH, UNCHECKED) and, when its ids
    cannot be trusted, why: the ids must be there, both lists, and as many as the server
    counted in its `usage` (a chunk lost, or ids for only part of the reply, show here).
    Whether they decode to the turn's text is not asked here: that takes the tokenizer."""
    if prompt is None and out is None:
        return NONE, None
    if prompt is None:
        return MISMATCH, "generated ids without the prompt's"
    if out is None:
        return MISMATCH, "the prompt's ids without the generated ones"
    if tokens_estimated or completion_tokens is None:
        return UNCHECKED, None
    if len(out) != completion_tokens:
        return MISMATCH, f"{len(out)} generated ids for {completion_tokens} completion tokens"
    if prompt_tokens is not None and len(prompt) != prompt_tokens:
        return MISMATCH, f"{len(prompt)} prompt ids for {prompt_tokens} prompt tokens"
    return EXACT, None


def row_status(turns: list[str]) -> str:
    """The row's `meta.token_ids` from its generated turns' statuses."""
    if not turns or all(s == NONE for s in turns):
        return NONE
    if MISMATCH in turns:
        return MISMATCH
    if NONE in turns:
        return PARTIAL
    if UNCHECKED in turns:
        return UNCHECKED
    return EXACT


# `--token-ids`: ask where the server can give them (auto), insist (on), never ask (off)
MODES = ("auto", "on", "off")

HOW = {
    VLLM: "vLLM's return_token_ids",
    SGLANG: "SGLang's sglext ids",
}


def ask_for(kind: str | None, mode: str) -> tuple[str | None, str | None]:
    """How check's test request asks a server of this kind for ids (None: not in it; a
    kind not known to give them or not is asked apart), and why none can come, when known."""
    t = traits(kind)
    if mode == "off" or asked_apart(kind):
        return None, None
    return t.ids, None if t.ids else f"{kind}'s chat endpoint returns no token ids"


def asked_apart(kind: str | None) -> bool:
    """A kind not known to give ids or not: asked as vLLM is, in a request of its own
    (check.preflight), so a server that refuses the field fails only that."""
    t = traits(kind)
    return t.ids is None and not t.no_ids


def reply_ids(rec: Any, ask: str) -> tuple[str | None, str | None]:
    """What a reply asked in dialect `ask` (a `RequestRecord`) says of the server: the
    dialect it gives ids in, or None and why."""
    if rec.token_ids_error is not None:
        return None, rec.token_ids_error
    if rec.token_ids is None or rec.prompt_token_ids is None:
        return None, f"asked for {HOW[ask]}, the server sent none"
    _, why = check_turn(rec.prompt_token_ids, rec.token_ids, rec.prompt_tokens,
                        rec.completion_tokens, rec.tokens_estimated)  # fmt: skip
    return (ask, None) if why is None else (None, why)


def describe(dialect: str | None, note: str | None) -> str:
    """One line for check and the job: how the ids come, or why none do."""
    if dialect is not None:
        return f"yes ({HOW[dialect]}): rows keep the ids the server generated"
    return f"none ({note or 'the server sent none'}): rows are not token-exact"
