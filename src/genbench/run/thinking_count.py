"""run's result.json `thinking`: where the thinking arrived and who counted its tokens."""

from __future__ import annotations

from typing import Any

from genbench.transport.thinking import ThinkState
from genbench.transport.thinking_count import ThinkingCounter


def note_thinking(
    doc: dict[str, Any], state: ThinkState | None, counter: ThinkingCounter
) -> None:
    """run's result.json `thinking`, after a phase: the dialect (`learned`, and the request
    it was learned from, where check saw none and a reply showed it) and who counted the
    thinking tokens: `estimate` as soon as one record's were estimated by chunks (the
    server counted them nowhere and its /tokenize did not answer), else `tokenizer` where
    the server's /tokenize counted some, else the server's usage."""
    if state is not None:
        doc["dialect"] = state.mode.dialect
        if state.learned_from is not None:
            doc["learned"], doc["learned_from"] = True, state.learned_from
    if "estimate" in counter.sources:
        doc["tokens_from"] = "estimate"
    elif "tokenizer" in counter.sources:
        doc["tokens_from"] = "tokenizer"
    elif state is not None and state.mode.inline:
        doc["tokens_from"] = "tokenizer" if counter.available else "estimate"
