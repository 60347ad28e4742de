"""The sim's token ids, in the dialect it plays (`--token-ids`): deterministic, so a test
can say which ids a reply must carry.

A generated token is a word of the sim's text (`wire.TEXT`); its id is `word_id(word)`:
`ID_BASE` + the word's place in `VOCAB`. A prompt is tokenized as `count_prompt` counts
it: per message `<start>` (1), its role, its words, `<end>` (2) and a newline (3), a
prompt word's id `word_id` of it (a word outside `VOCAB` hashes above `ID_BASE + len`).
One id per emitted token, as many as `usage.completion_tokens` (the sim sends no EOS id:
it emits no EOS token).

Dialects, as read in each engine's source (genbench.transport.token_ids):

* `vllm`: asked with `return_token_ids`; `prompt_token_ids` at the top level of the first
  chunk, `token_ids` in each chunk's choice; a whole body has both at the same places.
* `sglang`: asked with `return_input_ids_in_sglext` / `return_output_ids_in_sglext`; the
  ids once, in a `choices: []` chunk before `[DONE]` (`sglext.input_ids`, `output_ids` one
  list per choice), or in the body; `return_token_ids` on a stream is refused (400), on a
  whole body gives `prompt_token_ids` and `token_ids` in the choice.
* `none` (the default; llama.cpp's chat endpoint): no ids, whatever is asked.
"""

from __future__ import annotations

from typing import Any

import orjson

from genbench.sim.text import TEXT, TEXT_LEN, VOCAB

ID_BASE = 100
_INDEX = {w: i for i, w in enumerate(VOCAB)}
ROLE_IDS = {"system": 5, "developer": 5, "user": 6, "assistant": 7, "tool": 8}
# the id of every token of the text, as the bytes a chunk carries
TEXT_ID_BYTES = [b"%d" % (ID_BASE + _INDEX[w]) for w in TEXT]

SGLANG_STREAM_REFUSED = (
    "return_token_ids is not supported with streaming on /v1/chat/completions. "
    "Please set stream=false when using return_token_ids=true."
)


def word_id(word: str) -> int:
    w = word.strip(" \ufffd")
    i = _INDEX.get(w)
    return ID_BASE + i if i is not None else ID_BASE + len(VOCAB) + sum(map(ord, w)) % 50_000


def text_ids(pos: int, n: int) -> bytes:
    """The ids of tokens [pos, pos + n) of the text, comma-separated."""
    return b",".join(TEXT_ID_BYTES[(pos + j) % TEXT_LEN] for j in range(n))


def prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    """The prompt as the sim tokenizes it: as many ids as `count_prompt` counts."""
    out: list[int] = []
    for m in messages:
        out += [1, ROLE_IDS.get(str(m.get("role")), 9)]
        content = m.get("content")
        if isinstance(content, str):
            out += [word_id(w) for w in content.split()]
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out += [word_id(w) for w in part["text"].split()]
        out += [2, 3]
    return out


def asked(dialect: str, body: dict[str, Any]) -> str | None:
    """What a request asked of a sim playing `dialect`: 'stream' (ids in the stream),
    'sglang-refused' (SGLang's answer to return_token_ids on a stream), or None."""
    if dialect == "vllm":
        return "stream" if body.get("return_token_ids") else None
    if dialect == "sglang":
        if body.get("return_token_ids"):  # refused on a stream whatever else is asked
            return "sglang-refused" if body.get("stream") else "stream"
        if body.get("return_input_ids_in_sglext") or body.get("return_output_ids_in_sglext"):
            return "stream"
    return None


def first_chunk_tail(prompt: list[int]) -> bytes:
    """vLLM's first chunk closes with the prompt's ids at its top level."""
    return b'{"role":"assistant","content":""},"finish_reason":null}],"prompt_token_ids":' + (
        orjson.dumps(prompt) + b"}\n\n"
    )


def sglext_chunk(
    head: dict[str, Any], prompt: list[int], out: list[int],
    more: dict[str, Any] | None = None, ids: str | None = "sglang",
) -> bytes:  # fmt: skip
    """SGLang's one `sglext` chunk: the ids when asked, and `more` (its other fields)."""
    ext = {"input_ids": prompt, "output_ids": [out]} if ids == "sglang" else {}
    ext.update(more or {})
    return b"data: " + orjson.dumps({**head, "choices": [], "sglext": ext}) + b"\n\n"


def whole(dialect: str, body: dict[str, Any], out: dict[str, Any], prompt: list[int],
          gen: list[int]) -> None:  # fmt: skip
    """Put the ids into a whole response `out`, where the dialect puts them."""
    choice = out["choices"][0]
    if dialect == "vllm":
        out["prompt_token_ids"] = prompt
        choice["token_ids"] = gen
    elif body.get("return_token_ids"):  # SGLang's per-choice fields
        choice["prompt_token_ids"] = prompt
        choice["token_ids"] = gen
    else:
        ext: dict[str, Any] = {}
        if body.get("return_input_ids_in_sglext"):
            ext["input_ids"] = prompt
        if body.get("return_output_ids_in_sglext"):
            ext["output_ids"] = [gen]
        out["sglext"] = ext


TEXT_IDS = [ID_BASE + _INDEX[w] for w in TEXT]
IDS_SUF = b'"},"finish_reason":null,"token_ids":['  # a chunk's tail, its ids after it
IDS_END = b"]}]}\n\n"


def generated(r: Any) -> list[int]:
    """Every id a request emitted so far (`wire.Req`), fault script, call or plain text."""
    if r.tool is not None:
        return r.tool.token_ids(0, r.emitted)
    if r.script is not None:
        return [word_id(r.script.word(i)) for i in range(r.emitted)]
    return [TEXT_IDS[(r.pos + j) % TEXT_LEN] for j in range(r.emitted)]
